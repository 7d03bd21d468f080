# Kernel confinement: seccomp, AppArmor, SELinux, masked /proc paths and
# no-new-privileges. Normalisation parses security_opt (both the "=" and ":"
# spellings) into input.request.security, in lower case.
#
# The executor applies sandgate's own seccomp profile (Docker's default
# less the calls kernel escapes use, executor/seccomp) and refuses any
# other, so only the default's spellings are admitted. AppArmor runs the
# default profile (docker-default) unless the data lists another
# (allowed_apparmor_profiles); SELinux label options only from the data
# (allowed_selinux_labels), and never one that turns confinement off.
package sandgate.admission

import data.sandgate.config

# METADATA
# title: Seccomp confined
# description: >-
#   seccomp=unconfined is refused: sandgate's profile blocks the system
#   calls a container has no business making.
# custom:
#   severity: high
#   controls: [CIS-5.22, PSS-baseline]
finding contains {
	"rule": "seccomp_unconfined",
	"message": "seccomp must not be unconfined; sandgate's profile is applied",
	"action": "deny",
} if {
	input.request.security.seccomp == "unconfined"
}

# METADATA
# title: sandgate's seccomp profile
# description: >-
#   Any seccomp profile but default and runtime/default is refused: the
#   executor applies sandgate's profile and no other.
# custom:
#   severity: low
#   controls: [CIS-5.22, PSS-baseline]
finding contains {
	"rule": "seccomp_profile",
	"message": sprintf("seccomp profile %q is not applied: every container runs sandgate's profile; leave it out or ask for \"default\"", [profile]),
	"action": "deny",
} if {
	profile := input.request.security.seccomp
	profile != ""
	not profile in {"default", "runtime/default", "unconfined"}
}

# METADATA
# title: AppArmor confined
# description: >-
#   apparmor=unconfined is refused.
# custom:
#   severity: high
#   controls: [CIS-5.22, PSS-baseline]
finding contains {
	"rule": "apparmor_unconfined",
	"message": "AppArmor must not be unconfined",
	"action": "deny",
} if {
	input.request.security.apparmor == "unconfined"
}

# METADATA
# title: AppArmor profiles from the allowlist
# description: >-
#   An AppArmor profile other than docker-default, the default, must be
#   one of data.sandgate.config.allowed_apparmor_profiles.
# custom:
#   severity: medium
#   controls: [CIS-5.22, PSS-baseline]
finding contains {
	"rule": "apparmor_profile",
	"message": sprintf("AppArmor profile %q is not allowed; allowed: docker-default (the default)%s", [profile, concat("", [concat("", [", ", p]) | some p in config.allowed_apparmor_profiles])]),
	"action": "deny",
} if {
	profile := input.request.security.apparmor
	profile != ""
	not profile in {"docker-default", "unconfined"}
	not profile in config.allowed_apparmor_profiles
}

# "disable" turns labelling off; the types spc_t ("super privileged
# container") and unconfined_t run outside SELinux confinement.
# METADATA
# title: SELinux confined
# description: >-
#   SELinux confinement is not turned off: label=disable, and the types
#   that run outside confinement, type:spc_t and type:unconfined_t,
#   whatever the data says.
# custom:
#   severity: high
#   controls: [CIS-5.22, PSS-baseline]
finding contains {
	"rule": "selinux_disabled",
	"message": sprintf("SELinux confinement must not be turned off (label %s)", [_named(array.slice(bad, 0, 3), count(bad))]),
	"action": "deny",
	"count": count(bad),
} if {
	labels := input.request.security.label
	labels != null
	bad := [l | some l in labels; _selinux_off(l)]
	count(bad) > 0
}

_selinux_off(l) if startswith(l, "disable")

_selinux_off(l) if l in {"type:spc_t", "type:unconfined_t"}

# METADATA
# title: SELinux labels from the allowlist
# description: >-
#   Any other SELinux label option must be one of
#   data.sandgate.config.allowed_selinux_labels: another type or level may
#   reach other containers' files.
# custom:
#   severity: medium
#   controls: [CIS-5.22]
finding contains {
	"rule": "selinux_label",
	"message": sprintf("SELinux label options not allowed: %s (allowed: %s)", [_named(array.slice(bad, 0, 3), count(bad)), concat(", ", config.allowed_selinux_labels)]),
	"action": "deny",
	"count": count(bad),
} if {
	labels := input.request.security.label
	labels != null
	allowed := config.allowed_selinux_labels
	bad := [l | some l in labels; not l in allowed; not _selinux_off(l)]
	count(bad) > 0
}

# The executor always masks them: any value is refused there.
# METADATA
# title: Masked system paths
# description: >-
#   Any systempaths value is refused: the paths of /proc and /sys the
#   runtime masks (kcore, sysrq-trigger, ...) always stay masked.
# custom:
#   severity: high
#   controls: [PSS-baseline]
finding contains {
	"rule": "systempaths_unconfined",
	"message": sprintf("masked /proc and /sys paths always stay masked (systempaths=%s)", [value]),
	"action": "deny",
} if {
	value := input.request.security.systempaths
	value != ""
}

# Missing (a request that was not normalised) counts as turned off.
# METADATA
# title: No new privileges
# description: >-
#   no-new-privileges=false is refused (a request without the setting
#   counts as turned off): setuid binaries must not raise a process's
#   privileges.
# custom:
#   severity: high
#   controls: [CIS-5.26, PSS-restricted]
finding contains {
	"rule": "no_new_privileges",
	"message": "no-new-privileges must not be turned off",
	"action": "deny",
} if {
	not input.request.security.no_new_privileges
}
