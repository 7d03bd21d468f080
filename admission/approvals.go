package admission

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate"
)

// Approvals, the asking side: a decision whose only findings are
// require_approval (Decision.NeedsApproval) stores its run or session
// pending_approval, with no container, beside a pending approval; the
// trail records approval.requested with the decision, and the requester
// is answered with the reasons. Nothing the request holds of its team's
// bounds is kept while it waits. Its secret values (env, stdin, files,
// what the bundle masks) are held on this node alone, in memory, until
// the approval is decided: the stores keep them only as keyed hashes.
// approve.go is the deciding side.

// ApprovalExpiry is implemented by an Admitter that says how long an
// approval waits (data.sandgate.config.approvals.expires_after_seconds).
type ApprovalExpiry interface {
	ApprovalExpiry() time.Duration
}

// defaultApprovalExpiry is an approval's life when the Admitter says none.
const defaultApprovalExpiry = 24 * time.Hour

// maxHeld bounds the requests whose secrets a node holds while they wait.
const maxHeld = 4096

// heldRequest is what a waiting request needs to be decided again: its
// normalised spec in clear and, for a session, its limits.
type heldRequest struct {
	spec    sandgate.Normalized
	session *sandgate.SessionInput
}

// heldRequests are this node's waiting requests, by approval ID.
type heldRequests struct {
	mu sync.Mutex
	m  map[string]heldRequest
}

func (h *heldRequests) put(id string, r heldRequest) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]heldRequest{}
	}
	if len(h.m) >= maxHeld {
		return false
	}
	h.m[id] = r
	return true
}

func (h *heldRequests) take(id string) (heldRequest, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.m[id]
	delete(h.m, id)
	return r, ok
}

func (h *heldRequests) get(id string) (heldRequest, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.m[id]
	return r, ok
}

// askApproval is step 5's end for a run or a session: a decision that
// needs approval makes the pass's approval, or is turned into a denial
// when the request cannot wait (why says so).
func (p *pass) askApproval(op sandgate.Operation, why string) {
	if !p.dec.NeedsApproval() {
		return
	}
	if why == "" && p.g.d.Approvals == nil {
		why = "this gateway keeps no approvals"
	}
	if why != "" {
		p.dec.Violations = append(p.dec.Violations, sandgate.Violation{Rule: "approval_unavailable", Controls: []string{},
			Message:  fmt.Sprintf("the policy asks for approval (%s), but %s", ruleList(p.dec.Approvals), why),
			Severity: "medium", Action: "deny", Count: 1})
		return
	}
	now := p.now()
	expiry := defaultApprovalExpiry
	if e, ok := p.g.d.Admitter.(ApprovalExpiry); ok {
		expiry = e.ApprovalExpiry()
	}
	who := p.who.Principal
	a := &sandgate.Approval{
		ID: p.g.newID(), Status: sandgate.ApprovalPending, Operation: op, CorrelationID: p.who.CorrelationID,
		DecisionID: p.dec.DecisionID, PolicyRevision: p.dec.PolicyRevision,
		Requester: who.Name, Team: who.Team, RequesterRoles: who.Roles, RequesterSignIn: p.who.SignIn,
		Reasons: p.dec.Approvals, Node: p.g.cfg.Node,
		Spec:      p.g.d.Masker.StoredSpec(p.input.Request.RunSpec, p.dec.Mask),
		CreatedAt: now, ExpiresAt: now.Add(expiry),
	}
	if op == sandgate.OperationRun {
		a.RunID = p.id
	} else {
		a.SessionID = p.id
		l := p.limits()
		a.Limits = &l
	}
	p.approval = a
}

func ruleList(vs []sandgate.Violation) string {
	rules := make([]string, len(vs))
	for i, v := range vs {
		rules[i] = v.Rule
	}
	return strings.Join(rules, ", ")
}

// approvalPayload is approval.requested's payload: the decision's, and
// the approval's ID, reasons and expiry.
func (p *pass) approvalPayload(decision map[string]any) map[string]any {
	a := p.approval
	decision["approval_id"] = a.ID
	decision["expires_at"] = a.ExpiresAt.UTC().Format(time.RFC3339Nano)
	decision["operation"] = string(a.Operation)
	return decision
}

// storePending is step 7 of a request that waits: its run (or session,
// stored by the caller) and its approval. An approval that cannot be
// stored leaves its request rejected, and the trail says so.
func (p *pass) storePending(ctx context.Context) error {
	if err := p.g.d.Approvals.CreateApproval(ctx, p.approval); err != nil {
		const msg = "the approval could not be stored; nothing will run"
		p.failed(msg, nil)
		go p.g.rejectStored(*p.approval, sandgate.CodeUnavailable, msg)
		return unavailable(err, "the approval store")
	}
	a := *p.approval
	p.answer.Approval = &a
	return nil
}

// holdPending is step 8 of a request that waits: nothing of its team's
// bounds is kept (it holds no container), and its spec is held here for
// when it is decided. Its Idempotency-Key stays claimed for its run.
func (p *pass) holdPending() {
	p.hold.release()
	p.keep()
	p.g.held.put(p.approval.ID, heldRequest{spec: p.input.Request, session: p.input.Session})
}

// ExpireApprovals expires every pending approval whose time has run out:
// approval.expired in the trail, its run or session rejected. Any node
// may call it; each approval expires on one. It returns how many expired.
func (g *Gate) ExpireApprovals(ctx context.Context) (int, error) {
	if g.d.Approvals == nil {
		return 0, nil
	}
	n := 0
	for {
		list, err := g.d.Approvals.ExpireApprovals(ctx, g.d.Clock(), 100)
		if err != nil {
			return n, unavailable(err, "the approval store")
		}
		for _, a := range list {
			g.expired(a)
		}
		n += len(list)
		if len(list) < 100 {
			return n, nil
		}
	}
}

// expired records an approval that expired and rejects its request.
func (g *Gate) expired(a sandgate.Approval) {
	g.held.take(a.ID)
	g.d.Recorder.Emit(sandgate.NewApprovalExpired(approvalSubject(a, g.cfg.Node), g.d.Clock(), map[string]any{
		"approval_id": a.ID, "operation": string(a.Operation), "expires_at": a.ExpiresAt.UTC().Format(time.RFC3339Nano),
	}))
	g.rejectStored(a, sandgate.CodeConflict, "the approval expired at "+a.ExpiresAt.UTC().Format(time.RFC3339)+" before anyone decided it")
}

// approvalSubject is the subject of an approval's own events: its
// request's correlation and run, the requester as the actor.
func approvalSubject(a sandgate.Approval, node string) sandgate.Subject {
	id := a.RunID
	if id == "" {
		id = a.SessionID
	}
	return sandgate.Subject{CorrelationID: a.CorrelationID, RunID: id, DecisionID: a.DecisionID, Actor: a.Requester,
		Team: a.Team, Node: node, PolicyRevision: a.PolicyRevision}.By(a.RequesterSignIn)
}

// rejectStored ends a waiting request's run or session as rejected, with
// the reason, retrying while the store does not answer.
func (g *Gate) rejectStored(a sandgate.Approval, code sandgate.ErrorCode, msg string) {
	log := g.d.Logger.With("approval_id", a.ID)
	info := &sandgate.ErrorInfo{Code: code, Message: msg}
	if a.RunID != "" {
		SaveRetrying("reject a run that waited for approval", time.Now().Add(finalStoreFor), 200*time.Millisecond, log,
			func(ctx context.Context) error {
				run, err := g.d.Runs.GetRun(ctx, a.RunID)
				if err != nil || run.State != sandgate.StatePendingApproval {
					return err
				}
				now := g.d.Clock()
				run.State, run.Outcome, run.FinishedAt, run.Error = sandgate.StateFinished, sandgate.OutcomeRejected, &now, info
				return g.d.Runs.UpdateRun(ctx, run)
			})
		return
	}
	if g.d.Sessions == nil {
		return
	}
	SaveRetrying("reject a session that waited for approval", time.Now().Add(finalStoreFor), 200*time.Millisecond, log,
		func(ctx context.Context) error {
			ss, err := g.d.Sessions.GetSession(ctx, a.SessionID)
			if err != nil || ss.State != sandgate.SessionPendingApproval {
				return err
			}
			now := g.d.Clock()
			ss.State, ss.EndReason, ss.EndedAt, ss.Error = sandgate.SessionEnded, sandgate.SessionRejected, &now, info
			return g.d.Sessions.UpdateSession(ctx, ss)
		})
}
