# Containers run as a numeric, non-root user. Normalisation parses "user"
# into input.request.uid (and gid) when numeric, so "0", "00" and "0:0" all
# arrive as uid 0. A user name cannot be checked (the image decides which
# uid it maps to), so names, "root" among them, are refused too.
package sandgate.admission

import data.sandgate.config

# METADATA
# title: Non-root numeric user
# description: >-
#   The container runs as a numeric uid other than 0. uid 0 in any
#   spelling (0, 00, 0:0) is root; a user name, root among them, is
#   refused too, because the image decides which uid it maps to.
# custom:
#   severity: high
#   controls: [PSS-restricted]
#   fix: 'run as a numeric non-root user, such as "user": "10001:10001" (the default)'
finding contains {
	"rule": "non_root_user",
	"message": sprintf("user %q runs as uid 0 (root); use a non-root numeric uid such as 10001", [input.request.user]),
	"action": "deny",
} if {
	input.request.uid == 0
}

finding contains {
	"rule": "non_root_user",
	"message": sprintf("user %q is not a numeric uid; use a non-root numeric uid such as 10001", [object.get(input.request, "user", "")]),
	"action": "deny",
} if {
	not _numeric_uid
}

_numeric_uid if is_number(input.request.uid)

# The primary group must be numeric and unprivileged. Without a numeric
# group ("10001" alone) Docker takes the group of the image's passwd entry
# for the uid, or gid 0 when it has none; a group name is whatever the
# image's /etc/group maps it to. gid 0 is root's group; the data names the
# others that open doors on the host (the Docker socket's group, disk,
# shadow, … by number: data.sandgate.config.privileged_gids). Each decision
# hands the same list to the executor, for the supplementary groups an
# image's /etc/group adds.
# METADATA
# title: Unprivileged primary group
# description: >-
#   The primary group is neither gid 0, root's group, whatever the data
#   says, nor any gid of data.sandgate.config.privileged_gids (disk,
#   shadow, the Docker socket's group, ...). The executor holds the
#   supplementary groups an image adds to the same list.
# custom:
#   severity: high
#   controls: [CIS-4.1]
finding contains {
	"rule": "privileged_group",
	"message": sprintf("user %q runs with gid 0, root's group; use a group of its own such as 10001", [object.get(input.request, "user", "")]),
	"action": "deny",
} if {
	input.request.gid == 0
}

finding contains {
	"rule": "privileged_group",
	"message": sprintf("user %q runs with gid %d, a privileged group (data.sandgate.config.privileged_gids); use a group of its own such as 10001", [object.get(input.request, "user", ""), gid]),
	"action": "deny",
} if {
	gid := input.request.gid
	gid != 0
	gid in config.privileged_gids
}

# The host's own such groups are found when the gateway starts, not named
# in the data: the group of the Docker daemon's socket, and the groups
# that own the mount roots (input.settings.host_groups).
finding contains {
	"rule": "privileged_group",
	"message": sprintf("user %q runs with gid %d, the group that owns %s on this host; use a group of its own such as 10001", [object.get(input.request, "user", ""), gid, g.owns]),
	"action": "deny",
} if {
	gid := input.request.gid
	gid != 0
	not gid in config.privileged_gids
	some g in object.get(input.settings, "host_groups", [])
	g.gid == gid
}

# METADATA
# title: Numeric primary group
# description: >-
#   The user names a numeric group (uid:gid). Without one Docker takes the
#   group of the image's passwd entry, or gid 0 when it has none; a group
#   name is whatever the image's /etc/group maps it to.
# custom:
#   severity: medium
#   controls: [CIS-4.1]
finding contains {
	"rule": "numeric_group",
	"message": sprintf("user %q names no numeric group, so the image would choose it (gid 0 when its passwd has no entry); ask for uid:gid such as 10001:10001", [object.get(input.request, "user", "")]),
	"action": "deny",
} if {
	# object.get, not a reference: a missing gid must make the call false,
	# not undefined, under "not".
	not is_number(object.get(input.request, "gid", null))
}
