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

# _limit_rules names the rule and controls of each limit.
_limit_rules := {
	"memory_mb": {"rule": "memory_limit", "controls": ["CIS-5.11"]},
	"cpus": {"rule": "cpu_limit", "controls": ["CIS-5.11"]},
	"pids": {"rule": "pids_limit", "controls": ["CIS-5.29"]},
	"tmpfs_mb": {"rule": "tmpfs_limit", "controls": ["CIS-5.11"]},
	"nofile": {"rule": "nofile_limit", "controls": ["CIS-5.11"]},
	"timeout_seconds": {"rule": "timeout_limit", "controls": ["CIS-5.11"]},
	"output_limit_bytes": {"rule": "output_limit", "controls": ["CIS-5.11"]},
}

# _limits are the request's limits, flat, as maxima names them.
_limits := object.union(input.request.resources, {
	"timeout_seconds": input.request.timeout_seconds,
	"output_limit_bytes": input.request.output_limit_bytes,
})

# _limits_ok: every limit is set and within its minimum and maximum (the
# bundle's tests hold every minimum positive, so each limit is). It reads
# the limits and the maxima with one object pattern each. A request or
# maxima with other fields does not match the patterns, and data without
# minima fails the checks; the rules below, which do not rely on it, then
# decide.
_limits_ok if {
	{"memory_mb": memory_mb, "cpus": cpus, "pids": pids, "tmpfs_mb": tmpfs_mb, "nofile": nofile} := input.request.resources
	{
		"memory_mb": max_memory_mb, "cpus": max_cpus, "pids": max_pids, "tmpfs_mb": max_tmpfs_mb, "nofile": max_nofile,
		"timeout_seconds": max_timeout_seconds, "output_limit_bytes": max_output_limit_bytes,
	} := config.maxima
	timeout_seconds := input.request.timeout_seconds
	output_limit_bytes := input.request.output_limit_bytes
	minima := config.minima
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

# A limit above its maximum. Only the limits _limit_rules names have a rule
# to report, and one of them above its maximum is never within bounds, so
# no other guard is needed. Rules and data are bound to locals before the
# loop: a reference to a rule costs a lookup in every iteration.
finding contains {
	"rule": limit.rule,
	"message": sprintf("%s %v exceeds the maximum %v", [field, value, maximum]),
	"controls": limit.controls,
	"action": "deny",
} if {
	not _limits_ok
	limits := _limits
	maxima := config.maxima
	some field, limit in _limit_rules
	value := limits[field]
	maximum := maxima[field]
	value > maximum
}

# A positive limit below its minimum (one that is not positive is reported
# as unset, below).
finding contains {
	"rule": limit.rule,
	"message": sprintf("%s %v is below the minimum %v", [field, value, minimum]),
	"controls": limit.controls,
	"action": "deny",
} if {
	not _limits_ok
	limits := _limits
	minima := config.minima
	some field, limit in _limit_rules
	value := limits[field]
	minimum := minima[field]
	value > 0
	value < minimum
}

finding contains {
	"rule": limit.rule,
	"message": sprintf("%s must be set to a positive number", [field]),
	"controls": limit.controls,
	"action": "deny",
} if {
	not _limits_ok
	not _limits_set
	some field, limit in _limit_rules
	not _positive(field)
}

# _limits_set: every limit is there and positive, checked at once with
# min() as in _limits_ok, for requests _limits_ok refuses.
_limits_set if {
	r := input.request.resources
	min([r.memory_mb, r.cpus, r.pids, r.tmpfs_mb, r.nofile, input.request.timeout_seconds, input.request.output_limit_bytes]) > 0
}

# Negations go through helper rules: OPA evaluates a reference in a call's
# arguments before the negation, so `not f(input.x)` would be undefined,
# not true, when input.x is missing.
_positive(field) if input.request.resources[field] > 0

_positive(field) if input.request[field] > 0
