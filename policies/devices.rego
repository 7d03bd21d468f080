# Host devices and kernel parameters.
package sandgate.admission

import data.sandgate.config

finding contains {
	"rule": "no_devices",
	"message": sprintf("host device %q must not be passed to the container", [d]),
	"controls": ["CIS-5.18", "PSS-baseline"],
	"action": "deny",
} if {
	some d in input.request.devices
}

finding contains {
	"rule": "sysctls",
	"message": sprintf("sysctl %s is not in the safe set (data.sandgate.config.allowed_sysctls)", [name]),
	"controls": ["PSS-baseline"],
	"action": "deny",
} if {
	some name, _ in input.request.sysctls
	not name in config.allowed_sysctls
}
