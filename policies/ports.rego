# Sandboxes publish no ports: runs are batch jobs, not services.
package sandgate.admission

finding contains {
	"rule": "no_published_ports",
	"message": sprintf("publishing port %q is forbidden", [p]),
	"controls": ["CIS-5.8"],
	"action": "deny",
} if {
	ports := input.request.ports
	some p in ports
}
