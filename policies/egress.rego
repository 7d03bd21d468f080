# Egress at admission: a run with network "egress" names the destinations
# it may reach (its egress list), and each must be one the data allows its
# team (data.sandgate.config.egress_destinations, matched as
# egress_decision.rego's covers does). A wildcard is admitted only where
# the data has a wildcard that covers it. Air-gapped sites deny egress
# entirely. The limits (egress_limits) are capped by
# data.sandgate.config.egress_limits_max.
package sandgate.admission

import data.sandgate.config
import data.sandgate.egress

# METADATA
# title: Egress destinations from the team's allowlist
# description: >-
#   Every destination of a run's egress list is covered by one of the
#   destinations data.sandgate.config.egress_destinations allows the
#   principal's team; a wildcard only by a wildcard of the data.
# custom:
#   severity: high
#   controls: [CIS-5.10, NIST-SC-7(5)]
finding contains {
	"rule": "egress_destination_allowlist",
	"message": sprintf("egress destination %s is not allowed for team %s; %s", [d, team, _egress_allowed_text(team)]),
	"action": "deny",
} if {
	some d in input.request.egress
	team := input.principal.team
	not egress.allowed_for_team(d, team)
}

# _egress_allowed_text says what the team may reach and which data key
# says so: a team with no destinations is told none, and where to add
# them.
_egress_allowed_text(team) := sprintf("the team may reach no destination: none are listed for it in data.sandgate.config.egress_destinations.teams[%q] (or .default); add them there", [team]) if {
	count(egress.team_destinations(team)) == 0
} else := sprintf("allowed (data.sandgate.config.egress_destinations.teams[%q]): %s", [team, concat(", ", egress.team_destinations(team))]) if {
	config.egress_destinations.teams[team]
} else := sprintf("allowed (data.sandgate.config.egress_destinations.default): %s", [concat(", ", egress.team_destinations(team))])

# METADATA
# title: Egress needs its list
# description: >-
#   Network egress comes with a non-empty egress list, and an egress list
#   only with network egress: a run reaches what it names, and names
#   nothing it cannot reach.
# custom:
#   severity: medium
#   controls: [CIS-5.10]
finding contains {
	"rule": "egress_list",
	"message": msg,
	"action": "deny",
} if {
	input.request.network == "egress"
	count(object.get(input.request, "egress", [])) == 0
	msg := "network egress needs a non-empty egress list of the destinations the run may reach"
}

finding contains {
	"rule": "egress_list",
	"message": sprintf("an egress list needs network egress, not %q", [object.get(input.request, "network", "")]),
	"action": "deny",
} if {
	count(object.get(input.request, "egress", [])) > 0
	input.request.network != "egress"
	not input.settings.air_gapped
}

# METADATA
# title: Air-gapped sites have no egress
# description: >-
#   In air-gapped mode (SANDGATE_AIR_GAPPED) no run reaches anything
#   outside its container: an egress list is denied, whatever the data
#   allows.
# custom:
#   severity: high
#   controls: [CIS-5.10]
finding contains {
	"rule": "air_gapped_egress",
	"message": "air-gapped: egress is denied",
	"action": "deny",
} if {
	input.settings.air_gapped == true
	_egress_requested
}

_egress_requested if count(object.get(input.request, "egress", [])) > 0

_egress_requested if input.request.network == "egress"

# METADATA
# title: Egress limits within the maxima
# description: >-
#   A run's egress_limits (connections, bytes) are positive and at most
#   data.sandgate.config.egress_limits_max.
# custom:
#   severity: medium
#   controls: [CIS-5.11]
finding contains {
	"rule": "egress_limits",
	"message": sprintf("egress_limits.%s is %v; it must be between 1 and %v", [k, v, m]),
	"action": "deny",
} if {
	some k, v in object.get(input.request, "egress_limits", {})
	m := object.get(config, ["egress_limits_max", k], 0)
	not _within(v, m)
}

_within(v, m) if {
	v >= 1
	v <= m
}
