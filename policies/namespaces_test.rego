package sandgate.admission_test

import data.sandgate.fixtures

test_private_namespaces_are_allowed if {
	d := fixtures.check with input as fixtures.input_with({"pid_mode": "", "ipc_mode": "private", "uts_mode": "", "userns_mode": ""})
	d.allow == true
}

test_host_pid_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"pid_mode": "host"})
	fixtures.denied_by(d, "host_pid")
}

test_container_pid_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"pid_mode": "container:abc"})
	fixtures.denied_by(d, "host_pid")
}

test_host_ipc_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"ipc_mode": "HOST"})
	fixtures.denied_by(d, "host_ipc")
}

test_host_uts_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"uts_mode": "host"})
	fixtures.denied_by(d, "host_uts")
}

test_host_userns_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"userns_mode": "host"})
	fixtures.denied_by(d, "host_userns")
}

test_ipc_none_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"ipc_mode": "none"})
	d.allow == true
}

# The executor sets exactly "", "none" and "private"; another spelling
# would be refused there.
test_ipc_mode_other_spellings_are_denied if {
	every mode in ["NONE", "Private", "shareable", "container:x", " none"] {
		d := fixtures.check with input as fixtures.input_with({"ipc_mode": mode})
		fixtures.denied_by(d, "host_ipc")
	}
}
