package sandgate.admission_test

import data.sandgate.config
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

test_ordinary_group_is_allowed if {
	every gid in [10001, 1, 5000, 2147483647] {
		d := fixtures.check with input as fixtures.input_with({"user": sprintf("10001:%d", [gid]), "gid": gid})
		d.allow == true
	}
}

test_gid_zero_is_denied if {
	# "10001:0", "10001:00" and "10001:0000" all normalise to gid 0.
	every user in ["10001:0", "10001:00", "10001:0000"] {
		d := fixtures.check with input as fixtures.input_with({"user": user, "gid": 0})
		fixtures.denied_by(d, "privileged_group")
		some v in d.violations
		v.rule == "privileged_group"
		contains(v.message, "gid 0")
	}
}

test_gid_zero_is_denied_whatever_the_data_says if {
	d := fixtures.check with input as fixtures.input_with({"user": "10001:0", "gid": 0})
		with config.privileged_gids as []
	fixtures.denied_by(d, "privileged_group")
}

test_privileged_gids_from_data_are_denied if {
	every gid in config.privileged_gids {
		d := fixtures.check with input as fixtures.input_with({"user": sprintf("10001:%d", [gid]), "gid": gid})
		fixtures.denied_by(d, "privileged_group")
	}

	# The Docker socket's group differs from host to host: the data names it.
	d := fixtures.check with input as fixtures.input_with({"user": "10001:998", "gid": 998})
		with config.privileged_gids as [998]
	fixtures.denied_by(d, "privileged_group")
	d2 := fixtures.check with input as fixtures.input_with({"user": "10001:998", "gid": 998})
	d2.allow == true
}

test_host_groups_are_denied if {
	# The groups the gateway found at start: the Docker socket's and a
	# mount root's. Each is denied, naming what it owns; another gid runs.
	host := {"air_gapped": false, "mount_roots": ["/srv/work"], "host_groups": [
		{"gid": 105, "owns": "the Docker socket /var/run/docker.sock"},
		{"gid": 4242, "owns": "the mount root /srv/work"},
	]}
	every g in host.host_groups {
		d := fixtures.check with input as fixtures.input_settings({"user": sprintf("10001:%d", [g.gid]), "gid": g.gid}, host)
		fixtures.denied_by(d, "privileged_group")
		some v in d.violations
		v.rule == "privileged_group"
		contains(v.message, g.owns)
	}
	d := fixtures.check with input as fixtures.input_settings({"user": "10001:10002", "gid": 10002}, host)
	d.allow == true
}

test_user_without_numeric_group_is_denied if {
	# "10001" alone takes the group of the image's passwd entry, or gid 0
	# when it has none; a group name is whatever the image maps it to.
	every user in ["10001", "10001:docker", "10001:root", "10001:wheel"] {
		d := fixtures.check with input as fixtures.input_removing(["gid"], {"user": user})
		fixtures.denied_by(d, "numeric_group")
		some v in d.violations
		v.rule == "numeric_group"
		contains(v.message, "uid:gid")
	}
	d := fixtures.check with input as fixtures.input_with({"user": "10001", "gid": null})
	fixtures.denied_by(d, "numeric_group")
}

test_gid_zero_without_a_user_string_is_denied if {
	d := fixtures.check with input as fixtures.input_removing(["user"], {"gid": 0})
	fixtures.denied_by(d, "privileged_group")
}
