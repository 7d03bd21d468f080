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
# configured, no bind mount is admitted. Within the roots, a team mounts
# only under <root>/<team>/ (or the directories the data maps it to).
#
# Each rule first reads input.request.mounts (or volumes) whole: OPA's rule
# index then skips it for a request that has none. Each reports once, with
# the count of mounts at fault and the first few of them (_mounts_named).
package sandgate.admission

import data.sandgate.config

# _sensitive_glob matches every sensitive path and everything below them.
_sensitive_glob := concat("", ["{", concat(",", config.sensitive_paths), "}{,/**}"])

# _socket_glob matches a runtime socket's path, wherever it is.
_socket_glob := concat("", ["**/{", concat(",", config.docker_socket_names), "}"])

# METADATA
# title: Resolved mounts only
# description: >-
#   Every bind mount has the host path normalisation resolved: a request
#   that was not normalised cannot be judged by the mount rules.
# custom:
#   severity: high
#   controls: [CIS-5.6]
finding contains {
	"rule": "mount_unresolved",
	"message": sprintf("%s: no resolved host path; only normalised requests are admitted", [_mounts_named(mounts, bad)]),
	"action": "deny",
	"count": count(bad),
} if {
	mounts := input.request.mounts
	bad := [i | some i, m in mounts; not _resolved(m)]
	count(bad) > 0
}

_resolved(m) if startswith(m.resolved, "/")

# _mounts_named names the first few of the mounts at indices bad, by the
# host path the rules judge: the resolved one, or the source when there is
# none.
_mounts_named(mounts, bad) := _named(
	[sprintf("mounts[%d] %s", [i, object.get(m, "resolved", m.source)]) | some i in array.slice(bad, 0, 3); m := mounts[i]],
	count(bad),
)

# METADATA
# title: No sensitive host paths
# description: >-
#   No bind mount is, lies below or contains a path of
#   data.sandgate.config.sensitive_paths (/etc, /var, /proc, ...), judged
#   by resolved path and whole components; so / never.
# custom:
#   severity: critical
#   controls: [CIS-5.6, PSS-baseline]
finding contains {
	"rule": "no_sensitive_mounts",
	"message": sprintf("%s: is, lies below or contains a sensitive host path (data.sandgate.config.sensitive_paths)", [_mounts_named(mounts, bad)]),
	"action": "deny",
	"count": count(bad),
} if {
	mounts := input.request.mounts
	bad := [i | some i, m in mounts; _sensitive(m.resolved)]
	count(bad) > 0
}

# _sensitive: the path is a sensitive path or below one …
_sensitive(p) if glob.match(_sensitive_glob, ["/"], p)

# … or the host root …
_sensitive("/")

# … or above one.
_sensitive(p) if strings.any_prefix_match(config.sensitive_paths, concat("", [p, "/"]))

# METADATA
# title: No container runtime socket
# description: >-
#   No bind mount whose resolved or requested path ends in a name of
#   data.sandgate.config.docker_socket_names, wherever it lies: the
#   runtime's socket is root on the host.
# custom:
#   severity: critical
#   controls: [CIS-5.32, PSS-baseline]
finding contains {
	"rule": "no_docker_socket",
	"message": sprintf("%s: is a container runtime socket", [_mounts_named(mounts, bad)]),
	"action": "deny",
	"count": count(bad),
} if {
	mounts := input.request.mounts
	socket := _socket_glob
	bad := [i | some i, m in mounts; _socket(socket, m)]
	count(bad) > 0
}

# _socket: the mount's resolved or requested path is a runtime socket.
_socket(socket, m) if {
	some p in [m.resolved, m.source]
	glob.match(socket, ["/"], p)
}

# METADATA
# title: Mounts within the mount roots
# description: >-
#   Every bind mount lies within a mount root (SANDGATE_MOUNT_ROOTS), by
#   resolved path and whole components; with no root configured, no bind
#   mount is admitted.
# custom:
#   severity: high
#   controls: [CIS-5.6]
finding contains {
	"rule": "mount_outside_roots",
	"message": sprintf("%s: not within a mount root (%s)", [_mounts_named(mounts, bad), concat(", ", input.settings.mount_roots)]),
	"action": "deny",
	"count": count(bad),
} if {
	mounts := input.request.mounts
	_have_roots
	bad := [i | some i, m in mounts; _resolved(m); not _within_a_root(m.resolved)]
	count(bad) > 0
}

finding contains {
	"rule": "mount_outside_roots",
	"message": sprintf("%s: bind mounts are disabled: no mount roots are configured (SANDGATE_MOUNT_ROOTS)", [_mounts_named(mounts, bad)]),
	"action": "deny",
	"count": count(bad),
} if {
	mounts := input.request.mounts
	count(mounts) > 0
	not _have_roots
	bad := numbers.range(0, count(mounts) - 1)
}

_have_roots if count(input.settings.mount_roots) > 0

_within_a_root(p) if p in input.settings.mount_roots

_within_a_root(p) if strings.any_prefix_match(p, _root_dirs)

# _root_dirs are the mount roots, each with one trailing "/": what a path
# below a root starts with.
_root_dirs := [concat("", [trim_suffix(root, "/"), "/"]) | some root in input.settings.mount_roots]

# Within the roots, a team mounts only its own directories: <root>/<team>
# of each mount root and what lies below, by resolved path and whole
# components, so that no team mounts another's project. The bundle's data
# may map a team to other directories (data.sandgate.config.team_mount_dirs,
# relative to each root), in place of its own. No role is exempt; an
# exemption in the data can be. A team whose name is not a plain path
# component ("", "..", "a/b") has no directory at all.
# METADATA
# title: Mounts within the team's directories
# description: >-
#   Within the roots, a team mounts only under <root>/<team>/ of each
#   root, or the directories data.sandgate.config.team_mount_dirs maps it
#   to, so that no team mounts another's data. No role is exempt.
# custom:
#   severity: high
#   controls: [CIS-5.6]
finding contains {
	"rule": "mount_outside_team_dir",
	"message": sprintf("%s: %s", [_mounts_named(mounts, bad), _team_dirs_message]),
	"action": "deny",
	"count": count(bad),
} if {
	mounts := input.request.mounts
	_have_roots
	inside := [i | some i, m in mounts; _resolved(m); _within_a_root(m.resolved)]
	count(inside) > 0
	prefixes := [concat("", [d, "/"]) | some d in _team_dirs]
	bad := [i | some i in inside; not strings.any_prefix_match(concat("", [mounts[i].resolved, "/"]), prefixes)]
	count(bad) > 0
}

# _team_rel_dirs are the directories, relative to each mount root, where
# the principal's team may mount.
_team_rel_dirs := dirs if {
	dirs := config.team_mount_dirs[input.principal.team]
} else := [team] if {
	team := input.principal.team
	_plain_team(team)
} else := []

# _team_dirs are the team's directories under every mount root.
_team_dirs := [concat("/", [trim_suffix(root, "/"), d]) | some root in input.settings.mount_roots; some d in _team_rel_dirs]

_team_dirs_message := sprintf("team %q may mount only within %s", [object.get(input.principal, "team", ""), concat(", ", _team_dirs)]) if {
	count(_team_dirs) > 0
} else := sprintf("team %q has no mount directory (a team's name must be a plain path component, or data.sandgate.config.team_mount_dirs must map it)", [object.get(input.principal, "team", "")])

# _plain_team: the team's name can name a directory and a cache volume
# (volume_team spells the same pattern out).
_plain_team(team) if regex.match(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`, team)

# Bind mounts are always rprivate: the executor refuses any other
# propagation (normalisation spells it in lower case).
# METADATA
# title: Private mount propagation
# description: >-
#   Bind mounts are always rprivate: any propagation but empty, private or
#   rprivate (shared, slave, an unknown value) is refused, as the executor
#   would refuse it.
# custom:
#   severity: medium
#   controls: [CIS-5.20]
finding contains {
	"rule": "mount_propagation",
	"message": sprintf("%s: propagation %s is not allowed; bind mounts are always rprivate (leave it out, or ask for private or rprivate)", [_mounts_named(mounts, bad), concat(", ", sort({sprintf("%q", [mounts[i].propagation]) | some i in bad}))]),
	"action": "deny",
	"count": count(bad),
} if {
	mounts := input.request.mounts
	bad := [i | some i, m in mounts; not object.get(m, "propagation", "") in {"", "private", "rprivate"}]
	count(bad) > 0
}

# Cache volumes are per team: the executor names a volume's Docker volume
# sandgate-cache-<team>.<name>. A name is a plain name without "." (so the
# last "." splits team from name, and no two teams' volumes can share a
# Docker name), and the team's name must be able to name a volume.
# METADATA
# title: Plain cache volume names
# description: >-
#   A cache volume's name is 1 to 64 letters, digits, _ and -: no path and
#   no '.', so that the executor's sandgate-cache-<team>.<name> is one
#   team's alone.
# custom:
#   severity: medium
#   controls: [CIS-5.6]
finding contains {
	"rule": "volume_name",
	"message": sprintf("%s: a volume name is 1 to 64 letters, digits, '_' and '-' (no '.', no path)", [_named([sprintf("volumes[%d] %q", [i, object.get(volumes[i], "name", "")]) | some i in array.slice(bad, 0, 3)], count(bad))]),
	"action": "deny",
	"count": count(bad),
} if {
	volumes := input.request.volumes
	bad := [i | some i, v in volumes; not _plain_volume_name(v)]
	count(bad) > 0
}

_plain_volume_name(v) if regex.match(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`, v.name)

# METADATA
# title: A team that can own volumes
# description: >-
#   Cache volumes belong to the principal's team, whose name must be 1 to
#   63 letters, digits, _, . and -, starting with a letter or digit, to
#   name them.
# custom:
#   severity: medium
#   controls: [CIS-5.6]
finding contains {
	"rule": "volume_team",
	"message": sprintf("team %q cannot own cache volumes: a team's name must be 1 to 63 letters, digits, '_', '.' and '-', starting with a letter or digit", [object.get(input.principal, "team", "")]),
	"action": "deny",
	"count": count(volumes),
} if {
	volumes := input.request.volumes
	count(volumes) > 0
	not regex.match(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`, object.get(input.principal, "team", ""))
}
