package sandgate.admission_test

import data.sandgate.config
import data.sandgate.fixtures

test_limits_at_maxima_are_allowed if {
	m := config.maxima
	d := fixtures.check with input as fixtures.input_with({
		"resources": {"memory_mb": m.memory_mb, "cpus": m.cpus, "pids": m.pids, "tmpfs_mb": m.tmpfs_mb, "nofile": m.nofile, "workspace_mb": m.workspace_mb},
		"timeout_seconds": m.timeout_seconds,
		"output_limit_bytes": m.output_limit_bytes,
		"artifact_limit_bytes": m.artifact_limit_bytes,
	})
	d.allow == true
}

test_limits_above_maxima_are_denied if {
	m := config.maxima
	d := fixtures.check with input as fixtures.input_with({
		"resources": {"memory_mb": m.memory_mb + 1, "cpus": m.cpus + 0.5, "pids": m.pids + 1, "tmpfs_mb": m.tmpfs_mb + 1, "nofile": m.nofile + 1, "workspace_mb": m.workspace_mb + 1},
		"timeout_seconds": m.timeout_seconds + 1,
		"output_limit_bytes": m.output_limit_bytes + 1,
		"artifact_limit_bytes": m.artifact_limit_bytes + 1,
	})
	every rule in {"memory_limit", "cpu_limit", "pids_limit", "tmpfs_limit", "nofile_limit", "timeout_limit", "output_limit", "workspace_limit", "artifact_limit"} {
		fixtures.denied_by(d, rule)
	}
}

test_missing_limit_is_denied if {
	d := fixtures.check with input as fixtures.input_with({})
		with input.request.resources as {"memory_mb": 512, "cpus": 1, "pids": 256, "tmpfs_mb": 64, "workspace_mb": 256}
	fixtures.denied_by(d, "nofile_limit")
}

test_limit_not_positive_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"timeout_seconds": 0})
	fixtures.denied_by(d, "timeout_limit")
}

test_limits_with_another_field_are_still_judged if {
	d := fixtures.check with input as fixtures.input_with({"resources": object.union(fixtures.request.resources, {"gpus": 1, "pids": 5000})})
	fixtures.denied_by(d, "pids_limit")
	d2 := fixtures.check with input as fixtures.input_with({"resources": object.union(fixtures.request.resources, {"gpus": 1})})
	d2.allow == true
}

test_limits_at_minima_are_allowed if {
	m := config.minima
	d := fixtures.check with input as fixtures.input_with({
		"resources": {"memory_mb": m.memory_mb, "cpus": m.cpus, "pids": m.pids, "tmpfs_mb": m.tmpfs_mb, "nofile": m.nofile, "workspace_mb": m.workspace_mb},
		"timeout_seconds": m.timeout_seconds,
		"output_limit_bytes": m.output_limit_bytes,
		"artifact_limit_bytes": m.artifact_limit_bytes,
	})
	d.allow == true
}

# Docker refuses less than 6 MB of memory and less than 0.01 CPU; runc
# cannot start a container with a dozen file descriptors; docker-init and
# the command need two processes.
test_limits_below_minima_are_denied if {
	d := fixtures.check with input as fixtures.input_with({"resources": {"memory_mb": 1, "cpus": 0.001, "pids": 1, "tmpfs_mb": 64, "nofile": 8}})
	every rule in {"memory_limit", "cpu_limit", "pids_limit", "nofile_limit"} {
		fixtures.denied_by(d, rule)
	}
	some v in d.violations
	v.rule == "memory_limit"
	v.message == "memory_mb 1 is below the minimum 6"
}
