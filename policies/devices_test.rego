package sandgate.admission_test

import data.sandgate.fixtures

test_no_devices_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"devices": []})
	d.allow == true
}

test_device_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"devices": ["/dev/fuse"]})
	fixtures.denied_by(d, "no_devices")
}

test_safe_sysctl_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"sysctls": {"net.ipv4.ip_unprivileged_port_start": "0"}})
	d.allow == true
}

test_unsafe_sysctl_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"sysctls": {"kernel.core_pattern": "|/tmp/x"}})
	fixtures.denied_by(d, "sysctls")
}
