# Resource limits are capped at data.sandgate.config.maxima. A limit that is
# missing or not positive is refused as well: the executor always sets one,
# and normalisation fills it from the defaults.
package sandgate.admission

import data.sandgate.config

# _limit_rules names the rule and controls of each limit.
_limit_rules := {
	"memory_mb": {"rule": "memory_limit", "controls": ["CIS-5.11"]},
	"cpus": {"rule": "cpu_limit", "controls": ["CIS-5.11"]},
	"pids": {"rule": "pids_limit", "controls": ["CIS-5.29"]},
	"tmpfs_mb": {"rule": "tmpfs_limit", "controls": ["CIS-5.11"]},
	"nofile": {"rule": "nofile_limit", "controls": ["CIS-5.11"]},
}

finding contains {
	"rule": _limit_rules[field].rule,
	"message": sprintf("resources.%s %v exceeds the maximum %v", [field, value, config.maxima[field]]),
	"controls": _limit_rules[field].controls,
	"action": "deny",
} if {
	some field, value in input.request.resources
	value > _maxima[field]
}

# _maxima is read from data once per evaluation.
_maxima := config.maxima

finding contains {
	"rule": "timeout_limit",
	"message": sprintf("timeout_seconds %v exceeds the maximum %v", [input.request.timeout_seconds, config.maxima.timeout_seconds]),
	"controls": ["CIS-5.11"],
	"action": "deny",
} if {
	input.request.timeout_seconds > _maxima.timeout_seconds
}

finding contains {
	"rule": "output_limit",
	"message": sprintf("output_limit_bytes %v exceeds the maximum %v", [input.request.output_limit_bytes, config.maxima.output_limit_bytes]),
	"controls": ["CIS-5.11"],
	"action": "deny",
} if {
	input.request.output_limit_bytes > _maxima.output_limit_bytes
}

finding contains {
	"rule": _limit_rules[field].rule,
	"message": sprintf("resources.%s must be set to a positive number", [field]),
	"controls": _limit_rules[field].controls,
	"action": "deny",
} if {
	count(_positive_resources) < 5
	some field, _ in _limit_rules
	not field in _positive_resources
}

_positive_resources contains field if {
	some field, value in input.request.resources
	value > 0
}

finding contains {
	"rule": "timeout_limit",
	"message": "timeout_seconds must be set to a positive number",
	"controls": ["CIS-5.11"],
	"action": "deny",
} if {
	not _positive_timeout
}

finding contains {
	"rule": "output_limit",
	"message": "output_limit_bytes must be set to a positive number",
	"controls": ["CIS-5.11"],
	"action": "deny",
} if {
	not _positive_output_limit
}

# Negations go through helper rules: OPA evaluates a reference in a call's
# arguments before the negation, so `not f(input.x)` would be undefined,
# not true, when input.x is missing.
_positive_timeout if input.request.timeout_seconds > 0

_positive_output_limit if input.request.output_limit_bytes > 0
