# Package sandgate.admission decides whether a run may go ahead.
#
# Every rule family (one file each) adds findings to the `finding` set,
# each definition naming its rule with a string, and one definition of
# each rule carrying its METADATA (title, description, custom.severity,
# custom.controls):
#
#     # METADATA
#     # title: ...
#     # description: ...
#     # custom:
#     #   severity: high
#     #   controls: [CIS-5.5]
#     finding contains {"rule": "...", "message": "...", "action": "deny"} if { ... }
#
# The engine gives each violation the controls and severity of its rule's
# annotation, so a finding does not repeat them (it may still name
# controls of its own, which are added). Each finding says "action":
# "deny", "warn" or "require_approval"; one that says none of them is a
# deny. A require_approval finding stops the request until someone the
# authz rules let approve it does (approvals.rego has the examples); the
# request is then decided again with input.approval, which covers the
# rules it names, and their findings become warnings. This file turns
# findings into the decision: data.sandgate.config.actions can change a
# rule's action, and an active exemption turns a deny into a warn that
# names the exemption. Mutations (JSON Patch "replace" operations on the
# request) come from the `mutation` set; the engine applies them and
# evaluates the mutated request again.
package sandgate.admission

import data.sandgate.config

# decision is what the engine reads. policy_revision and decision_id are
# added by the engine, and each violation's controls and severity from
# its rule's METADATA.
#
# METADATA
# title: Admission decision
# description: >-
#   Whether a run may go ahead: allow, the violations and warnings the
#   findings make after action overrides and exemptions, and the
#   mutations to apply to the request.
# entrypoint: true
decision := {
	"allow": true,
	"violations": [],
	"warnings": [],
	"mutations": [],
	"approvals": [],
} if {
	# Nothing found and nothing to change, the common case: a constant
	# decision, which OPA need not copy.
	count(finding) == 0
	count(mutation) == 0
} else := {
	"allow": true,
	"violations": [],
	"warnings": [],
	"mutations": mutations,
	"approvals": [],
} if {
	# Nothing found: skip the assembly below.
	count(finding) == 0
} else := {
	"allow": false,
	"violations": sort(finding),
	"warnings": [],
	"mutations": mutations,
	"approvals": [],
} if {
	# Denies only, none exempted or overridden: the findings are the
	# violations as they are, without two passes over them.
	_plain_denies
} else := {
	"allow": (count(violations) + count(approvals)) == 0,
	"violations": violations,
	"warnings": warnings,
	"mutations": mutations,
	"approvals": approvals,
}

# A finding is a deny unless its action says "warn" or
# "require_approval"; so a finding that forgets its action still blocks.
violations := array.concat(
	[r | some r in _results; is_object(r); not object.get(r, "action", "deny") in {"warn", "require_approval"}],
	[_malformed(f) | some f in finding; not is_object(f)],
)

# approvals are the require_approval findings that no approval in the
# input covers: the request waits for someone to approve them.
approvals := [r | some r in _results; is_object(r); r.action == "require_approval"; not _approved(r)]

# _approved: input.approval (a decision taken again after an approval)
# names the finding's rule.
_approved(r) if r.rule in object.get(input, ["approval", "rules"], [])

# _approved_warnings are the approved findings, reported as warnings that
# name the approver.
_approved_warnings := [object.union(r, {
	"message": sprintf("%s (approved by %s)", [r.message, input.approval.approver.name]),
	"action": "warn",
}) |
	some r in _results
	is_object(r)
	r.action == "require_approval"
	_approved(r)
]

# _malformed reports a finding that is not an object (a bug in a rule) as a
# deny of its own, so that a broken rule blocks instead of vanishing.
_malformed(f) := {
	"rule": "policy.malformed_finding",
	"message": sprintf("a rule of the policy bundle produced a finding that is not an object: %v", [f]),
	"controls": [],
	"action": "deny",
}

warnings := array.concat(
	[r | some r in _results; is_object(r); object.get(r, "action", "deny") == "warn"],
	_approved_warnings,
)

mutations := [m | some m in mutation]

# _plain_denies holds when no exemption or action override is configured
# and every finding is an object whose action is "deny". sort(finding) is
# then exactly `violations`: a set is iterated in sorted order. Counting
# the denies, rather than looking for a warn, also sends a finding that is
# not an object down the general path, which reports it as a deny.
_plain_denies if {
	count(config.exemptions) == 0
	count(config.actions) == 0
	count([1 | some f in finding; f.action == "deny"]) == count(finding)
}

# With no findings, or no exemption in force and no action overrides (the
# common cases), the findings are the results as they are.
_results := finding if {
	count(finding) == 0
} else := finding if {
	count(_active_exemptions) == 0
	count(config.actions) == 0
} else := {_result(f) | some f in finding; is_object(f)}

# _result is the finding as reported: with its action, or turned into a warn
# by an active exemption. It keeps every field of the finding, so that a
# finding missing one is still reported (and denies) rather than dropped.
_result(f) := object.union(f, {
	"message": sprintf("%s (exempted until %s: %s)", [object.get(f, "message", ""), e.expires, e.reason]),
	"action": "warn",
}) if {
	exempt := [x | some x in _active_exemptions; x.rule == f.rule]
	count(exempt) > 0
	e := exempt[0]
} else := object.union(f, {"action": _action(f)})

_action(f) := config.actions[f.rule] if {
	config.actions[f.rule] in {"deny", "warn", "require_approval"}
} else := f.action if {
	f.action in {"warn", "require_approval"}
} else := "deny"

# _active_exemptions are the exemptions that name this principal or team
# and have not expired at evaluation time (time.now_ns is the engine's
# clock).
_active_exemptions contains e if {
	some e in config.exemptions
	_exemption_applies(e)
	time.parse_rfc3339_ns(e.expires) > time.now_ns()
}

_exemption_applies(e) if {
	e.principal != ""
	e.principal == input.principal.name
	not e.team
}

_exemption_applies(e) if {
	e.team != ""
	e.team == input.principal.team
	not e.principal
}

_exemption_applies(e) if {
	e.principal != ""
	e.team != ""
	e.principal == input.principal.name
	e.team == input.principal.team
}
