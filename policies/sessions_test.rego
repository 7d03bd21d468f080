package sandgate.admission_test

import data.sandgate.config
import data.sandgate.fixtures

session_input(limits) := object.union(fixtures.input_with({"command": ["sleep", "infinity"]}), {
	"operation": "session",
	"session": object.union({"id": "", "idle_timeout_seconds": 600, "max_lifetime_seconds": 3600}, limits),
})

exec_input(command) := object.union(fixtures.input_with({"command": command}), {
	"operation": "exec",
	"session": {"id": "0190f0e0-0000-7000-8000-000000000001", "idle_timeout_seconds": 600, "max_lifetime_seconds": 3600},
})

test_session_within_limits_is_allowed if {
	m := config.session_maxima
	d := fixtures.check with input as session_input({"idle_timeout_seconds": m.idle_timeout_seconds, "max_lifetime_seconds": m.max_lifetime_seconds})
	d.allow == true
}

test_session_idle_above_maximum_is_denied if {
	d := fixtures.check with input as session_input({"idle_timeout_seconds": config.session_maxima.idle_timeout_seconds + 1})
	fixtures.denied_by(d, "session_idle_limit")
}

test_session_lifetime_above_maximum_is_denied if {
	d := fixtures.check with input as session_input({"max_lifetime_seconds": config.session_maxima.max_lifetime_seconds + 1})
	fixtures.denied_by(d, "session_lifetime_limit")
}

test_session_limits_not_positive_are_denied if {
	d := fixtures.check with input as session_input({"idle_timeout_seconds": 0, "max_lifetime_seconds": -1})
	fixtures.denied_by(d, "session_idle_limit")
	fixtures.denied_by(d, "session_lifetime_limit")
}

test_session_limits_do_not_judge_runs if {
	d := fixtures.check with input as fixtures.input_with({})
	not "session_idle_limit" in fixtures.rules(d)
	not "session_lifetime_limit" in fixtures.rules(d)
}

test_exec_allowed_by_default if {
	d := fixtures.check with input as exec_input(["rm", "-rf", "/workspace/x"])
	d.allow == true
}

test_exec_denied_command_list if {
	d := fixtures.check with input as exec_input(["/usr/bin/curl", "http://x"])
		with config.denied_exec_commands as ["curl", "wget"]
	fixtures.denied_by(d, "denied_exec_command")
	d2 := fixtures.check with input as exec_input(["wget"])
		with config.denied_exec_commands as ["curl", "wget"]
	fixtures.denied_by(d2, "denied_exec_command")
	d3 := fixtures.check with input as exec_input(["sh", "-c", "curl"])
		with config.denied_exec_commands as ["curl", "wget"]
	d3.allow == true
}

test_denied_commands_judge_execs_only if {
	d := fixtures.check with input as fixtures.input_with({"command": ["curl"]})
		with config.denied_exec_commands as ["curl"]
	d.allow == true
}
