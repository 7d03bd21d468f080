package sandgate.admission_test

import data.sandgate.fixtures

test_allowlisted_capability_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"cap_add": ["NET_BIND_SERVICE"], "network": "bridge"})
	d.allow == true
}

test_allowlisted_capability_any_spelling_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"cap_add": ["cap_net_bind_service"], "network": "bridge"})
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

test_capabilities_are_reported_once if {
	d := fixtures.check with input as fixtures.input_with({"cap_add": ["SYS_ADMIN", "NET_BIND_SERVICE", "sys_module", "ALL", "SYS_ADMIN", "NET_RAW"]})
	[v] := [v | some v in d.violations; v.rule == "capabilities"]
	v.count == 5
	startswith(v.message, "cap_add ALL would grant every capability; capabilities not allowed: ALL, NET_RAW, SYS_ADMIN and 1 more")
}

test_network_capability_without_network_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"cap_add": ["NET_BIND_SERVICE"], "network": "none"})
	fixtures.denied_by(d, "capability_needs_network")
	d2 := fixtures.check with input as fixtures.input_with({"cap_add": ["NET_BIND_SERVICE"], "network": "bridge"})
	d2.allow == true
}

test_network_capability_in_air_gapped_mode_is_denied if {
	d := fixtures.check with input as fixtures.input_settings({"cap_add": ["NET_BIND_SERVICE"], "network": "none"}, {"air_gapped": true, "mount_roots": []})
	some v in d.violations
	v.rule == "capability_needs_network"
	contains(v.message, "air-gapped")
}
