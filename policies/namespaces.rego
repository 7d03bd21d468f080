# Host namespaces (and another container's) must not be shared. Each mode
# must be empty (Docker's private default); IPC may also be "none" (private,
# without /dev/shm) or "private", spelt exactly so: those are the modes the
# executor sets.
package sandgate.admission

# METADATA
# title: No shared PID namespace
# description: >-
#   pid_mode is empty: the host's PID namespace, or another container's,
#   would let the run see and signal their processes.
# custom:
#   severity: high
#   controls: [CIS-5.16, PSS-baseline]
finding contains {
	"rule": "host_pid",
	"message": sprintf("pid_mode %q shares a namespace with the host or another container; leave it empty", [mode]),
	"action": "deny",
} if {
	mode := input.request.pid_mode
	mode != ""
}

# METADATA
# title: Private IPC namespace
# description: >-
#   ipc_mode is exactly empty, none or private, the modes the executor
#   sets: the host's IPC namespace, or another container's, shares their
#   memory segments and queues.
# custom:
#   severity: high
#   controls: [CIS-5.17, PSS-baseline]
finding contains {
	"rule": "host_ipc",
	"message": sprintf("ipc_mode %q is not a private IPC namespace; leave it empty, or ask for \"private\" or \"none\"", [mode]),
	"action": "deny",
} if {
	mode := input.request.ipc_mode
	not mode in {"", "none", "private"}
}

# METADATA
# title: No shared UTS namespace
# description: >-
#   uts_mode is empty: the host's UTS namespace would let the run change
#   the host's name.
# custom:
#   severity: medium
#   controls: [CIS-5.21, PSS-baseline]
finding contains {
	"rule": "host_uts",
	"message": sprintf("uts_mode %q shares a namespace with the host; leave it empty", [mode]),
	"action": "deny",
} if {
	mode := input.request.uts_mode
	mode != ""
}

# METADATA
# title: No host user namespace
# description: >-
#   userns_mode is empty: host mode turns off the daemon's user namespace
#   remapping, so that root in the container is root on the host.
# custom:
#   severity: high
#   controls: [CIS-5.31]
finding contains {
	"rule": "host_userns",
	"message": sprintf("userns_mode %q shares the host's user namespace; leave it empty", [mode]),
	"action": "deny",
} if {
	mode := input.request.userns_mode
	mode != ""
}
