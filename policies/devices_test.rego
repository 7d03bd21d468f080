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

test_sysctl_values_the_kernel_takes_are_allowed if {
	d := fixtures.check with input as fixtures.input_with({"sysctls": {
		"net.ipv4.ip_local_port_range": "32768 60999",
		"net.ipv4.ping_group_range": "0 2147483647",
		"net.ipv4.tcp_syncookies": "1",
		"kernel.shm_rmid_forced": "0",
	}})
	d.allow == true
}

test_sysctl_values_the_kernel_refuses_are_denied if {
	some value in ["banana", "70000", "-1", "1 2", "", " 0", "0 ", "99999999999"]
	d := fixtures.check with input as fixtures.input_with({"sysctls": {"net.ipv4.ip_unprivileged_port_start": value}})
	fixtures.denied_by(d, "sysctl_value")
}

test_sysctl_range_must_ascend if {
	d := fixtures.check with input as fixtures.input_with({"sysctls": {"net.ipv4.ip_local_port_range": "60999 32768"}})
	fixtures.denied_by(d, "sysctl_value")
}

test_every_allowed_sysctl_has_a_value_shape if {
	every name in data.sandgate.config.allowed_sysctls {
		data.sandgate.config.sysctl_values[name]
	}
}
