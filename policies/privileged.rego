# Privileged mode gives the container every capability and every device.
package sandgate.admission

finding contains {
	"rule": "no_privileged",
	"message": "privileged mode is forbidden",
	"controls": ["CIS-5.5", "PSS-baseline"],
	"action": "deny",
} if {
	input.request.privileged == true
}
