# Host devices and kernel parameters.
package sandgate.admission

import data.sandgate.config

# METADATA
# title: No host devices
# description: >-
#   No host device is passed to the container: a block device is the
#   host's disk, and others reach the kernel directly.
# custom:
#   severity: critical
#   controls: [CIS-5.18, PSS-baseline]
finding contains {
	"rule": "no_devices",
	"message": sprintf("host devices must not be passed to the container: %s", [_named(array.slice(devices, 0, 3), count(devices))]),
	"action": "deny",
	"count": count(devices),
} if {
	devices := input.request.devices
	count(devices) > 0
}

# METADATA
# title: Safe sysctls only
# description: >-
#   Kernel parameters only from data.sandgate.config.allowed_sysctls,
#   Kubernetes' safe set: namespaced parameters that cannot affect the
#   host or other containers.
# custom:
#   severity: medium
#   controls: [PSS-baseline]
finding contains {
	"rule": "sysctls",
	"message": sprintf("sysctls not in the safe set (data.sandgate.config.allowed_sysctls): %s", [_named(array.slice(bad, 0, 3), count(bad))]),
	"action": "deny",
	"count": count(bad),
} if {
	sysctls := input.request.sysctls
	allowed := config.allowed_sysctls
	bad := [name | some name, _ in sysctls; not name in allowed]
	count(bad) > 0
}

# An allowed sysctl still needs a value the kernel takes: one the kernel
# refuses fails the container at start, after admission. Each allowed
# sysctl's value is a list of integers data.sandgate.config.sysctl_values
# describes ("count" of them, each within "min" and "max", "ascending"
# when each must be at least the one before).
# METADATA
# title: Sysctl values the kernel takes
# description: >-
#   An allowed sysctl's value must be one the kernel takes
#   (data.sandgate.config.sysctl_values), or the container fails at start,
#   after admission.
# custom:
#   severity: low
#   controls: [PSS-baseline]
finding contains {
	"rule": "sysctl_value",
	"message": sprintf("sysctl values the kernel would refuse: %s", [_named(array.slice(bad, 0, 3), count(bad))]),
	"action": "deny",
	"count": count(bad),
} if {
	sysctls := input.request.sysctls
	shapes := config.sysctl_values
	bad := [sprintf("%s=%q", [name, value]) |
		some name, value in sysctls
		shape := shapes[name]
		not _sysctl_value_ok(value, shape)
	]
	count(bad) > 0
}

_sysctl_value_ok(value, shape) if {
	regex.match(`^[0-9]{1,10}( [0-9]{1,10})*$`, value)
	parts := [to_number(p) | some p in split(value, " ")]
	count(parts) == shape.count
	every p in parts {
		p >= shape.min
		p <= shape.max
	}
	_ascending_ok(parts, shape)
}

_ascending_ok(_, shape) if not shape.ascending

_ascending_ok(parts, shape) if {
	shape.ascending
	every i in numbers.range(1, count(parts) - 1) {
		parts[i] >= parts[i - 1]
	}
}
