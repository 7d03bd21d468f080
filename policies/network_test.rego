package sandgate.admission_test

import data.sandgate.fixtures

test_allowed_networks_are_allowed if {
	every network in ["none", "bridge"] {
		d := fixtures.check with input as fixtures.input_with({"network": network})
		d.allow == true
		d.mutations == []
	}
}

test_host_network_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"network": "host"})
	fixtures.denied_by(d, "no_host_network")
	not fixtures.denied_by(d, "network_allowlist")
}

test_other_network_is_denied if {
	every network in ["container:abc", "my-net"] {
		d := fixtures.check with input as fixtures.input_with({"network": network})
		fixtures.denied_by(d, "network_allowlist")
	}
}

air_gapped := {"air_gapped": true, "mount_roots": []}

test_air_gapped_mutates_network_and_pull_policy if {
	d := fixtures.check with input as fixtures.input_settings({"network": "bridge", "pull_policy": "always"}, air_gapped)
	{m.rule: m.value | some m in d.mutations} == {"air_gapped_network": "none", "air_gapped_pull": "never"}
	every m in d.mutations {
		m.op == "replace"
	}
}

test_air_gapped_compliant_request_needs_no_mutation if {
	d := fixtures.check with input as fixtures.input_settings({}, air_gapped)
	d.allow == true
	d.mutations == []
}

test_air_gapped_host_network_is_denied_not_mutated if {
	d := fixtures.check with input as fixtures.input_settings({"network": "host"}, air_gapped)
	fixtures.denied_by(d, "no_host_network")
	every m in d.mutations {
		m.path != "/network"
	}
}
