# Resource limits are capped at data.sandgate.config.maxima. A limit that is
# missing or not positive is refused as well: the executor always sets one.
package sandgate.admission

import data.sandgate.config

_limits := [
	{"rule": "memory_limit", "field": "memory_mb", "value": object.get(input.request, ["resources", "memory_mb"], 0), "controls": ["CIS-5.11"]},
	{"rule": "cpu_limit", "field": "cpus", "value": object.get(input.request, ["resources", "cpus"], 0), "controls": ["CIS-5.11"]},
	{"rule": "pids_limit", "field": "pids", "value": object.get(input.request, ["resources", "pids"], 0), "controls": ["CIS-5.29"]},
	{"rule": "tmpfs_limit", "field": "tmpfs_mb", "value": object.get(input.request, ["resources", "tmpfs_mb"], 0), "controls": ["CIS-5.11"]},
	{"rule": "nofile_limit", "field": "nofile", "value": object.get(input.request, ["resources", "nofile"], 0), "controls": ["CIS-5.11"]},
	{"rule": "timeout_limit", "field": "timeout_seconds", "value": object.get(input.request, "timeout_seconds", 0), "controls": ["CIS-5.11"]},
	{"rule": "output_limit", "field": "output_limit_bytes", "value": object.get(input.request, "output_limit_bytes", 0), "controls": ["CIS-5.11"]},
]

finding contains {
	"rule": l.rule,
	"message": sprintf("%s %v exceeds the maximum %v", [l.field, l.value, config.maxima[l.field]]),
	"controls": l.controls,
} if {
	some l in _limits
	l.value > config.maxima[l.field]
}

finding contains {
	"rule": l.rule,
	"message": sprintf("%s must be a positive number, not %v", [l.field, l.value]),
	"controls": l.controls,
} if {
	some l in _limits
	not l.value > 0
}
