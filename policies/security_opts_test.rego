package sandgate.admission_test

import data.sandgate.config
import data.sandgate.fixtures

_security(patch) := object.union(fixtures.request.security, patch)

test_default_confinement_is_allowed if {
	every seccomp in ["", "default", "runtime/default"] {
		every apparmor in ["", "docker-default"] {
			d := fixtures.check with input as fixtures.input_with({"security": _security({"seccomp": seccomp, "apparmor": apparmor})})
			d.allow == true
		}
	}
}

test_listed_confinement_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"security": _security({"apparmor": "sandgate-build", "label": ["type:container_t", "level:s0:c1,c2"]})})
		with config.allowed_apparmor_profiles as ["sandgate-build"]
		with config.allowed_selinux_labels as ["type:container_t", "level:s0:c1,c2"]
	d.allow == true
}

test_seccomp_unconfined_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"security": _security({"seccomp": "unconfined"})})
	fixtures.denied_by(d, "seccomp_unconfined")
}

test_apparmor_unconfined_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"security": _security({"apparmor": "unconfined"})})
	fixtures.denied_by(d, "apparmor_unconfined")
}

test_selinux_disabled_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"security": _security({"label": ["disable"]})})
	fixtures.denied_by(d, "selinux_disabled")
}

test_systempaths_unconfined_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"security": _security({"systempaths": "unconfined"})})
	fixtures.denied_by(d, "systempaths_unconfined")
}

test_no_new_privileges_off_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"security": _security({"no_new_privileges": false})})
	fixtures.denied_by(d, "no_new_privileges")
}

test_missing_security_is_denied if {
	d := fixtures.check with input as {"request": object.remove(fixtures.request, ["security"]), "settings": fixtures.settings, "principal": fixtures.principal}
	fixtures.denied_by(d, "no_new_privileges")
}

# The executor applies sandgate's seccomp profile and nothing else.
test_other_seccomp_profile_is_denied if {
	every seccomp in ["builtin", "/etc/seccomp/permissive.json", "localhost/x", "{}", "default2"] {
		d := fixtures.check with input as fixtures.input_with({"security": _security({"seccomp": seccomp})})
		fixtures.denied_by(d, "seccomp_profile")
		not fixtures.denied_by(d, "seccomp_unconfined")
	}
}

test_unlisted_apparmor_profile_is_denied if {
	every profile in ["my-profile", "runtime/default", "docker-default2"] {
		d := fixtures.check with input as fixtures.input_with({"security": _security({"apparmor": profile})})
		fixtures.denied_by(d, "apparmor_profile")
		not fixtures.denied_by(d, "apparmor_unconfined")
	}
}

test_confinement_that_selinux_does_not_enforce_is_denied if {
	# spc_t ("super privileged container") and unconfined_t run outside
	# SELinux confinement: never, whatever the data lists.
	every label in ["type:spc_t", "type:unconfined_t", "disable"] {
		d := fixtures.check with input as fixtures.input_with({"security": _security({"label": [label]})})
			with config.allowed_selinux_labels as [label]
		fixtures.denied_by(d, "selinux_disabled")
		not fixtures.denied_by(d, "selinux_label")
	}
}

test_unlisted_selinux_label_is_denied if {
	every label in ["type:container_t", "level:s0", "user:system_u", "role:system_r", "type: spc_t"] {
		d := fixtures.check with input as fixtures.input_with({"security": _security({"label": [label]})})
		fixtures.denied_by(d, "selinux_label")
	}
}

test_any_systempaths_value_is_denied if {
	every value in ["unconfined", "x", "masked"] {
		d := fixtures.check with input as fixtures.input_with({"security": _security({"systempaths": value})})
		fixtures.denied_by(d, "systempaths_unconfined")
	}
}
