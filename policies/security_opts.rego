# Kernel confinement: seccomp, AppArmor, SELinux, masked /proc paths and
# no-new-privileges. Normalisation parses security_opt (both the "=" and ":"
# spellings) into input.request.security.
package sandgate.admission

finding contains {
	"rule": "seccomp_unconfined",
	"message": "seccomp must not be unconfined; Docker's default profile is applied",
	"controls": ["CIS-5.22", "PSS-baseline"],
	"action": "deny",
} if {
	input.request.security.seccomp == "unconfined"
}

finding contains {
	"rule": "apparmor_unconfined",
	"message": "AppArmor must not be unconfined",
	"controls": ["CIS-5.22", "PSS-baseline"],
	"action": "deny",
} if {
	input.request.security.apparmor == "unconfined"
}

finding contains {
	"rule": "selinux_disabled",
	"message": sprintf("SELinux labelling must not be disabled (label %s)", [_named([sprintf("%q", [l]) | some l in _few(bad)], count(bad))]),
	"controls": ["CIS-5.22", "PSS-baseline"],
	"action": "deny",
	"count": count(bad),
} if {
	labels := input.request.security.label
	bad := [l | some l in labels; startswith(l, "disable")]
	count(bad) > 0
}

finding contains {
	"rule": "systempaths_unconfined",
	"message": "masked /proc and /sys paths must stay masked (systempaths=unconfined)",
	"controls": ["PSS-baseline"],
	"action": "deny",
} if {
	input.request.security.systempaths == "unconfined"
}

# Missing (a request that was not normalised) counts as turned off.
finding contains {
	"rule": "no_new_privileges",
	"message": "no-new-privileges must not be turned off",
	"controls": ["CIS-5.26", "PSS-restricted"],
	"action": "deny",
} if {
	not input.request.security.no_new_privileges
}
