# Resource limits lie between data.sandgate.config.minima and maxima. The
# minima are what the executor needs to create and start a container
# (Docker refuses less than 6 MB or 0.01 CPU; docker-init and the command
# are two processes; runc needs file descriptors of its own to start it),
# so a run the policy admits is never refused for its size. A limit that
# is missing or not positive is refused as well: the executor always sets
# one, and normalisation fills it from the defaults.
#
# Most requests are within bounds, so one cheap check (_limits_ok) decides
# that; the per-limit rules only run when it fails.
package sandgate.admission

import data.sandgate.config

# _limit_rules names the rule of each limit.
_limit_rules := {
	"memory_mb": "memory_limit",
	"cpus": "cpu_limit",
	"pids": "pids_limit",
	"tmpfs_mb": "tmpfs_limit",
	"nofile": "nofile_limit",
	"timeout_seconds": "timeout_limit",
	"output_limit_bytes": "output_limit",
	"workspace_mb": "workspace_limit",
	"artifact_limit_bytes": "artifact_limit",
}

# _limits are the request's limits, flat, as maxima names them.
_limits := object.union(input.request.resources, {
	"timeout_seconds": input.request.timeout_seconds,
	"output_limit_bytes": input.request.output_limit_bytes,
	"artifact_limit_bytes": input.request.artifact_limit_bytes,
})

# _limits_ok: every limit is set and within its minimum and maximum (the
# bundle's tests hold every minimum positive, so each limit is). It reads
# the limits and the maxima with one object pattern each. A request or
# maxima with other fields does not match the patterns, and data without
# minima fails the checks; the rules below, which do not rely on it, then
# decide.
_limits_ok if {
	{
		"memory_mb": memory_mb, "cpus": cpus, "pids": pids, "tmpfs_mb": tmpfs_mb, "nofile": nofile,
		"workspace_mb": workspace_mb,
	} := input.request.resources
	{
		"memory_mb": max_memory_mb, "cpus": max_cpus, "pids": max_pids, "tmpfs_mb": max_tmpfs_mb, "nofile": max_nofile,
		"timeout_seconds": max_timeout_seconds, "output_limit_bytes": max_output_limit_bytes,
		"workspace_mb": max_workspace_mb, "artifact_limit_bytes": max_artifact_limit_bytes,
	} := config.maxima
	timeout_seconds := input.request.timeout_seconds
	output_limit_bytes := input.request.output_limit_bytes
	artifact_limit_bytes := input.request.artifact_limit_bytes
	minima := config.minima
	workspace_mb >= minima.workspace_mb
	artifact_limit_bytes >= minima.artifact_limit_bytes
	workspace_mb <= max_workspace_mb
	artifact_limit_bytes <= max_artifact_limit_bytes
	memory_mb >= minima.memory_mb
	cpus >= minima.cpus
	pids >= minima.pids
	tmpfs_mb >= minima.tmpfs_mb
	nofile >= minima.nofile
	timeout_seconds >= minima.timeout_seconds
	output_limit_bytes >= minima.output_limit_bytes
	memory_mb <= max_memory_mb
	cpus <= max_cpus
	pids <= max_pids
	tmpfs_mb <= max_tmpfs_mb
	nofile <= max_nofile
	timeout_seconds <= max_timeout_seconds
	output_limit_bytes <= max_output_limit_bytes
}

# A limit that is missing, not positive, below its minimum or above its
# maximum. Each limit is a rule of its own, which the METADATA blocks
# below describe one by one (custom.rule), while one definition reports
# them all: a request within bounds then costs one evaluation of
# _limits_ok here, not one per limit.

# METADATA
# title: Memory limit
# description: >-
#   resources.memory_mb must be set, at least minima.memory_mb (Docker
#   refuses less than 6 MB) and at most maxima.memory_mb, so that one run
#   cannot take the memory of the node from the others.
# custom:
#   rule: memory_limit
#   severity: medium
#   controls: [CIS-5.11]

# METADATA
# title: CPU limit
# description: >-
#   resources.cpus must be set, at least minima.cpus (Docker refuses less
#   than 0.01) and at most maxima.cpus, which must not exceed the CPUs of
#   the smallest node.
# custom:
#   rule: cpu_limit
#   severity: medium
#   controls: [CIS-5.11]

# METADATA
# title: Process limit
# description: >-
#   resources.pids must be set, at least minima.pids (docker-init and the
#   command) and at most maxima.pids, so that a fork bomb stays within its
#   container.
# custom:
#   rule: pids_limit
#   severity: medium
#   controls: [CIS-5.29]

# METADATA
# title: tmpfs size
# description: >-
#   resources.tmpfs_mb, the size of the writable /tmp, must be set and lie
#   between minima.tmpfs_mb and maxima.tmpfs_mb: tmpfs pages are memory.
# custom:
#   rule: tmpfs_limit
#   severity: medium
#   controls: [CIS-5.11]

# METADATA
# title: Open file limit
# description: >-
#   resources.nofile must be set, at least minima.nofile (runc needs
#   descriptors of its own to start the container) and at most
#   maxima.nofile.
# custom:
#   rule: nofile_limit
#   severity: medium
#   controls: [CIS-5.11]

# METADATA
# title: Run timeout
# description: >-
#   timeout_seconds must be set and lie between minima.timeout_seconds and
#   maxima.timeout_seconds, so that no run holds its share of the node for
#   ever.
# custom:
#   rule: timeout_limit
#   severity: medium
#   controls: [CIS-5.11]

# METADATA
# title: Workspace size
# description: >-
#   resources.workspace_mb, the size of the file system a run with files, a
#   workspace archive or artifacts gets at its workdir, must be set and lie
#   between minima.workspace_mb and maxima.workspace_mb: it is disk the
#   node gives the run for its lifetime.
# custom:
#   rule: workspace_limit
#   severity: medium
#   controls: [CIS-5.11]

# METADATA
# title: Artifact limit
# description: >-
#   artifact_limit_bytes, the most bytes of artifacts a run's collection
#   keeps, must be set and lie between minima.artifact_limit_bytes and
#   maxima.artifact_limit_bytes: artifacts are stored with the run.
# custom:
#   rule: artifact_limit
#   severity: medium
#   controls: [CIS-5.11]

# METADATA
# title: Output limit
# description: >-
#   output_limit_bytes must be set and lie between
#   minima.output_limit_bytes and maxima.output_limit_bytes: the gateway
#   holds and stores what a run prints.
# custom:
#   rule: output_limit
#   severity: medium
#   controls: [CIS-5.11]
finding contains {
	"rule": rule,
	"message": message,
	"action": "deny",
} if {
	not _limits_ok
	some field, rule in _limit_rules
	message := _limit_problem(field)
	not _approvable_limit(field)
}

# _limit_problem says what is wrong with the limit of field: above its
# maximum, positive but below its minimum, or missing or not positive;
# undefined when it is within bounds.
_limit_problem(field) := sprintf("%s %v exceeds the maximum %v", [field, value, maximum]) if {
	value := _limits[field]
	maximum := config.maxima[field]
	value > maximum
} else := sprintf("%s %v is below the minimum %v", [field, value, minimum]) if {
	value := _limits[field]
	minimum := config.minima[field]
	value > 0
	value < minimum
} else := sprintf("%s must be set to a positive number", [field]) if {
	not _positive(field)
}

# Negations go through helper rules: OPA evaluates a reference in a call's
# arguments before the negation, so `not f(input.x)` would be undefined,
# not true, when input.x is missing.
_positive(field) if input.request.resources[field] > 0

_positive(field) if input.request[field] > 0
