package sandgate.admission_test

import data.sandgate.admission
import data.sandgate.config
import data.sandgate.fixtures

test_fixture_request_is_allowed if {
	d := admission.decision with input as fixtures.input_with({})
	d.allow == true
	d.violations == []
	d.mutations == []
}

# Controls and severity are not the findings' to say: the engine adds
# them from each rule's METADATA, and refuses a bundle with a rule that
# has none.
test_every_violation_is_complete if {
	d := admission.decision with input as fixtures.input_with({"privileged": true, "ports": ["80:80"], "cap_add": ["ALL"]})
	count(d.violations) >= 3
	every v in d.violations {
		v.rule != ""
		v.message != ""
		v.action == "deny"
	}
}

test_action_override_turns_deny_into_warn if {
	d := admission.decision with input as fixtures.input_with({"ports": ["8080"]})
		with config.actions as {"no_published_ports": "warn"}
	d.allow == true
	fixtures.warned_by(d, "no_published_ports")
}

test_unknown_action_override_is_ignored if {
	d := admission.decision with input as fixtures.input_with({"ports": ["8080"]})
		with config.actions as {"no_published_ports": "allow"}
	fixtures.denied_by(d, "no_published_ports")
}

now := time.parse_rfc3339_ns("2026-06-01T00:00:00Z")

test_exemption_for_principal_applies if {
	d := admission.decision with input as fixtures.input_with({"ports": ["8080"]})
		with config.exemptions as [{"principal": "alice", "rule": "no_published_ports", "expires": "2026-07-01T00:00:00Z", "reason": "ENG-1 demo"}]
		with time.now_ns as now
	d.allow == true
	some w in d.warnings
	w.rule == "no_published_ports"
	contains(w.message, "exempted until 2026-07-01T00:00:00Z: ENG-1 demo")
}

test_exemption_for_team_applies if {
	d := admission.decision with input as fixtures.input_with({"ports": ["8080"]})
		with config.exemptions as [{"team": "payments", "rule": "no_published_ports", "expires": "2026-07-01T00:00:00Z", "reason": "r"}]
		with time.now_ns as now
	d.allow == true
}

test_expired_exemption_does_not_apply if {
	d := admission.decision with input as fixtures.input_with({"ports": ["8080"]})
		with config.exemptions as [{"principal": "alice", "rule": "no_published_ports", "expires": "2026-05-01T00:00:00Z", "reason": "r"}]
		with time.now_ns as now
	fixtures.denied_by(d, "no_published_ports")
}

test_exemption_for_someone_else_does_not_apply if {
	d := admission.decision with input as fixtures.input_with({"ports": ["8080"]})
		with config.exemptions as [
			{"principal": "bob", "rule": "no_published_ports", "expires": "2026-07-01T00:00:00Z", "reason": "r"},
			{"team": "search", "rule": "no_published_ports", "expires": "2026-07-01T00:00:00Z", "reason": "r"},
			{"principal": "alice", "team": "search", "rule": "no_published_ports", "expires": "2026-07-01T00:00:00Z", "reason": "r"},
		]
		with time.now_ns as now
	fixtures.denied_by(d, "no_published_ports")
}

test_exemption_covers_only_its_rule if {
	d := admission.decision with input as fixtures.input_with({"ports": ["8080"], "privileged": true})
		with config.exemptions as [{"principal": "alice", "rule": "no_published_ports", "expires": "2026-07-01T00:00:00Z", "reason": "r"}]
		with time.now_ns as now
	fixtures.denied_by(d, "no_privileged")
	fixtures.warned_by(d, "no_published_ports")
}

test_exemption_without_expiry_does_not_apply if {
	d := admission.decision with input as fixtures.input_with({"ports": ["8080"]})
		with config.exemptions as [{"principal": "alice", "rule": "no_published_ports", "reason": "r"}]
		with time.now_ns as now
	fixtures.denied_by(d, "no_published_ports")
}

# The bundle's own data must be consistent: these tests refuse a data.json
# edit that would break it.
test_data_defaults_within_maxima if {
	every field, max in config.maxima {
		_default(field) <= max
	}
}

_default(field) := config.defaults.resources[field]

_default(field) := config.defaults[field] if not config.defaults.resources[field]

test_data_exemptions_are_well_formed if {
	every e in config.exemptions {
		is_string(e.rule)
		e.rule != ""
		is_string(e.reason)
		e.reason != ""
		time.parse_rfc3339_ns(e.expires)
		_names_someone(e)
	}
}

# The lists the rules read must be there and hold only non-empty strings:
# a number in sensitive_paths, say, would make its rule fail instead of
# find (the engine then denies every request with a mount), and a missing
# list would leave rules undefined.
test_data_lists_hold_strings if {
	every key in {
		"allowed_images", "allowed_capabilities", "allowed_networks", "allowed_sysctls", "sensitive_paths", "docker_socket_names", "mask",
		"allowed_apparmor_profiles", "allowed_selinux_labels", "network_capabilities", "pull_registries",
		"callback_hosts", "callback_insecure_hosts", "air_gapped_callback_hosts",
	} {
		is_array(config[key])
		every v in config[key] {
			is_string(v)
			v != ""
		}
	}
}

# team_mount_dirs maps a team to directories relative to each mount root:
# plain relative paths, so that none leaves the roots ("..", "/etc").
test_data_team_mount_dirs_are_relative if {
	is_object(config.team_mount_dirs)
	every _, dirs in config.team_mount_dirs {
		is_array(dirs)
		every d in dirs {
			regex.match(`^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$`, d)
		}
	}
}

# An allowed image is an exact repository, or a glob within a registry
# named by host: "sandgate/*" would admit every repository of a Docker Hub
# namespace that sandgate does not own.
test_data_allowed_images_are_exact_or_registry_qualified if {
	every image in config.allowed_images {
		not contains(image, ",")
		_exact_or_qualified(image)
	}
}

# The allowlist spells a repository as images are compared: Docker Hub's
# the shortest way ("busybox", "sandgate/sandbox"), others with their
# registry.
test_data_allowed_images_are_spelt_short if {
	every image in config.allowed_images {
		not regex.match(`^(docker\.io/|index\.docker\.io/|library/[^/]+$)`, image)
	}
}

_exact_or_qualified(image) if not regex.match(`[*?\[\]{}]`, image)

_exact_or_qualified(image) if {
	registry := split(image, "/")[0]
	count(split(image, "/")) > 1
	regex.match(`^([A-Za-z0-9.-]+\.[A-Za-z0-9.-]+|localhost|[A-Za-z0-9.-]+:[0-9]+)(:[0-9]+)?$`, registry)
}

test_data_pull_registries_are_hosts if {
	every r in config.pull_registries {
		regex.match(`^[A-Za-z0-9.-]+(:[0-9]+)?$`, r)
	}
}

# The minima hold at least what the executor needs to create and start a
# container: Docker's 6 MB and 0.01 CPU, two processes (docker-init and
# the command), and the file descriptors runc needs to start it.
test_data_minima_cover_the_executor if {
	every field, max in config.maxima {
		is_number(config.minima[field])
		config.minima[field] > 0
		config.minima[field] <= max
	}
	config.minima.memory_mb >= 6
	config.minima.cpus >= 0.01
	config.minima.pids >= 2
	config.minima.nofile >= 16
}

test_data_defaults_within_minima if {
	every field, min in config.minima {
		_default(field) >= min
	}
}

# The executor adds only capabilities Linux has; it refuses another name.
test_data_capabilities_are_linux_capabilities if {
	linux := {
		"AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE", "CHOWN",
		"DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE",
		"LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE",
		"NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_ADMIN",
		"SYS_BOOT", "SYS_CHROOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO",
		"SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "SYSLOG", "WAKE_ALARM",
	}
	every c in config.allowed_capabilities {
		c in linux
	}
	every c in config.network_capabilities {
		c in linux
	}
}

test_data_actions_are_deny_warn_or_require_approval if {
	is_object(config.actions)
	every rule, action in config.actions {
		is_string(rule)
		action in {"deny", "warn", "require_approval"}
	}
}

test_data_maxima_are_positive_numbers if {
	every _, m in config.maxima {
		is_number(m)
		m > 0
	}
}

test_data_require_digest_is_boolean if is_boolean(config.require_digest)

# image_digests maps a name of allowed_images (exactly as spelt there) to
# the sha256 digests it may be pinned to: a key that is not an allowed
# name would pin nothing that runs.
test_data_image_digests_are_allowed_names_and_digests if {
	is_object(config.image_digests)
	every name, digests in config.image_digests {
		name in config.allowed_images
		is_array(digests)
		count(digests) > 0
		every d in digests {
			regex.match(`^sha256:[a-f0-9]{64}$`, d)
		}
	}
}

_names_someone(e) if e.principal != ""

_names_someone(e) if e.team != ""

# images.rego decides the default image without parsing it, trusting this
# test: judged in full, it is a reference to an allowed repository.
test_data_default_image_is_allowed if {
	d := admission.decision with input as fixtures.input_with({"image": config.defaults.image})
		with admission._default_image as false
	d.allow == true
}

test_incomplete_finding_still_denies_with_overrides if {
	d := admission.decision with input as fixtures.input_with({})
		with admission.finding as {{"rule": "bare"}}
		with config.actions as {"other": "warn"}
	fixtures.denied_by(d, "bare")
}

# The shortcut for denies only must decide exactly what the general path
# does, whatever the findings look like.
_deny(rule) := {"rule": rule, "message": rule, "controls": ["X-1"], "action": "deny"}

test_plain_denies_shortcut_matches_general_path if {
	every findings in [
		{_deny("a"), _deny("b"), _deny("c")},
		{_deny("a"), object.union(_deny("b"), {"action": "warn"})},
		{_deny("a"), {"rule": "bare"}},
		{_deny("a"), object.union(_deny("b"), {"action": "other"})},
	] {
		shortcut := admission.decision with input as fixtures.input_with({})
			with admission.finding as findings
		general := admission.decision with input as fixtures.input_with({})
			with admission.finding as findings
			with admission._plain_denies as false
		shortcut == general
	}
}

test_plain_denies_lists_every_finding if {
	d := admission.decision with input as fixtures.input_with({"privileged": true, "ports": ["80:80"], "pid_mode": "host"})
	d.allow == false
	{v.rule | some v in d.violations} == {"no_privileged", "no_published_ports", "host_pid"}
	d.warnings == []
}

test_a_finding_that_is_not_an_object_denies if {
	d := admission.decision with input as fixtures.input_with({})
		with admission.finding as {"oops"}
	d.allow == false
	fixtures.denied_by(d, "policy.malformed_finding")
}

test_a_malformed_finding_denies_next_to_a_warn if {
	d := admission.decision with input as fixtures.input_with({})
		with admission.finding as {"oops", {"rule": "r", "message": "m", "controls": ["x"], "action": "warn"}}
	d.allow == false
	fixtures.denied_by(d, "policy.malformed_finding")
	fixtures.warned_by(d, "r")
}

# A request with thousands of elements at fault makes a decision that
# carries each rule once, with the count of elements and a short message.
test_each_rule_reported_once_with_a_count if {
	caps := [sprintf("X%d", [i]) | some i in numbers.range(1, 2000)]
	devices := [sprintf("/dev/d%d", [i]) | some i in numbers.range(1, 500)]
	ports := [sprintf("%d", [i]) | some i in numbers.range(1, 500)]
	sysctls := {sprintf("kernel.x%d", [i]): "1" | some i in numbers.range(1, 300)}
	mounts := [fixtures.mount(sprintf("/etc/x%d", [i])) | some i in numbers.range(1, 200)]
	volumes := [{"name": sprintf("../v%d", [i]), "target": sprintf("/v%d", [i])} | some i in numbers.range(1, 100)]
	d := admission.decision with input as fixtures.input_with({
		"cap_add": caps, "devices": devices, "ports": ports, "sysctls": sysctls,
		"mounts": mounts, "volumes": volumes,
	})
	counts := {v.rule: v.count | some v in d.violations}
	count(counts) == count(d.violations)
	counts == {
		"capabilities": 2000, "no_devices": 500, "no_published_ports": 500, "sysctls": 300,
		"no_sensitive_mounts": 200, "mount_outside_roots": 200, "volume_name": 100,
	}
	every v in d.violations {
		count(v.message) < 512
		contains(v.message, " more")
	}
}

test_elements_at_fault_are_named_up_to_three if {
	d := fixtures.check with input as fixtures.input_with({"devices": ["/dev/a", "/dev/b", "/dev/c"]})
	[v] := d.violations
	v.count == 3
	v.message == "host devices must not be passed to the container: /dev/a, /dev/b, /dev/c"
	d2 := fixtures.check with input as fixtures.input_with({"devices": ["/dev/a", "/dev/b", "/dev/c", "/dev/d"]})
	[v2] := d2.violations
	v2.count == 4
	endswith(v2.message, "/dev/a, /dev/b, /dev/c and 1 more")
}
