package sandgate.admission_test

import data.sandgate.config
import data.sandgate.fixtures

test_mount_within_root_is_allowed if {
	every path in ["/srv/work/payments", "/srv/work/payments/proj-a", "/srv/work/payments/a/b/c"] {
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
	m := object.union(fixtures.mount("/srv/work/payments/a"), {"propagation": "rprivate"})
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
	d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/srv/work/payments/a")]}, {"air_gapped": false, "mount_roots": ["/srv/work/"]})
	d.allow == true
	d2 := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/srv/workx")]}, {"air_gapped": false, "mount_roots": ["/srv/work/"]})
	fixtures.denied_by(d2, "mount_outside_roots")
}

test_mounts_at_fault_are_reported_once if {
	mounts := [fixtures.mount("/etc"), fixtures.mount("/srv/work/a"), fixtures.mount("/var/lib"), fixtures.mount("/usr"), fixtures.mount("/boot")]
	d := fixtures.check with input as fixtures.input_with({"mounts": mounts})
	[v] := [v | some v in d.violations; v.rule == "no_sensitive_mounts"]
	v.count == 4
	startswith(v.message, "mounts[0] /etc, mounts[2] /var/lib, mounts[3] /usr and 1 more: ")
}

test_without_roots_every_mount_is_reported_once if {
	d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/srv/work/a"), fixtures.mount("/srv/work/b")]}, {"air_gapped": false, "mount_roots": []})
	[v] := d.violations
	v.rule == "mount_outside_roots"
	v.count == 2
}

# A team mounts only under <root>/<team>/ of each mount root, by resolved
# path and whole components; the data may map it to other directories.
test_team_mounts_its_own_directory if {
	every path in ["/srv/work/payments", "/srv/work/payments/proj", "/srv/work/payments/a/b"] {
		d := fixtures.check with input as fixtures.input_with({"mounts": [fixtures.mount(path)]})
		d.allow == true
	}
}

test_team_may_not_mount_another_teams_directory if {
	every path in ["/srv/work/search", "/srv/work/search/proj", "/srv/work", "/srv/work/payments-old", "/srv/work/paymentsx/a", "/srv/work/shared"] {
		d := fixtures.check with input as fixtures.input_with({"mounts": [fixtures.mount(path)]})
		fixtures.denied_by(d, "mount_outside_team_dir")
		not fixtures.denied_by(d, "mount_outside_roots")
		some v in d.violations
		v.rule == "mount_outside_team_dir"
		contains(v.message, "/srv/work/payments")
	}
}

test_team_directory_is_judged_by_resolved_path if {
	# A link in the team's own directory to another team's.
	m := {"source": "/srv/work/payments/link", "target": "/w", "read_only": false, "resolved": "/srv/work/search/proj"}
	d := fixtures.check with input as fixtures.input_with({"mounts": [m]})
	fixtures.denied_by(d, "mount_outside_team_dir")
}

test_team_directory_in_every_root if {
	s := {"air_gapped": false, "mount_roots": ["/srv/work", "/data/"]}
	d := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/data/payments/x"), fixtures.mount("/srv/work/payments")]}, s)
	d.allow == true
	d2 := fixtures.check with input as fixtures.input_settings({"mounts": [fixtures.mount("/data/search/x")]}, s)
	fixtures.denied_by(d2, "mount_outside_team_dir")
}

test_admins_are_not_exempt_from_team_directories if {
	i := object.union(fixtures.input_with({"mounts": [fixtures.mount("/srv/work/payments/a")]}), {"principal": {"name": "root-admin", "team": "platform", "roles": ["admin", "security"]}})
	d := fixtures.check with input as i
	fixtures.denied_by(d, "mount_outside_team_dir")
}

test_data_maps_a_team_to_other_directories if {
	dirs := {"payments": ["shared/datasets", "pay"]}
	every path in ["/srv/work/shared/datasets", "/srv/work/shared/datasets/a", "/srv/work/pay/x"] {
		d := fixtures.check with input as fixtures.input_with({"mounts": [fixtures.mount(path)]})
			with config.team_mount_dirs as dirs
		d.allow == true
	}
	every path in ["/srv/work/payments/a", "/srv/work/shared", "/srv/work/shared/datasets-x"] {
		d := fixtures.check with input as fixtures.input_with({"mounts": [fixtures.mount(path)]})
			with config.team_mount_dirs as dirs
		fixtures.denied_by(d, "mount_outside_team_dir")
	}
}

test_team_without_a_plain_name_mounts_nothing if {
	every team in ["", ".", "..", "a/b", "../search", "pay ments"] {
		i := object.union(fixtures.input_with({"mounts": [fixtures.mount("/srv/work/payments/a")]}), {"principal": {"team": team}})
		d := fixtures.check with input as i
		fixtures.denied_by(d, "mount_outside_team_dir")
	}
}

# The executor names a cache volume sandgate-cache-<team>.<name>: the name
# holds no ".", so the last "." splits the two, and no two teams' volumes
# share a Docker name (team "a-b" with volume "c" against team "a" with
# volume "b-c" would both be sandgate-cache-a-b-c with a "-").
test_cache_volume_names_never_collide_across_teams if {
	teams := ["a", "a-b", "a.b", "a_b", "a.b.c", "payments"]
	names := ["b", "c", "b-c", "b.c", "c.d", "b_c", "npm-cache"]
	admitted := [[team, name] |
		some team in teams
		some name in names
		i := object.union(fixtures.input_with({"volumes": [{"name": name, "target": "/cache"}]}), {"principal": {"team": team}})
		d := fixtures.check with input as i
		d.allow
	]
	count(admitted) == count(teams) * 5
	docker := {concat("", ["sandgate-cache-", p[0], ".", p[1]]) | some p in admitted}
	count(docker) == count(admitted)
}

test_volume_name_with_a_dot_is_denied if {
	every name in ["npm.cache", "a.b", "x."] {
		d := fixtures.check with input as fixtures.input_with({"volumes": [{"name": name, "target": "/cache"}]})
		fixtures.denied_by(d, "volume_name")
	}
}

test_team_that_cannot_name_a_volume_has_none if {
	every team in ["", ".", "-a", "a/b", "pay ments", concat("", ["a" | some _ in numbers.range(1, 64)])] {
		i := object.union(fixtures.input_with({"volumes": [{"name": "npm-cache", "target": "/cache"}]}), {"principal": {"team": team}})
		d := fixtures.check with input as i
		fixtures.denied_by(d, "volume_team")
	}
}

test_principal_without_a_team_has_no_volumes_and_no_mounts if {
	with_team := fixtures.input_with({"volumes": [{"name": "npm-cache", "target": "/cache"}], "mounts": [fixtures.mount("/srv/work/payments")]})
	i := object.union(object.remove(with_team, ["principal"]), {"principal": object.remove(fixtures.principal, ["team"])})
	i.principal == {"name": "alice", "roles": ["submitter"]}
	d := fixtures.check with input as i
	fixtures.denied_by(d, "volume_team")
	fixtures.denied_by(d, "mount_outside_team_dir")
}

# Bind mounts are always rprivate: any other propagation is refused by the
# executor, so the policy denies it with a reason.
test_propagation_other_than_private_is_denied if {
	every p in ["slave", "rslave", "shared", "rshared", "bogus", "private,ro"] {
		m := object.union(fixtures.mount("/srv/work/payments/a"), {"propagation": p})
		d := fixtures.check with input as fixtures.input_with({"mounts": [m]})
		fixtures.denied_by(d, "mount_propagation")
	}
	every p in ["private", "rprivate"] {
		m := object.union(fixtures.mount("/srv/work/payments/a"), {"propagation": p})
		d := fixtures.check with input as fixtures.input_with({"mounts": [m]})
		d.allow == true
	}
}
