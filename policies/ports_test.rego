package sandgate.admission_test

import data.sandgate.fixtures

test_no_ports_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"ports": []})
	d.allow == true
}

test_published_port_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"ports": ["127.0.0.1:8080:80"]})
	fixtures.denied_by(d, "no_published_ports")
}
