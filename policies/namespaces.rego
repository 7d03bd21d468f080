# Host namespaces (and another container's) must not be shared. Each mode
# must be empty (Docker's private default); IPC may also be "none" (private,
# without /dev/shm) or "private", spelt exactly so: those are the modes the
# executor sets.
package sandgate.admission

finding contains {
	"rule": "host_pid",
	"message": sprintf("pid_mode %q shares a namespace with the host or another container; leave it empty", [mode]),
	"controls": ["CIS-5.16", "PSS-baseline"],
	"action": "deny",
} if {
	mode := input.request.pid_mode
	mode != ""
}

finding contains {
	"rule": "host_ipc",
	"message": sprintf("ipc_mode %q is not a private IPC namespace; leave it empty, or ask for \"private\" or \"none\"", [mode]),
	"controls": ["CIS-5.17", "PSS-baseline"],
	"action": "deny",
} if {
	mode := input.request.ipc_mode
	not mode in {"", "none", "private"}
}

finding contains {
	"rule": "host_uts",
	"message": sprintf("uts_mode %q shares a namespace with the host; leave it empty", [mode]),
	"controls": ["CIS-5.21", "PSS-baseline"],
	"action": "deny",
} if {
	mode := input.request.uts_mode
	mode != ""
}

finding contains {
	"rule": "host_userns",
	"message": sprintf("userns_mode %q shares the host's user namespace; leave it empty", [mode]),
	"controls": ["CIS-5.31"],
	"action": "deny",
} if {
	mode := input.request.userns_mode
	mode != ""
}
