# Host devices and kernel parameters.
package sandgate.admission

import data.sandgate.config

finding contains {
	"rule": "no_devices",
	"message": sprintf("host device %q must not be passed to the container", [d]),
	"controls": ["CIS-5.18", "PSS-baseline"],
	"action": "deny",
} if {
	devices := input.request.devices
	some d in devices
}

finding contains {
	"rule": "sysctls",
	"message": sprintf("sysctl %s is not in the safe set (data.sandgate.config.allowed_sysctls)", [name]),
	"controls": ["PSS-baseline"],
	"action": "deny",
} if {
	sysctls := input.request.sysctls
	some name, _ in sysctls
	not name in config.allowed_sysctls
}
