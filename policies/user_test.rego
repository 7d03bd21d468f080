package sandgate.admission_test

import data.sandgate.fixtures

test_numeric_non_root_user_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"user": "10001:10001", "uid": 10001, "gid": 10001})
	d.allow == true
}

test_uid_zero_is_denied if {
	# "0", "00" and "0:0" all normalise to uid 0.
	every user in ["0", "00", "0:0", "0000:1000"] {
		d := fixtures.check with input as fixtures.input_with({"user": user, "uid": 0})
		fixtures.denied_by(d, "non_root_user")
	}
}

test_root_by_name_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"user": "root"})
		with input.request.uid as null
	fixtures.denied_by(d, "non_root_user")
}

test_user_name_is_denied if {
	d := fixtures.check with input as object.union(fixtures.input_with({"user": "nobody"}), {"request": {"uid": null}})
	fixtures.denied_by(d, "non_root_user")
}

test_missing_uid_is_denied if {
	d := fixtures.check with input as {"request": object.remove(fixtures.request, ["uid", "gid"]), "settings": fixtures.settings, "principal": fixtures.principal}
	fixtures.denied_by(d, "non_root_user")
}
