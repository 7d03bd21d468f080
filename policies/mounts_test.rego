package sandgate.admission_test

import data.sandgate.fixtures

test_mount_within_root_is_allowed if {
	every path in ["/srv/work", "/srv/work/proj-a", "/srv/work/a/b/c"] {
		d := fixtures.check with input as fixtures.input_with({"mounts": [fixtures.mount(path)]})
		d.allow == true
	}
}

test_string_prefix_is_not_within_root if {
	d := fixtures.check with input as fixtures.input_with({"mounts": [fixtures.mount("/srv/work-evil")]})
	fixtures.denied_by(d, "mount_outside_roots")
}

test_no_roots_means_no_mounts if {
	d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/srv/work/a")]}, {"air_gapped": false, "mount_roots": []})
	fixtures.denied_by(d, "mount_outside_roots")
}

test_sensitive_paths_are_denied if {
	every path in ["/", "/etc", "/etc/ssl", "/var", "/usr/bin", "/boot", "/dev", "/proc/1", "/sys", "/root", "/lib", "/lib64", "/libx32/x", "/run"] {
		d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount(path)]}, {"air_gapped": false, "mount_roots": ["/"]})
		fixtures.denied_by(d, "no_sensitive_mounts")
	}
}

test_parent_of_sensitive_path_is_denied if {
	d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/")]}, {"air_gapped": false, "mount_roots": ["/"]})
	fixtures.denied_by(d, "no_sensitive_mounts")
}

test_similar_names_are_not_sensitive if {
	every path in ["/etcetera", "/srv/etc", "/variable", "/home/lib"] {
		d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount(path)]}, {"air_gapped": false, "mount_roots": ["/"]})
		not fixtures.denied_by(d, "no_sensitive_mounts")
	}
}

test_docker_socket_is_denied_anywhere if {
	every path in ["/run/docker.sock", "/var/run/docker.sock", "/srv/work/docker.sock", "/srv/work/x/containerd.sock"] {
		d := fixtures.check with input as fixtures.input_with({"mounts": [fixtures.mount(path)]})
		fixtures.denied_by(d, "no_docker_socket")
	}
}

test_docker_socket_behind_a_link_is_denied if {
	m := {"source": "/srv/work/link", "target": "/x", "read_only": false, "resolved": "/run/docker.sock"}
	d := fixtures.check with input as fixtures.input_with({"mounts": [m]})
	fixtures.denied_by(d, "no_docker_socket")
}

test_unresolved_mount_is_denied if {
	m := {"source": "/srv/work/a", "target": "/x", "read_only": false}
	d := fixtures.check with input as fixtures.input_with({"mounts": [m]})
	fixtures.denied_by(d, "mount_unresolved")
}

test_private_propagation_is_allowed if {
	m := object.union(fixtures.mount("/srv/work/a"), {"propagation": "rprivate"})
	d := fixtures.check with input as fixtures.input_with({"mounts": [m]})
	d.allow == true
}

test_shared_propagation_is_denied if {
	every p in ["shared", "rshared"] {
		m := object.union(fixtures.mount("/srv/work/a"), {"propagation": p})
		d := fixtures.check with input as fixtures.input_with({"mounts": [m]})
		fixtures.denied_by(d, "mount_propagation")
	}
}

test_plain_volume_name_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"volumes": [{"name": "npm-cache", "target": "/cache"}]})
	d.allow == true
}

test_volume_name_that_is_a_path_is_denied if {
	every name in ["/etc", "../x", "a/b", ".", "..", "/var/run/docker.sock"] {
		d := fixtures.check with input as fixtures.input_with({"volumes": [{"name": name, "target": "/cache"}]})
		fixtures.denied_by(d, "volume_name")
	}
}

test_directories_above_a_sensitive_path_are_denied if {
	every path in ["/var", "/var/lib"] {
		d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount(path)]}, {"air_gapped": false, "mount_roots": ["/"]})
			with data.sandgate.config.sensitive_paths as ["/var/lib/docker"]
		fixtures.denied_by(d, "no_sensitive_mounts")
	}
	d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/var/log")]}, {"air_gapped": false, "mount_roots": ["/"]})
		with data.sandgate.config.sensitive_paths as ["/var/lib/docker"]
	not fixtures.denied_by(d, "no_sensitive_mounts")
}

test_mount_root_with_trailing_slash if {
	d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/srv/work/a")]}, {"air_gapped": false, "mount_roots": ["/srv/work/"]})
	d.allow == true
	d2 := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/srv/workx")]}, {"air_gapped": false, "mount_roots": ["/srv/work/"]})
	fixtures.denied_by(d2, "mount_outside_roots")
}

test_mounts_at_fault_are_reported_once if {
	mounts := [fixtures.mount("/etc"), fixtures.mount("/srv/work/a"), fixtures.mount("/var/lib"), fixtures.mount("/usr"), fixtures.mount("/boot")]
	d := fixtures.check with input as fixtures.input_with({"mounts": mounts})
	[v] := [v | some v in d.violations; v.rule == "no_sensitive_mounts"]
	v.count == 4
	startswith(v.message, `mounts[0] "/etc" (resolved /etc), mounts[2] "/var/lib" (resolved /var/lib), mounts[3] "/usr" (resolved /usr) and 1 more: `)
}

test_without_roots_every_mount_is_reported_once if {
	d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/srv/work/a"), fixtures.mount("/srv/work/b")]}, {"air_gapped": false, "mount_roots": []})
	[v] := d.violations
	v.rule == "mount_outside_roots"
	v.count == 2
}
