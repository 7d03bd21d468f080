package sandgate.admission_test

import data.sandgate.fixtures

test_allowlisted_capability_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"cap_add": ["NET_BIND_SERVICE"]})
	d.allow == true
}

test_allowlisted_capability_any_spelling_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"cap_add": ["cap_net_bind_service"]})
	d.allow == true
}

test_other_capability_is_denied if {
	every cap in ["SYS_ADMIN", "CAP_SYS_ADMIN", "sys_admin", " Cap_Sys_Admin "] {
		d := fixtures.check with input as fixtures.input_with({"cap_add": [cap]})
		fixtures.denied_by(d, "capabilities")
		some v in d.violations
		contains(v.message, "SYS_ADMIN")
	}
}

test_all_capabilities_are_denied if {
	every cap in ["ALL", "all", "CAP_ALL"] {
		d := fixtures.check with input as fixtures.input_with({"cap_add": [cap]})
		fixtures.denied_by(d, "capabilities")
	}
}
