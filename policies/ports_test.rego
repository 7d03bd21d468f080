package sandgate.admission_test

import data.sandgate.admission
import data.sandgate.fixtures

test_no_ports_is_allowed if {
	d := admission.decision with input as fixtures.input_with({"ports": []})
	d.allow == true
}

test_published_port_is_denied if {
	d := admission.decision with input as fixtures.input_with({"ports": ["127.0.0.1:8080:80"]})
	fixtures.denied_by(d, "no_published_ports")
}
