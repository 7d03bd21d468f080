# Privileged mode gives the container every capability and every device.
package sandgate.admission

# METADATA
# title: Privileged mode
# description: >-
#   privileged: true gives the container every capability and every device
#   of the host, and lifts seccomp, AppArmor and the masked paths: root on
#   the host.
# custom:
#   severity: critical
#   controls: [CIS-5.5, PSS-baseline]
#   fix: 'drop "privileged": true; ask for the one capability you need in cap_add if the allowlist has it'
finding contains {
	"rule": "no_privileged",
	"message": "privileged mode is forbidden",
	"action": "deny",
} if {
	input.request.privileged == true
}
