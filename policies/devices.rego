# Host devices and kernel parameters.
package sandgate.admission

import data.sandgate.config

finding contains {
	"rule": "no_devices",
	"message": sprintf("host devices must not be passed to the container: %s", [_named(array.slice(devices, 0, 3), count(devices))]),
	"controls": ["CIS-5.18", "PSS-baseline"],
	"action": "deny",
	"count": count(devices),
} if {
	devices := input.request.devices
	count(devices) > 0
}

finding contains {
	"rule": "sysctls",
	"message": sprintf("sysctls not in the safe set (data.sandgate.config.allowed_sysctls): %s", [_named(array.slice(bad, 0, 3), count(bad))]),
	"controls": ["PSS-baseline"],
	"action": "deny",
	"count": count(bad),
} if {
	sysctls := input.request.sysctls
	allowed := config.allowed_sysctls
	bad := [name | some name, _ in sysctls; not name in allowed]
	count(bad) > 0
}
