package sandgate.admission_test

import data.sandgate.fixtures

_security(patch) := object.union(fixtures.request.security, patch)

test_default_confinement_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"security": _security({"seccomp": "", "apparmor": "docker-default", "label": ["type:container_t"]})})
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
