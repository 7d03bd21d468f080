package admission

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sandgate/sandgate"
)

// Approvals, the deciding side. DecideApproval is an approver's grant or
// denial: the policy decides who may (approval.approve, approval.deny:
// by default the approver role, never the requester); the approval is
// claimed in the store (of two approvers at once, one wins) and its
// decision committed to the trail. A grant then takes the request through
// the pipeline again (approved), as its requester, with the approval in
// input.approval: the policy in force now decides it, the decision records
// the approver, and nothing runs that this decision refuses.

// ApprovalOwner is the node that holds the pending approval id's request,
// when who may read the approval; "" otherwise. A decision on it is
// forwarded there, where the request's secret values are.
func (g *Gate) ApprovalOwner(ctx context.Context, who Caller, id string) (node string, active bool) {
	if g.d.Approvals == nil || !isID(id) {
		return "", false
	}
	a, err := g.d.Approvals.GetApproval(ctx, id)
	if err != nil || !g.may(ctx, who, "approval.read", sandgate.AuthzObject{Kind: "approval", ID: a.ID, Team: a.Team, Principal: a.Requester}) {
		return "", false
	}
	if _, held := g.held.get(id); held {
		return g.cfg.Node, true
	}
	return a.Node, a.Status == sandgate.ApprovalPending
}

// ReadApproval is GET /v1/approvals/{id}.
type ReadApproval struct {
	none
	ID string
}

func (ReadApproval) operation() string { return "approval_read" }

func (r ReadApproval) target(ctx context.Context, p *pass) error {
	a, err := p.findApproval(ctx, r.ID, "approval.read")
	if err != nil {
		return err
	}
	p.answer.Approval = a
	return nil
}

// DecideApproval is POST /v1/approvals/{id}/approve (Grant) and
// /v1/approvals/{id}/deny; its body, read once the caller may decide,
// holds the approver's comment ({"comment": "…"}, or nothing).
type DecideApproval struct {
	none
	ID    string
	Grant bool
	Body  Body
}

func (DecideApproval) operation() string { return "approval" }

func (d DecideApproval) action() sandgate.Action {
	if d.Grant {
		return "approval.approve"
	}
	return "approval.deny"
}

// target finds the approval and asks the policy whether the caller may
// decide it; one that is no longer pending, or whose time ran out, is a
// CONFLICT.
func (d DecideApproval) target(ctx context.Context, p *pass) error {
	a, err := p.findApproval(ctx, d.ID, d.action())
	if err != nil {
		return err
	}
	if a.Status == sandgate.ApprovalPending && !p.now().Before(a.ExpiresAt) {
		if list, err := p.g.d.Approvals.ExpireApprovals(ctx, p.now(), 100); err == nil {
			for _, x := range list {
				p.g.expired(x)
				if x.ID == a.ID {
					a = &x
				}
			}
		}
	}
	if a.Status != sandgate.ApprovalPending {
		return &sandgate.Error{Code: sandgate.CodeConflict, Message: fmt.Sprintf("approval %s is %s, not pending", a.ID, a.Status),
			Details: map[string]any{"status": a.Status, "decided_by": a.DecidedBy}}
	}
	p.answer.Approval = a
	return nil
}

// maxDecisionBody bounds a decision's body.
const maxDecisionBody = 16 << 10

// normalize reads the approver's comment.
func (d DecideApproval) normalize(_ context.Context, p *pass) error {
	var body struct {
		Comment string `json:"comment"`
	}
	if d.Body.R != nil && d.Body.Size != 0 {
		if err := sandgate.DecodeStrict(d.Body.R, &body, maxDecisionBody); err != nil {
			return err
		}
	}
	if err := checkComment(body.Comment); err != nil {
		return err
	}
	p.comment = body.Comment
	return nil
}

// checkComment bounds an approver's comment.
func checkComment(c string) error {
	if len(c) > sandgate.MaxApprovalComment {
		return sandgate.FieldError("comment", "is longer than %d bytes", sandgate.MaxApprovalComment)
	}
	if !utf8.ValidString(c) || strings.IndexByte(c, 0) >= 0 {
		return sandgate.FieldError("comment", "must be UTF-8 without NUL characters")
	}
	return nil
}

// findApproval resolves approval id on which the caller may do action:
// another team's that the policy keeps from it answers as one that does
// not exist.
func (p *pass) findApproval(ctx context.Context, id string, action sandgate.Action) (*sandgate.Approval, error) {
	notFound := sandgate.Errorf(sandgate.CodeNotFound, "approval %s not found", id)
	if p.g.d.Approvals == nil || !isID(id) {
		return nil, p.missing(ctx, action, "approval", notFound)
	}
	a, err := p.g.d.Approvals.GetApproval(ctx, id)
	if err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound {
			return nil, p.missing(ctx, action, "approval", notFound)
		}
		return nil, unavailable(err, "the approval store")
	}
	obj := sandgate.AuthzObject{Kind: "approval", ID: a.ID, Team: a.Team, Principal: a.Requester}
	if err := p.authorize(ctx, action, obj, notFound); err != nil {
		return nil, err
	}
	return a, nil
}

// decide claims the approval for this decision: granted or denied, by the
// caller, with the comment. Until its record is committed, a pass that
// ends puts it back to pending.
func (d DecideApproval) decide(ctx context.Context, p *pass) error {
	a := *p.answer.Approval
	now := p.now()
	a.Status, a.DecidedAt, a.DecidedBy, a.Comment = sandgate.ApprovalDenied, &now, p.who.Principal.Name, p.comment
	if d.Grant {
		a.Status = sandgate.ApprovalGranted
	}
	a.DeciderSignIn = p.signIn()
	if err := p.g.d.Approvals.DecideApproval(ctx, &a); err != nil {
		return unavailable(err, "the approval store")
	}
	p.onFail(func() {
		if err := p.g.d.Approvals.ReopenApproval(context.WithoutCancel(ctx), a.ID); err != nil {
			p.g.d.Logger.Error("an approval whose decision was not recorded stays decided", "approval_id", a.ID, "error", err)
		}
	})
	p.answer.Approval = &a
	return nil
}

// record commits approval.granted or approval.denied: the approver as
// the actor, with the request's correlation ID and run.
func (d DecideApproval) record(ctx context.Context, p *pass) error {
	a := *p.answer.Approval
	s := approvalSubject(a, p.g.cfg.Node)
	s.Actor, s.Team, s.SignIn = p.who.Principal.Name, p.who.Principal.Team, p.signIn()
	payload := map[string]any{
		"approval_id": a.ID, "operation": string(a.Operation), "comment": a.Comment,
		"requester": a.Requester, "requester_team": a.Team, "rules": reasonRules(a.Reasons),
		"approver_correlation_id": p.who.CorrelationID,
	}
	ev := sandgate.NewApprovalDenied(s, p.now(), payload)
	if d.Grant {
		ev = sandgate.NewApprovalGranted(s, p.now(), payload)
	}
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	err := p.g.d.Recorder.Record(rctx, ev)
	cancel()
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "the audit trail cannot commit the approval's decision now; it stays pending, retry later")
	}
	p.keep()
	return nil
}

func reasonRules(vs []sandgate.Violation) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v.Rule
	}
	return out
}

// store ends a denied request as rejected.
func (d DecideApproval) store(_ context.Context, p *pass) error {
	if d.Grant {
		return nil
	}
	a := *p.answer.Approval
	p.g.held.take(a.ID)
	msg := "denied by " + a.DecidedBy
	if a.Comment != "" {
		msg += ": " + shorten(a.Comment, 512)
	}
	p.g.rejectStored(a, sandgate.CodeForbidden, msg)
	return p.reread(context.Background(), a)
}

// execute takes a granted request through the pipeline again, as its
// requester; a request the policy in force now refuses ends rejected with
// the reason.
func (d DecideApproval) execute(ctx context.Context, p *pass) error {
	if !d.Grant {
		return nil
	}
	a := *p.answer.Approval
	who := Caller{Principal: sandgate.Principal{Name: a.Requester, Team: a.Team, Roles: a.RequesterRoles},
		SignIn: a.RequesterSignIn, CorrelationID: a.CorrelationID}
	ans, err := p.g.Admit(ctx, who, approved{a: a, approver: p.who.Principal})
	if err != nil {
		p.g.held.take(a.ID)
		p.g.rejectStored(a, sandgate.ErrorCodeOf(err), "approved, but "+sandgate.ErrorMessageOf(err))
		return p.reread(ctx, a)
	}
	p.answer.Run, p.answer.Session = ans.Run, ans.Session
	return nil
}

// reread puts a's run or session, as it now stands, in the answer.
func (p *pass) reread(ctx context.Context, a sandgate.Approval) error {
	if a.RunID != "" {
		run, err := p.g.lookupRun(ctx, a.RunID)
		if err == nil {
			p.answer.Run = run
		}
		return nil
	}
	if ss, _, err := p.g.lookupSession(ctx, a.SessionID); err == nil {
		p.answer.Session = ss
	}
	return nil
}

// approved is a granted request decided again: the waiting run or
// session, as its requester's, with input.approval naming the approver.
type approved struct {
	a        sandgate.Approval
	approver sandgate.Principal
}

func (approved) operation() string { return "approved" }

// target is the waiting run or session.
func (r approved) target(ctx context.Context, p *pass) error {
	if r.a.RunID != "" {
		run, err := p.g.lookupRun(ctx, r.a.RunID)
		if err != nil {
			return err
		}
		if run.State != sandgate.StatePendingApproval {
			return sandgate.Errorf(sandgate.CodeConflict, "run %s is %s, not waiting for approval", run.ID, run.State)
		}
		p.run = run
		return nil
	}
	ss, _, err := p.g.lookupSession(ctx, r.a.SessionID)
	if err != nil {
		return err
	}
	if ss.State != sandgate.SessionPendingApproval {
		return sandgate.Errorf(sandgate.CodeConflict, "session %s is %s, not waiting for approval", ss.ID, ss.State)
	}
	p.session = ss
	return nil
}

func (r approved) bounds(_ context.Context, p *pass) error {
	if err := p.g.accepting(); err != nil {
		return err
	}
	if p.session != nil {
		return p.countSession()
	}
	return p.countTeam()
}

// normalize takes the request as it waited: held here in clear, or, on
// another node or after a restart, as stored when it held no secret.
func (r approved) normalize(ctx context.Context, p *pass) error {
	h, ok := p.g.held.get(r.a.ID)
	if !ok {
		if masked(r.a.Spec) {
			return &sandgate.Error{Code: sandgate.CodeConflict,
				Message: fmt.Sprintf("the request's secret values were held by node %s, which no longer has them (it restarted, or is gone); the requester must submit it again", r.a.Node),
				Details: map[string]any{"node": r.a.Node}}
		}
		h.spec = sandgate.Normalized{RunSpec: r.a.Spec}
		if l := r.a.Limits; l != nil {
			h.session = &sandgate.SessionInput{IdleTimeoutSeconds: l.IdleTimeoutSeconds, MaxLifetimeSeconds: l.MaxLifetimeSeconds}
		}
	}
	p.id = r.a.RunID
	op, slot := sandgate.OperationRun, true
	if r.a.SessionID != "" {
		p.id, op, slot = r.a.SessionID, sandgate.OperationSession, false
	}
	if err := p.fitTeam(ctx, h.spec.Resources, slot); err != nil {
		return err
	}
	secrets, err := p.g.secretStates(ctx, h.spec)
	if err != nil {
		return err
	}
	p.input = input(op, p.who.Principal, h.spec, p.g.settings(), h.session, secrets)
	p.input.Approval = &sandgate.ApprovalInput{ID: r.a.ID, Approver: r.approver, Rules: ruleNames(r.a.Reasons), Comment: r.a.Comment}
	return nil
}

func ruleNames(vs []sandgate.Violation) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Rule
	}
	return out
}

// masked reports whether a stored spec holds a value masking replaced: a
// request that held secrets cannot be taken again from its stored form.
func masked(spec sandgate.RunSpec) bool {
	var walk func(v any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			return strings.HasPrefix(x, sandgate.MaskPrefix)
		case map[string]any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case map[string]string:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case []string:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case []map[string]any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(spec.Document())
}

// decide is the policy in force's decision, with the approval as input:
// a request that now needs an approval the granted one does not cover is
// refused (submit it again), as is one the policy now denies.
func (r approved) decide(ctx context.Context, p *pass) error {
	if err := p.decide(ctx); err != nil {
		return err
	}
	p.askApproval(p.input.Operation, "the approval granted covers "+ruleList(r.a.Reasons)+" only: submit the request again")
	return nil
}

// record commits the decision, which records the approver (the record's
// input.approval, and approved_by beside the decision).
func (r approved) record(ctx context.Context, p *pass) error {
	extra := map[string]any{"approval_id": r.a.ID, "approved_by": r.approver.Name}
	if r.a.SessionID != "" {
		extra["operation"] = string(sandgate.OperationSession)
		extra["limits"] = limitsPayload(p.limits())
	}
	return p.commit(ctx, nil, extra)
}

// store moves the waiting run or session on: pending, or open.
func (r approved) store(ctx context.Context, p *pass) error {
	dec := p.dec
	spec := p.g.d.Masker.StoredSpec(dec.Spec.RunSpec, dec.Mask)
	if p.run != nil {
		run := *p.run
		run.State, run.DecisionID, run.PolicyRevision, run.Spec, run.Warnings = sandgate.StatePending, dec.DecisionID, dec.PolicyRevision, spec, warnings(dec)
		run.Node = p.g.cfg.Node
		if err := p.g.d.Runs.UpdateRun(ctx, &run); err != nil {
			return unavailable(err, "the run store")
		}
		p.answer.Run = &run
		return nil
	}
	ss := *p.session
	now := p.now()
	ss.State, ss.DecisionID, ss.PolicyRevision, ss.Spec, ss.Warnings = sandgate.SessionOpen, dec.DecisionID, dec.PolicyRevision, spec, warnings(dec)
	ss.Node, ss.LastActiveAt = p.g.cfg.Node, now
	if err := p.g.d.Sessions.UpdateSession(ctx, &ss); err != nil {
		return unavailable(err, "the session store")
	}
	p.session = &ss
	return nil
}

// execute hands the request to the executor, as its first admission
// would have.
func (r approved) execute(ctx context.Context, p *pass) error {
	p.g.held.take(r.a.ID)
	if p.run != nil {
		p.start("")
		return nil
	}
	hold := p.hold
	p.keep()
	ss, err := p.g.d.Runner.Open(ctx, AdmittedSession{Session: *p.session, Spec: p.dec.Spec, Enforcement: p.dec.Enforcement,
		TeamConcurrency: hold.limits.Sessions, Release: hold.release})
	if err != nil {
		return err
	}
	p.answer.Session = ss
	return nil
}
