# Sandboxes publish no ports: runs are batch jobs, not services.
package sandgate.admission

# METADATA
# title: No published ports
# description: >-
#   No port is published on the host: runs are batch jobs, not services.
# custom:
#   severity: medium
#   controls: [CIS-5.8]
finding contains {
	"rule": "no_published_ports",
	"message": sprintf("publishing ports is forbidden: %s", [_named(array.slice(ports, 0, 3), count(ports))]),
	"action": "deny",
	"count": count(ports),
} if {
	ports := input.request.ports
	count(ports) > 0
}
