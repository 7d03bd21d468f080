package sandgate.authz_test

import data.sandgate.authz

oidc(claims) := {"method": "oidc", "issuer": "https://idp.example.com", "claims": claims}

test_principal_from_email_team_and_roles if {
	p := authz.principal with input as oidc({"sub": "u1", "email": "alice@example.com", "team": "payments", "roles": ["submitter", "wizard"]})
	p == {"name": "alice@example.com", "team": "payments", "roles": ["submitter"]}
}

test_principal_from_sub_without_email if {
	p := authz.principal with input as oidc({"sub": "u1", "roles": ["auditor"]})
	p == {"name": "u1", "team": "", "roles": ["auditor"]}
}

test_unverified_email_does_not_name if {
	p := authz.principal with input as oidc({"sub": "u1", "email": "ceo@example.com", "email_verified": false, "roles": ["auditor"]})
	p.name == "u1"
}

test_no_role_is_unmapped if {
	not authz.principal with input as oidc({"sub": "u1", "email": "a@example.com"})
	some m in authz.unmapped with input as oidc({"sub": "u1", "email": "a@example.com"})
	contains(m, "no role")
}

test_submitter_without_team_is_unmapped if {
	not authz.principal with input as oidc({"sub": "u1", "roles": ["submitter"]})
}

test_roles_must_be_a_list if {
	not authz.principal with input as oidc({"sub": "u1", "team": "t", "roles": "admin"})
}

test_certificate_claims_map_the_same_way if {
	p := authz.principal with input as {"method": "mtls", "issuer": "CN=ca", "claims": {"sub": "build-bot", "team": "ci", "roles": ["submitter"]}}
	p == {"name": "build-bot", "team": "ci", "roles": ["submitter"]}
}

ask(roles, team, action, object) := d if {
	d := authz.decision with input as {
		"principal": {"name": "alice", "team": team, "roles": roles},
		"sign_in": {"method": "token", "issuer": ""},
		"action": action,
		"object": object,
	}
}

test_submitter_reads_own_team_runs_only if {
	ask(["submitter"], "payments", "run.read", {"kind": "run", "team": "payments"}).allow == true
	d := ask(["submitter"], "payments", "run.read", {"kind": "run", "team": "search"})
	d.allow == false
	d.rule == "authz.not_granted"
}

test_auditor_reads_every_team_and_lists_them_all if {
	d := ask(["auditor"], "", "run.list", {"kind": "run", "team": ""})
	d.allow == true
	d.all_teams == true
	ask(["auditor"], "", "run.cancel", {"kind": "run", "team": "payments"}).allow == false
}

test_admin_cancels_any_run if {
	ask(["admin"], "ops", "run.cancel", {"kind": "run", "team": "payments"}).allow == true
}

test_policy_and_audit_roles if {
	ask(["security"], "", "policy.reload", {"kind": "policy"}).allow == true
	ask(["security"], "", "audit.export", {"kind": "audit"}).allow == false
	ask(["auditor"], "", "audit.export", {"kind": "audit"}).allow == true
	ask(["submitter"], "payments", "policy.read", {"kind": "policy"}).allow == false
}

test_unknown_action_is_denied_naming_the_rule if {
	d := ask(["admin"], "ops", "run.teleport", {"kind": "run", "team": "ops"})
	d.allow == false
	d.rule == "authz.not_granted"
}

approval_of(requester, team) := {"kind": "approval", "id": "a1", "team": team, "principal": requester}

test_approver_approves_someone_elses_request if {
	d := ask(["approver"], "security", "approval.approve", approval_of("bob", "payments"))
	d.allow == true
}

test_requester_never_approves_own_request if {
	d := ask(["approver", "submitter"], "payments", "approval.approve", approval_of("alice", "payments"))
	d.allow == false
	d.rule == "approval.not_by_requester"
}

test_approver_of_the_same_team_when_data_says_so if {
	ask(["approver"], "payments", "approval.approve", approval_of("bob", "payments")).allow == true
	d := authz.decision with input as {
		"principal": {"name": "carol", "team": "payments", "roles": ["approver"]},
		"sign_in": {"method": "oidc", "issuer": "https://idp.example.com"},
		"action": "approval.approve",
		"object": approval_of("bob", "payments"),
	}
		with data.sandgate.config.approvals.approver_other_team as true
	d.allow == false
	d.rule == "approval.other_team"
}

test_submitter_may_not_approve if {
	d := ask(["submitter"], "search", "approval.approve", approval_of("bob", "payments"))
	d.allow == false
}

# A principal holding several grants (a submitter who is also an auditor,
# as the development token is) gets one decision naming the narrowest
# grant, not an evaluation conflict.
test_several_grants_decide_once if {
	d := ask(["submitter", "auditor", "admin"], "payments", "run.read", {"kind": "run", "team": "payments"})
	d.allow == true
	d.rule == "authz.own_team"
	d.all_teams == true
	e := ask(["auditor", "admin"], "", "policy.read", {"kind": "policy"})
	e.allow == true
	e.rule == "authz.role"
}

# Several deny rules at once give one denial (the first by rule name).
test_several_denials_decide_once if {
	d := authz.decision with input as {
		"principal": {"name": "alice", "team": "payments", "roles": ["approver"]},
		"sign_in": {"method": "token", "issuer": ""},
		"action": "approval.approve",
		"object": approval_of("alice", "payments"),
	}
		with data.sandgate.config.approvals.approver_other_team as true
	d.allow == false
	d.rule == "approval.not_by_requester"
}
