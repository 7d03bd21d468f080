package sandgate.admission_test

import data.sandgate.fixtures

runtimes := {"default": ["runc"], "teams": {"payments": ["runc", "runsc"]}, "team_default": {}}

test_the_daemons_default_runtime_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({}) with data.sandgate.config.runtimes as runtimes
	d.allow == true
}

test_a_runtime_of_the_teams_list_is_allowed if {
	every rt in ["runc", "runsc"] {
		d := fixtures.check with input as fixtures.input_with({"runtime": rt}) with data.sandgate.config.runtimes as runtimes
		d.allow == true
	}
}

test_a_runtime_off_the_teams_list_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"runtime": "kata"}) with data.sandgate.config.runtimes as runtimes
	fixtures.denied_by(d, "runtime_allowlist")
}

test_another_team_gets_the_default_list if {
	inp := object.union(fixtures.input_with({"runtime": "runsc"}), {"principal": {"name": "bob", "team": "search", "roles": ["submitter"]}})
	d := fixtures.check with input as inp with data.sandgate.config.runtimes as runtimes
	fixtures.denied_by(d, "runtime_allowlist")
}

test_an_empty_list_allows_only_the_daemons_default if {
	none := {"default": [], "teams": {}, "team_default": {}}
	d := fixtures.check with input as fixtures.input_with({"runtime": "runc"}) with data.sandgate.config.runtimes as none
	fixtures.denied_by(d, "runtime_allowlist")
	e := fixtures.check with input as fixtures.input_with({}) with data.sandgate.config.runtimes as none
	e.allow == true
}

test_a_team_routed_to_a_runtime_gets_it if {
	routed := object.union(runtimes, {"team_default": {"payments": "runsc"}})
	d := fixtures.check with input as fixtures.input_with({}) with data.sandgate.config.runtimes as routed
	{m.rule: m.value | some m in d.mutations} == {"team_runtime": "runsc"}
	e := fixtures.check with input as fixtures.input_with({"runtime": "runc"}) with data.sandgate.config.runtimes as routed
	count(e.mutations) == 0
}
