package sandgate.admission_test

import data.sandgate.egress
import data.sandgate.fixtures

egress_data := {
	"default": ["pypi.org:443"],
	"teams": {"payments": ["pypi.org:443", "*.npmjs.org:443", "10.2.0.0/16:5432", "[fd00::/8]:443"]},
}

egress_request(list) := {"network": "egress", "egress": list, "egress_limits": {"connections": 256, "bytes": 1073741824}}

test_egress_allowed_for_team if {
	d := fixtures.check with input as fixtures.input_with(egress_request(["pypi.org:443", "registry.npmjs.org:443", "*.npmjs.org:443", "10.2.3.4:5432", "10.2.8.0/24:5432", "[fd00::1]:443"]))
		with data.sandgate.config.egress_destinations as egress_data
	d.allow == true
}

test_egress_destination_not_allowed if {
	every dest in ["example.com:443", "pypi.org:80", "10.3.0.1:5432", "10.0.0.0/8:5432", "npmjs.org:443", "evilnpmjs.org:443"] {
		d := fixtures.check with input as fixtures.input_with(egress_request([dest]))
			with data.sandgate.config.egress_destinations as egress_data
		fixtures.denied_by(d, "egress_destination_allowlist")
	}
}

test_egress_wildcard_only_where_data_has_one if {
	d := fixtures.check with input as fixtures.input_with(egress_request(["*.pypi.org:443"]))
		with data.sandgate.config.egress_destinations as egress_data
	fixtures.denied_by(d, "egress_destination_allowlist")
	d2 := fixtures.check with input as fixtures.input_with(egress_request(["*.registry.npmjs.org:443"]))
		with data.sandgate.config.egress_destinations as egress_data
	d2.allow == true
}

test_egress_other_team_gets_the_default if {
	inp := object.union(fixtures.input_with(egress_request(["registry.npmjs.org:443"])), {"principal": {"name": "bob", "team": "search", "roles": ["submitter"]}})
	d := fixtures.check with input as inp with data.sandgate.config.egress_destinations as egress_data
	fixtures.denied_by(d, "egress_destination_allowlist")
}

test_egress_by_default_nothing_is_allowed if {
	d := fixtures.check with input as fixtures.input_with(egress_request(["pypi.org:443"]))
	fixtures.denied_by(d, "egress_destination_allowlist")
}

test_egress_needs_a_list if {
	d := fixtures.check with input as fixtures.input_with({"network": "egress"})
	fixtures.denied_by(d, "egress_list")
}

test_egress_list_needs_network_egress if {
	every network in ["none", "bridge"] {
		d := fixtures.check with input as fixtures.input_with({"network": network, "egress": ["pypi.org:443"]})
			with data.sandgate.config.egress_destinations as egress_data
		fixtures.denied_by(d, "egress_list")
	}
}

test_egress_denied_when_air_gapped if {
	d := fixtures.check with input as fixtures.input_settings(egress_request(["pypi.org:443"]), {"air_gapped": true, "mount_roots": []})
		with data.sandgate.config.egress_destinations as egress_data
	fixtures.denied_by(d, "air_gapped_egress")
}

test_egress_limits_capped if {
	every limits in [{"connections": 5000}, {"bytes": 10737418241}, {"connections": 0}] {
		d := fixtures.check with input as fixtures.input_with(object.union(egress_request(["pypi.org:443"]), {"egress_limits": limits}))
			with data.sandgate.config.egress_destinations as egress_data
		fixtures.denied_by(d, "egress_limits")
	}
}

connection(host, port, addrs) := {
	"run_id": "r1", "principal": "alice", "team": "payments", "host": host, "port": port,
	"addresses": addrs, "egress": ["pypi.org:443", "*.npmjs.org:443", "10.2.0.0/16:5432"], "air_gapped": false,
}

test_egress_decision_allows_admitted if {
	every c in [
		connection("pypi.org", 443, ["151.101.0.223"]),
		connection("registry.npmjs.org", 443, ["104.16.0.1"]),
		connection("10.2.0.9", 5432, ["10.2.0.9"]),
	] {
		d := egress.decision with input as c with data.sandgate.config.egress_destinations as egress_data
		d.allow == true
		d.reasons == []
	}
}

test_egress_decision_refuses if {
	every c in [
		connection("example.com", 443, ["93.184.216.34"]),
		connection("pypi.org", 80, ["151.101.0.223"]),
		connection("169.254.169.254", 80, ["169.254.169.254"]),
		connection("registry.npmjs.org", 443, ["169.254.169.254"]),
		object.union(connection("pypi.org", 443, ["151.101.0.223"]), {"air_gapped": true}),
		object.union(connection("registry.npmjs.org", 443, ["104.16.0.1"]), {"team": "search"}),
	] {
		d := egress.decision with input as c with data.sandgate.config.egress_destinations as egress_data
		d.allow == false
		count(d.reasons) > 0
	}
}

test_egress_decision_not_admitted_for_run if {
	c := object.union(connection("pypi.org", 443, ["151.101.0.223"]), {"egress": ["*.npmjs.org:443"]})
	d := egress.decision with input as c with data.sandgate.config.egress_destinations as egress_data
	d.allow == false
}

# A denial says what the team may reach and which data key lists it; a
# team with no destinations is told it has none and where to add them.
test_egress_denial_names_the_data_key if {
	d := fixtures.check with input as fixtures.input_with(egress_request(["example.com:443"]))
		with data.sandgate.config.egress_destinations as egress_data
	some v in d.violations
	v.rule == "egress_destination_allowlist"
	contains(v.message, `data.sandgate.config.egress_destinations.teams["payments"]): pypi.org:443`)
}

test_egress_denial_for_a_team_with_none if {
	d := fixtures.check with input as fixtures.input_with(egress_request(["example.com:443"]))
		with data.sandgate.config.egress_destinations as {"default": [], "teams": {}}
	some v in d.violations
	v.rule == "egress_destination_allowlist"
	contains(v.message, "may reach no destination: none are listed for it in data.sandgate.config.egress_destinations.teams")
	contains(v.message, "add them there")
}

test_egress_denial_by_the_default if {
	inp := object.union(fixtures.input_with(egress_request(["example.com:443"])), {"principal": {"name": "bob", "team": "search", "roles": ["submitter"]}})
	d := fixtures.check with input as inp with data.sandgate.config.egress_destinations as egress_data
	some v in d.violations
	v.rule == "egress_destination_allowlist"
	contains(v.message, "allowed (data.sandgate.config.egress_destinations.default): pypi.org:443")
}
