# Package sandgate.authz says who is who and who may do what.
#
# principal maps a verified sign-in (an OpenID Connect token's claims, or
# claims made from a client certificate) to a principal: a name, a team
# and roles. Security staff change it to map their directory's groups;
# a sign-in it leaves undefined is refused (403) with the reasons in
# `unmapped`. Tokens of the tokens file name their principal themselves.
#
# decision answers one question per request: may input.principal do
# input.action on input.object? Grants come from data
# (config.authz.actions: for each action, the roles that may do it on
# their own team's objects, on every team's, or on objects of no team);
# a deny rule below overrides every grant. A denial names its rule.
package sandgate.authz

import data.sandgate.config

# --- From a sign-in to a principal ---------------------------------------

# METADATA
# title: Principal of a sign-in
# description: >-
#   The name is the email claim (unless email_verified says it is not
#   verified), else the sub claim; the team is the team claim; the roles
#   are the roles claim's known roles. A client certificate's claims are
#   made from it: sub is its common name, email its first email address,
#   team its first organization, roles its organizational units.
# entrypoint: true
principal := {"name": _name, "team": _team, "roles": _roles} if {
	count(unmapped) == 0
}

_name := input.claims.email if {
	_nonempty_string(input.claims.email)
	object.get(input.claims, "email_verified", true) != false
} else := input.claims.sub if {
	_nonempty_string(input.claims.sub)
}

_team := input.claims.team if {
	is_string(input.claims.team)
} else := ""

_roles := sort([r | some r in input.claims.roles; r in config.authz.roles]) if {
	is_array(input.claims.roles)
} else := []

_nonempty_string(s) if {
	is_string(s)
	s != ""
}

# unmapped are the reasons a sign-in is not a principal.
unmapped contains "the token names no one: it has neither an email nor a sub claim" if {
	not _name
}

unmapped contains sprintf("%v has no role sandgate knows (the roles claim names none of %v)", [_name, config.authz.roles]) if {
	count(_roles) == 0
}

unmapped contains sprintf("%v is a submitter without a team (the team claim is missing)", [_name]) if {
	"submitter" in _roles
	_team == ""
}

# --- Who may do what ------------------------------------------------------

# METADATA
# title: Authorization decision
# description: >-
#   Whether the principal may do the action on the object: allowed by a
#   grant of config.authz.actions unless a deny rule says otherwise;
#   every denial names its rule. A principal holding several grants (or
#   refused by several deny rules) gets one decision: the narrowest grant,
#   the first denial by rule name.
# entrypoint: true
decision := {"allow": false, "all_teams": false, "rule": _denial.rule, "message": _denial.message} if {
	count(deny) > 0
} else := {"allow": true, "all_teams": _all_teams, "rule": _grant_rule} if {
	count(_granted) > 0
} else := {
	"allow": false, "all_teams": false, "rule": "authz.not_granted",
	"message": sprintf("%v may not %v: it needs one of the roles %v", [input.principal.name, input.action, _roles_for(input.action)]),
}

_grant := object.get(config.authz.actions, input.action, {})

_holds(roles) if {
	some r in input.principal.roles
	r in object.get(_grant, roles, [])
}

# An object of no team (the policy, the trail): the roles of "roles".
_granted contains "authz.role" if {
	object.get(input.object, "team", "") == ""
	_holds("roles")
}

# Objects of the principal's own team.
_granted contains "authz.own_team" if {
	input.principal.team != ""
	object.get(input.object, "team", "") == input.principal.team
	_holds("own_team")
}

# Objects of every team.
_granted contains "authz.all_teams" if {
	_holds("all_teams")
}

# _denial is the first deny by rule name (then by message).
_denial := sort([d | some d in deny; d.rule == min({x.rule | some x in deny})])[0]

# _grant_rule is the narrowest grant that applies: the role's or the own
# team's before every team's.
_grant_rule := [r | some r in ["authz.role", "authz.own_team", "authz.all_teams"]; r in _granted][0]

default _all_teams := false

_all_teams if _holds("all_teams")

_roles_for(action) := sort({r | some k in ["roles", "own_team", "all_teams"]; some r in object.get(object.get(config.authz.actions, action, {}), k, [])})

# deny overrides every grant: {"rule": ..., "message": ...}.

# Approvals are by someone else: never the requester.
deny contains {"rule": "approval.not_by_requester", "message": sprintf("%v asked for this and may not %v it: someone else must", [input.principal.name, _verb])} if {
	input.action in {"approval.approve", "approval.deny"}
	input.object.principal == input.principal.name
}

# When data says so, not by the requester's own team either.
deny contains {"rule": "approval.other_team", "message": sprintf("an approver of team %v may not decide a request of their own team (approvals.approver_other_team)", [input.principal.team])} if {
	input.action in {"approval.approve", "approval.deny"}
	config.approvals.approver_other_team == true
	input.object.team == input.principal.team
}

_verb := "approve" if input.action == "approval.approve"

_verb := "deny" if input.action == "approval.deny"
