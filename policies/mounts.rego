# Bind mounts and named volumes.
#
# Mounts are judged by mounts[].resolved: the host path normalisation
# resolved (clean, absolute, every symlink followed), compared component by
# component, never by string prefix, so "/srv/work-evil" is not inside the
# root "/srv/work" and "/srv/work/../../etc" is "/etc".
#
# A sensitive path (data.sandgate.config.sensitive_paths, "*" globs within a
# component, so "/lib*" is /lib, /lib64, /libx32 …) may not be mounted, nor
# anything below it, nor any directory above it (which would expose it), so
# "/" is never mountable. Docker's and other runtimes' sockets
# (data.sandgate.config.docker_socket_names) may not be mounted from
# anywhere. Every mount must lie within one of the gateway's mount roots
# (input.settings.mount_roots, from SANDGATE_MOUNT_ROOTS); with none
# configured, no bind mount is admitted.
package sandgate.admission

import data.sandgate.config

_mounts := object.get(input.request, "mounts", [])

_roots := [_path_parts(r) | some r in object.get(input.settings, "mount_roots", [])]

_sensitive := [{"path": p, "parts": _path_parts(p)} | some p in config.sensitive_paths]

_path_parts(p) := [c | some c in split(p, "/"); c != ""]

# _resolved holds the mounts whose resolved path can be judged.
_resolved contains {"index": i, "mount": m, "parts": _path_parts(m.resolved)} if {
	some i, m in _mounts
	startswith(m.resolved, "/")
}

finding contains {
	"rule": "mount_unresolved",
	"message": sprintf("mounts[%d]: source %q has no resolved host path; only normalised requests are admitted", [i, object.get(m, "source", "")]),
	"controls": ["CIS-5.6"],
} if {
	some i, m in _mounts
	not startswith(object.get(m, "resolved", ""), "/")
}

finding contains {
	"rule": "no_sensitive_mounts",
	"message": sprintf("mounts[%d]: %q (resolved %s) exposes the sensitive host path %s", [r.index, r.mount.source, r.mount.resolved, s.path]),
	"controls": ["CIS-5.6", "PSS-baseline"],
} if {
	some r in _resolved
	some s in _sensitive
	_overlaps(r.parts, s.parts)
}

# _overlaps is true when the mount path is the sensitive path, lies below it
# or lies above it: their common leading components all match.
_overlaps(mount, sensitive) if {
	n := min([count(mount), count(sensitive)])
	every i, c in array.slice(mount, 0, n) {
		glob.match(sensitive[i], [], c)
	}
}

finding contains {
	"rule": "no_docker_socket",
	"message": sprintf("mounts[%d]: %q (resolved %s) is a container runtime socket", [r.index, r.mount.source, r.mount.resolved]),
	"controls": ["CIS-5.32", "PSS-baseline"],
} if {
	some r in _resolved
	some name in _socket_candidates(r)
	name in config.docker_socket_names
}

# _socket_candidates are the base names a mount is known by: of its
# resolved path and of the path it was requested as.
_socket_candidates(r) := {_base(r.parts), _base(_path_parts(object.get(r.mount, "source", "")))}

_base(parts) := parts[count(parts) - 1] if count(parts) > 0
else := ""

finding contains {
	"rule": "mount_outside_roots",
	"message": sprintf("mounts[%d]: %q (resolved %s) is not within a mount root (%s)", [r.index, r.mount.source, r.mount.resolved, concat(", ", input.settings.mount_roots)]),
	"controls": ["CIS-5.6"],
} if {
	count(_roots) > 0
	some r in _resolved
	not _within_a_root(r.parts)
}

finding contains {
	"rule": "mount_outside_roots",
	"message": sprintf("mounts[%d]: bind mounts are disabled: no mount roots are configured (SANDGATE_MOUNT_ROOTS)", [r.index]),
	"controls": ["CIS-5.6"],
} if {
	count(_roots) == 0
	some r in _resolved
}

_within_a_root(parts) if {
	some root in _roots
	count(root) <= count(parts)
	array.slice(parts, 0, count(root)) == root
}

finding contains {
	"rule": "mount_propagation",
	"message": sprintf("mounts[%d]: %s propagation is forbidden; use private or rprivate", [i, m.propagation]),
	"controls": ["CIS-5.20"],
} if {
	some i, m in _mounts
	lower(m.propagation) in {"shared", "rshared"}
}

finding contains {
	"rule": "volume_name",
	"message": sprintf("volumes[%d]: name %q must be a plain name (letters, digits, '_', '.', '-'), not a path", [i, v.name]),
	"controls": ["CIS-5.6"],
} if {
	some i, v in object.get(input.request, "volumes", [])
	not regex.match(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`, v.name)
}
