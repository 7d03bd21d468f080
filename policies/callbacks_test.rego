package sandgate.admission_test

import data.sandgate.fixtures

callback_hosts := ["hooks.example.com", "*.ci.example.org:8443", "127.0.0.1", "[::1]:9000", "10.1.2.3"]

test_no_callback_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({})
	d.allow == true
}

test_callbacks_denied_by_default if {
	d := fixtures.check with input as fixtures.input_with({"callback_url": "https://hooks.example.com/done"})
		with data.sandgate.config.callback_hosts as []
	fixtures.denied_by(d, "callback_host_allowlist")
	some v in d.violations
	v.rule == "callback_host_allowlist"
	contains(v.message, "callback_hosts is empty")
}

test_allowed_hosts if {
	every url in [
		"https://hooks.example.com/done",
		"https://hooks.example.com:8443/done?x=1",
		"https://build.ci.example.org:8443/hook",
		"https://a.b.ci.example.org:8443",
		"https://127.0.0.1:1234/cb",
		"https://[::1]:9000/cb",
	] {
		d := fixtures.check with input as fixtures.input_with({"callback_url": url})
			with data.sandgate.config.callback_hosts as callback_hosts
		d.allow == true
	}
}

test_hosts_outside_the_list_are_denied if {
	every url in [
		"https://evil.example.com/done",
		"https://hooks.example.com.evil.net/done",
		"https://xhooks.example.com/done",
		"https://ci.example.org:8443/hook",
		"https://build.ci.example.org/hook",
		"https://build.ci.example.org:9443/hook",
		"https://[::1]/cb",
		"https://127.0.0.2/cb",
		"https://169.254.169.254/latest/meta-data",
	] {
		d := fixtures.check with input as fixtures.input_with({"callback_url": url})
			with data.sandgate.config.callback_hosts as callback_hosts
		fixtures.denied_by(d, "callback_host_allowlist")
	}
}

test_malformed_url_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"callback_url": "HTTPS://Hooks.example.com/"})
		with data.sandgate.config.callback_hosts as callback_hosts
	fixtures.denied_by(d, "callback_host_allowlist")
}

test_http_only_to_insecure_hosts if {
	d := fixtures.check with input as fixtures.input_with({"callback_url": "http://hooks.example.com/done"})
		with data.sandgate.config.callback_hosts as callback_hosts
		with data.sandgate.config.callback_insecure_hosts as []
	fixtures.denied_by(d, "callback_https")
	not fixtures.denied_by(d, "callback_host_allowlist")

	ok := fixtures.check with input as fixtures.input_with({"callback_url": "http://127.0.0.1:8080/cb"})
		with data.sandgate.config.callback_hosts as callback_hosts
		with data.sandgate.config.callback_insecure_hosts as ["127.0.0.1"]
	ok.allow == true

	port := fixtures.check with input as fixtures.input_with({"callback_url": "http://127.0.0.1:8080/cb"})
		with data.sandgate.config.callback_hosts as callback_hosts
		with data.sandgate.config.callback_insecure_hosts as ["127.0.0.1:9090"]
	fixtures.denied_by(port, "callback_https")
}

callback_air_gapped := {"air_gapped": true, "mount_roots": ["/srv/work"]}

test_air_gapped_allows_loopback if {
	every url in ["https://127.0.0.1:1234/cb", "https://[::1]:9000/cb"] {
		d := fixtures.check with input as fixtures.input_settings({"callback_url": url}, callback_air_gapped)
			with data.sandgate.config.callback_hosts as callback_hosts
		not fixtures.denied_by(d, "air_gapped_callback")
		not fixtures.denied_by(d, "callback_host_allowlist")
	}
}

test_air_gapped_denies_off_host_callbacks if {
	d := fixtures.check with input as fixtures.input_settings({"callback_url": "https://hooks.example.com/done"}, callback_air_gapped)
		with data.sandgate.config.callback_hosts as callback_hosts
		with data.sandgate.config.air_gapped_callback_hosts as []
	fixtures.denied_by(d, "air_gapped_callback")
	not fixtures.denied_by(d, "callback_host_allowlist")
}

test_air_gapped_hosts_the_data_names if {
	d := fixtures.check with input as fixtures.input_settings({"callback_url": "https://10.1.2.3/done"}, callback_air_gapped)
		with data.sandgate.config.callback_hosts as callback_hosts
		with data.sandgate.config.air_gapped_callback_hosts as ["10.1.2.3"]
	not fixtures.denied_by(d, "air_gapped_callback")
}

test_air_gapped_without_callback_is_not_judged if {
	d := fixtures.check with input as fixtures.input_settings({}, callback_air_gapped)
	not fixtures.denied_by(d, "air_gapped_callback")
	not fixtures.denied_by(d, "callback_host_allowlist")
}
