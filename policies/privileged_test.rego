package sandgate.admission_test

import data.sandgate.admission
import data.sandgate.fixtures

test_unprivileged_is_allowed if {
	d := admission.decision with input as fixtures.input_with({"privileged": false})
	d.allow == true
}

test_privileged_is_denied if {
	d := admission.decision with input as fixtures.input_with({"privileged": true})
	fixtures.denied_by(d, "no_privileged")
}
