package sandgate.admission_test

import data.sandgate.fixtures

test_read_only_rootfs_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"read_only_rootfs": true})
	d.allow == true
}

test_writable_rootfs_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"read_only_rootfs": false})
	fixtures.denied_by(d, "read_only_rootfs")
}
