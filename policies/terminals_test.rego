package sandgate.admission_test

import data.sandgate.admission

_session_spec := {"image": "sandgate/sandbox:latest", "user": "10001:10001", "network": "none", "command": ["sh"]}

_terminal(team, image) := {
	"operation": "terminal",
	"principal": {"name": "alice", "team": team, "roles": ["submitter"]},
	"request": object.union(_session_spec, {"image": image}),
	"session": {"id": "s"},
}

_port(team, n) := {
	"operation": "port",
	"principal": {"name": "alice", "team": team, "roles": ["submitter"]},
	"request": _session_spec,
	"session": {"id": "s"},
	"port": {"number": n},
}

_rules(req, cfg) := {f.rule | some f in admission.finding with input as req with data.sandgate.config as cfg}

test_terminal_allowed_by_default if {
	not "terminal_not_allowed" in _rules(_terminal("payments", "sandgate/sandbox:latest"), {"terminals": {"default": true, "teams": {}}})
}

test_terminal_refused_for_a_team if {
	cfg := {"terminals": {"default": true, "teams": {"payments": false}}}
	"terminal_not_allowed" in _rules(_terminal("payments", "sandgate/sandbox:latest"), cfg)
	not "terminal_not_allowed" in _rules(_terminal("search", "sandgate/sandbox:latest"), cfg)
}

test_terminal_refused_by_default_allowed_for_a_team if {
	cfg := {"terminals": {"default": false, "teams": {"payments": true}}}
	not "terminal_not_allowed" in _rules(_terminal("payments", "sandgate/sandbox:latest"), cfg)
	"terminal_not_allowed" in _rules(_terminal("search", "sandgate/sandbox:latest"), cfg)
}

test_terminal_refused_for_an_image if {
	cfg := {"terminals": {"default": true}, "terminal_denied_images": ["sandgate/python"]}
	"terminal_not_allowed" in _rules(_terminal("payments", "sandgate/python:3"), cfg)
	"terminal_not_allowed" in _rules(_terminal("payments", "sandgate/python"), cfg)
	not "terminal_not_allowed" in _rules(_terminal("payments", "sandgate/sandbox:latest"), cfg)
}

test_port_admitted_by_team if {
	cfg := {"session_ports": {"default": [8080], "teams": {"payments": [3000]}}}
	not "session_port_not_admitted" in _rules(_port("payments", 3000), cfg)
	"session_port_not_admitted" in _rules(_port("payments", 8080), cfg)
	not "session_port_not_admitted" in _rules(_port("search", 8080), cfg)
	"session_port_not_admitted" in _rules(_port("search", 22), cfg)
}

test_port_rule_judges_ports_only if {
	not "session_port_not_admitted" in _rules(_terminal("payments", "sandgate/sandbox:latest"), {"session_ports": {"default": []}})
}
