# Resource limits are capped at data.sandgate.config.maxima. A limit that is
# missing or not positive is refused as well: the executor always sets one,
# and normalisation fills it from the defaults.
#
# Most requests are within bounds, so one cheap check (_within_maxima,
# _limits_set) decides that; the per-limit rules only run when it fails.
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

_within_maxima if {
	m := config.maxima
	r := input.request.resources
	r.memory_mb <= m.memory_mb
	r.cpus <= m.cpus
	r.pids <= m.pids
	r.tmpfs_mb <= m.tmpfs_mb
	r.nofile <= m.nofile
	input.request.timeout_seconds <= m.timeout_seconds
	input.request.output_limit_bytes <= m.output_limit_bytes
}

finding contains {
	"rule": _limit_rules[field].rule,
	"message": sprintf("%s %v exceeds the maximum %v", [field, value, config.maxima[field]]),
	"controls": _limit_rules[field].controls,
	"action": "deny",
} if {
	not _within_maxima
	some field, value in _limits
	value > config.maxima[field]
}

_limits_set if {
	r := input.request.resources
	r.memory_mb > 0
	r.cpus > 0
	r.pids > 0
	r.tmpfs_mb > 0
	r.nofile > 0
	input.request.timeout_seconds > 0
	input.request.output_limit_bytes > 0
}

finding contains {
	"rule": limit.rule,
	"message": sprintf("%s must be set to a positive number", [field]),
	"controls": limit.controls,
	"action": "deny",
} if {
	not _limits_set
	some field, limit in _limit_rules
	not _positive(field)
}

# Negations go through helper rules: OPA evaluates a reference in a call's
# arguments before the negation, so `not f(input.x)` would be undefined,
# not true, when input.x is missing.
_positive(field) if input.request.resources[field] > 0

_positive(field) if input.request[field] > 0
