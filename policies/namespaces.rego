# Host namespaces (and another container's) must not be shared.
package sandgate.admission

# _namespace_modes lists, per spec field, the modes that keep the container
# in namespaces of its own.
_namespace_modes := {
	"pid_mode": {"rule": "host_pid", "allowed": {""}, "controls": ["CIS-5.16", "PSS-baseline"]},
	"ipc_mode": {"rule": "host_ipc", "allowed": {"", "none", "private"}, "controls": ["CIS-5.17", "PSS-baseline"]},
	"uts_mode": {"rule": "host_uts", "allowed": {""}, "controls": ["CIS-5.21", "PSS-baseline"]},
	"userns_mode": {"rule": "host_userns", "allowed": {""}, "controls": ["CIS-5.31"]},
}

finding contains {
	"rule": ns.rule,
	"message": sprintf("%s %q shares a namespace with the host or another container; leave it empty", [field, mode]),
	"controls": ns.controls,
} if {
	some field, ns in _namespace_modes
	mode := input.request[field]
	not lower(mode) in ns.allowed
}
