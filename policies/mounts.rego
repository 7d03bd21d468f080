# Bind mounts and named volumes.
#
# Mounts are judged by mounts[].resolved: the host path normalisation
# resolved (clean, absolute, every symlink followed), so "/srv/work/../../etc"
# arrives as "/etc" and a symlink to /run/docker.sock as that socket. Paths
# are compared by whole components, never by bare string prefix: globs use
# "/" as their separator, and "a lies within b" means a == b or a starts
# with b followed by "/", so "/srv/work-evil" is not within "/srv/work".
#
# A sensitive path (data.sandgate.config.sensitive_paths; "*" matches within
# one component, so "/lib*" is /lib, /lib64, /libx32 …) may not be mounted,
# nor anything below it, nor any directory above it (which would expose it),
# so "/" is never mountable. Container runtime sockets
# (data.sandgate.config.docker_socket_names) may not be mounted from
# anywhere. Every mount must lie within one of the gateway's mount roots
# (input.settings.mount_roots, from SANDGATE_MOUNT_ROOTS); with none
# configured, no bind mount is admitted.
#
# Each rule first reads input.request.mounts (or volumes) whole: OPA's rule
# index then skips it for a request that has none.
package sandgate.admission

import data.sandgate.config

# _sensitive_glob matches every sensitive path and everything below them.
_sensitive_glob := concat("", ["{", concat(",", config.sensitive_paths), "}{,/**}"])

# _socket_glob matches a runtime socket's path, wherever it is.
_socket_glob := concat("", ["**/{", concat(",", config.docker_socket_names), "}"])

finding contains {
	"rule": "mount_unresolved",
	"message": sprintf("mounts[%d]: source %q has no resolved host path; only normalised requests are admitted", [i, object.get(m, "source", "")]),
	"controls": ["CIS-5.6"],
	"action": "deny",
} if {
	mounts := input.request.mounts
	some i, m in mounts
	not _resolved(m)
}

_resolved(m) if startswith(m.resolved, "/")

finding contains {
	"rule": "no_sensitive_mounts",
	"message": sprintf("mounts[%d]: %q (resolved %s) is, lies below or contains a sensitive host path (data.sandgate.config.sensitive_paths)", [i, m.source, m.resolved]),
	"controls": ["CIS-5.6", "PSS-baseline"],
	"action": "deny",
} if {
	mounts := input.request.mounts
	some i, m in mounts
	_sensitive(m.resolved)
}

# _sensitive: the path is a sensitive path or below one …
_sensitive(p) if glob.match(_sensitive_glob, ["/"], p)

# … or the host root …
_sensitive("/")

# … or above one.
_sensitive(p) if strings.any_prefix_match(config.sensitive_paths, concat("", [p, "/"]))

finding contains {
	"rule": "no_docker_socket",
	"message": sprintf("mounts[%d]: %q (resolved %s) is a container runtime socket", [i, m.source, m.resolved]),
	"controls": ["CIS-5.32", "PSS-baseline"],
	"action": "deny",
} if {
	mounts := input.request.mounts
	socket := _socket_glob
	some i, m in mounts
	some p in [m.resolved, m.source]
	glob.match(socket, ["/"], p)
}

finding contains {
	"rule": "mount_outside_roots",
	"message": sprintf("mounts[%d]: %q (resolved %s) is not within a mount root (%s)", [i, m.source, m.resolved, concat(", ", input.settings.mount_roots)]),
	"controls": ["CIS-5.6"],
	"action": "deny",
} if {
	mounts := input.request.mounts
	_have_roots
	some i, m in mounts
	_resolved(m)
	not _within_a_root(m.resolved)
}

finding contains {
	"rule": "mount_outside_roots",
	"message": sprintf("mounts[%d]: bind mounts are disabled: no mount roots are configured (SANDGATE_MOUNT_ROOTS)", [i]),
	"controls": ["CIS-5.6"],
	"action": "deny",
} if {
	mounts := input.request.mounts
	not _have_roots
	some i, _ in mounts
}

_have_roots if count(input.settings.mount_roots) > 0

_within_a_root(p) if p in input.settings.mount_roots

_within_a_root(p) if strings.any_prefix_match(p, _root_dirs)

# _root_dirs are the mount roots, each with one trailing "/": what a path
# below a root starts with.
_root_dirs := [concat("", [trim_suffix(root, "/"), "/"]) | some root in input.settings.mount_roots]

finding contains {
	"rule": "mount_propagation",
	"message": sprintf("mounts[%d]: %s propagation is forbidden; use private or rprivate", [i, m.propagation]),
	"controls": ["CIS-5.20"],
	"action": "deny",
} if {
	mounts := input.request.mounts
	some i, m in mounts
	lower(m.propagation) in {"shared", "rshared"}
}

finding contains {
	"rule": "volume_name",
	"message": sprintf("volumes[%d]: name %q must be a plain name (letters, digits, '_', '.', '-'), not a path", [i, v.name]),
	"controls": ["CIS-5.6"],
	"action": "deny",
} if {
	volumes := input.request.volumes
	some i, v in volumes
	not _plain_volume_name(v)
}

_plain_volume_name(v) if regex.match(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`, v.name)
