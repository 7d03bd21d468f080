package sandgate.admission_test

import data.sandgate.fixtures

test_unprivileged_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"privileged": false})
	d.allow == true
}

test_privileged_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"privileged": true})
	fixtures.denied_by(d, "no_privileged")
}
