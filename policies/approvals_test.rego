package sandgate.admission_test

import data.sandgate.admission
import data.sandgate.config
import data.sandgate.fixtures

approvable_data := {"default": [], "teams": {"payments": ["api.stripe.com:443"]}}

stripe_request := {"network": "egress", "egress": ["api.stripe.com:443"], "egress_limits": {"connections": 256, "bytes": 1073741824}}

approver := {"name": "carol", "team": "security", "roles": ["approver"]}

test_approvals_are_off_by_default if {
	# The same request without approvable data is denied, not held.
	d := fixtures.check with input as fixtures.input_with(stripe_request)
	fixtures.denied_by(d, "egress_destination_allowlist")
	count(d.approvals) == 0
}

test_egress_approvable_destination_waits_for_approval if {
	d := fixtures.check with input as fixtures.input_with(stripe_request)
		with data.sandgate.config.egress_approvable as approvable_data
	fixtures.needs_approval_of(d, "egress_approval")
	not "egress_destination_allowlist" in fixtures.rules(d)
}

test_egress_approvable_is_per_team if {
	inp := object.union(fixtures.input_with(stripe_request), {"principal": {"name": "bob", "team": "search", "roles": ["submitter"]}})
	d := fixtures.check with input as inp with data.sandgate.config.egress_approvable as approvable_data
	fixtures.denied_by(d, "egress_destination_allowlist")
}

test_egress_approval_with_a_deny_still_denies if {
	d := fixtures.check with input as fixtures.input_with(object.union(stripe_request, {"privileged": true}))
		with data.sandgate.config.egress_approvable as approvable_data
	fixtures.denied_by(d, "no_privileged")
}

test_approved_egress_is_allowed_with_a_warning if {
	inp := object.union(fixtures.input_with(stripe_request), {"approval": {"id": "a", "approver": approver, "rules": ["egress_approval"], "comment": "ok"}})
	d := admission.decision with input as inp with data.sandgate.config.egress_approvable as approvable_data
	d.allow == true
	count(d.approvals) == 0
	some w in d.warnings
	w.rule == "egress_approval"
	contains(w.message, "approved by carol")
}

test_an_approval_covers_only_its_rules if {
	big := object.union(stripe_request, {"resources": object.union(fixtures.request.resources, {"memory_mb": config.maxima.memory_mb + 1})})
	inp := object.union(fixtures.input_with(big), {"approval": {"id": "a", "approver": approver, "rules": ["egress_approval"], "comment": ""}})
	d := admission.decision with input as inp
		with data.sandgate.config.egress_approvable as approvable_data
		with data.sandgate.config.approvals.resources as {"default": {"memory_mb": config.maxima.memory_mb * 2}, "teams": {}}
	d.allow == false
	some v in d.approvals
	v.rule == "resources_approval"
}

test_resources_above_the_maximum_up_to_the_approvable_cap_wait if {
	# Relative to the data's maximum: a site (or a test) may raise it.
	cap := config.maxima.memory_mb * 2
	caps := {"default": {}, "teams": {"payments": {"memory_mb": cap}}}
	over := object.union(fixtures.request.resources, {"memory_mb": cap})
	d := fixtures.check with input as fixtures.input_with({"resources": over})
		with data.sandgate.config.approvals.resources as caps
	fixtures.needs_approval_of(d, "resources_approval")
	not "memory_limit" in fixtures.rules(d)
	beyond := object.union(fixtures.request.resources, {"memory_mb": cap + 1})
	d2 := fixtures.check with input as fixtures.input_with({"resources": beyond})
		with data.sandgate.config.approvals.resources as caps
	fixtures.denied_by(d2, "memory_limit")
}

test_session_lifetime_beyond_default_waits_when_data_says_so if {
	long := session_input({"max_lifetime_seconds": config.defaults.session_max_lifetime_seconds + 1})
	d := fixtures.check with input as long
	d.allow == true
	d2 := fixtures.check with input as long with data.sandgate.config.approvals.session_lifetime_beyond_default as true
	fixtures.needs_approval_of(d2, "session_lifetime_approval")
}

test_any_rule_can_require_approval_through_actions if {
	d := admission.decision with input as fixtures.input_with({"ports": ["8080"]})
		with config.actions as {"no_published_ports": "require_approval"}
	d.allow == false
	count(d.violations) == 0
	some v in d.approvals
	v.rule == "no_published_ports"
}
