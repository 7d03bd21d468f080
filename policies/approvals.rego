# Approvals: findings whose action is "require_approval" stop a request
# until someone else approves it (data.sandgate.authz says who may); the
# request is stored pending_approval with no container, and decided again
# with input.approval once granted. Any rule can ask for approval instead
# of denying through data.sandgate.config.actions ({"rule":
# "require_approval"}). The examples here are off by default: each needs
# data to name what may be approved.
#
#   egress_approvable   {"default": [...], "teams": {...}}, the shape of
#                       egress_destinations: destinations a run of the
#                       team may reach once approved
#   approvals.resources {"default": {...}, "teams": {...}}: per limit of
#                       maxima, how far above it a run of the team may go
#                       once approved
#   approvals.session_lifetime_beyond_default
#                       true: a session that asks to live longer than
#                       defaults.session_max_lifetime_seconds waits for
#                       approval
package sandgate.admission

import data.sandgate.config
import data.sandgate.egress

# METADATA
# title: Egress destination that needs approval
# description: >-
#   An egress destination that the team's egress_destinations do not
#   cover but its egress_approvable do waits for someone else's approval.
# custom:
#   severity: medium
#   controls: [NIST-SC-7(5), NIST-AC-3]
finding contains {
	"rule": "egress_approval",
	"message": sprintf("egress destination %s needs approval for team %s", [d, team]),
	"action": "require_approval",
} if {
	some d in input.request.egress
	team := input.principal.team
	not egress.allowed_for_team(d, team)
	egress.approvable_for_team(d, team)
}

# METADATA
# title: Resources above the maxima that need approval
# description: >-
#   A limit above its maximum but within the team's approvable cap
#   (approvals.resources) waits for someone else's approval instead of
#   being denied.
# custom:
#   severity: medium
#   controls: [CIS-5.11, NIST-AC-3]
finding contains {
	"rule": "resources_approval",
	"message": sprintf("%s %v exceeds the maximum %v and needs approval (up to %v)", [field, _limits[field], config.maxima[field], _approvable_caps[field]]),
	"action": "require_approval",
} if {
	not _limits_ok
	some field, _ in _limit_rules
	_approvable_limit(field)
}

# _approvable_caps are the caps a run of the principal's team may reach
# with approval.
_approvable_caps := config.approvals.resources.teams[input.principal.team] if {
	config.approvals.resources.teams[input.principal.team]
} else := object.get(config, ["approvals", "resources", "default"], {})

_approvable_limit(field) if {
	value := _limits[field]
	value > config.maxima[field]
	value <= _approvable_caps[field]
}

# METADATA
# title: Session lifetime beyond the default that needs approval
# description: >-
#   With approvals.session_lifetime_beyond_default, a session asking for
#   a max_lifetime_seconds longer than the default waits for someone
#   else's approval (it stays within session_maxima).
# custom:
#   severity: low
#   controls: [CIS-5.11, NIST-AC-3]
finding contains {
	"rule": "session_lifetime_approval",
	"message": sprintf("max_lifetime_seconds %v is longer than the default %v and needs approval", [v, config.defaults.session_max_lifetime_seconds]),
	"action": "require_approval",
} if {
	input.operation == "session"
	config.approvals.session_lifetime_beyond_default == true
	v := input.session.max_lifetime_seconds
	v > config.defaults.session_max_lifetime_seconds
}
