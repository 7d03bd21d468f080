# The OCI runtime a run asks for (spec runtime): "" is the daemon's
# default; any other only from the list data.sandgate.config.runtimes
# gives the principal's team (teams, else default). A team the data routes
# to a runtime (runtimes.team_default, gVisor's runsc or Kata where a site
# has them) gets it by mutation when the request leaves runtime out. The
# executor refuses a runtime the daemon does not have, before anything is
# created.
package sandgate.admission

import data.sandgate.config

# METADATA
# title: Runtimes from the team's allowlist
# description: >-
#   A runtime other than the daemon's default is one of those
#   data.sandgate.config.runtimes allows the principal's team: a runtime
#   decides how much of the kernel a container reaches (runc shares it,
#   gVisor's runsc and Kata put a kernel of their own between), and which
#   code of the host's runs for it.
# custom:
#   severity: high
#   controls: [NIST-SC-39]
finding contains {
	"rule": "runtime_allowlist",
	"message": sprintf("runtime %q is not allowed for team %s; allowed: %s", [input.request.runtime, input.principal.team, concat(", ", _team_runtimes)]),
	"action": "deny",
} if {
	input.request.runtime != ""
	not input.request.runtime in _team_runtimes
}

_team_runtimes := r if {
	r := config.runtimes.teams[input.principal.team]
} else := object.get(config, ["runtimes", "default"], [])

# METADATA
# title: The team's runtime
# description: >-
#   A request that names no runtime gets the one
#   data.sandgate.config.runtimes.team_default names for its team.
mutation contains {
	"op": "add",
	"path": "/runtime",
	"value": runtime,
	"rule": "team_runtime",
} if {
	object.get(input.request, "runtime", "") == ""
	runtime := config.runtimes.team_default[input.principal.team]
}
