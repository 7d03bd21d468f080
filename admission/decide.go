package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sandgate/sandgate"
)

// Steps 5 and 6, shared by the operations a policy decides: the input
// built in one place, the decision, and its record in one shape.

// Decider evaluates a policy input: the policy in force (the Admitter), or
// a candidate bundle in a replay.
type Decider interface {
	Decide(ctx context.Context, in sandgate.AdmissionInput) (sandgate.Decision, error)
}

// settings are the settings every policy input carries: the gateway's,
// and the engine's own when it reports them (its mount roots resolved,
// the host's groups).
func (g *Gate) settings() sandgate.Settings {
	st := sandgate.Settings{AirGapped: g.cfg.AirGapped, MountRoots: slices.Clone(g.cfg.MountRoots)}
	if r, ok := g.d.Admitter.(SettingsReporter); ok {
		own := r.Settings()
		st.AirGapped = st.AirGapped || own.AirGapped
		if len(own.MountRoots) > 0 || len(st.MountRoots) == 0 {
			st.MountRoots = own.MountRoots
		}
		// The host's groups no run may hold, as the engine found them:
		// recorded with the input, so that a replay denies them too.
		st.HostGroups = own.HostGroups
	}
	return st
}

// Settings are the settings the gate puts in every policy input.
func (g *Gate) Settings() sandgate.Settings { return g.settings() }

// input is the one builder of a policy input: the live path builds every
// decision's input with it, and a replay rebuilds a recorded one with it.
// secrets are the stored secrets among those spec names (secretStates).
func input(op sandgate.Operation, p sandgate.Principal, spec sandgate.Normalized, st sandgate.Settings, session *sandgate.SessionInput, secrets map[string]sandgate.SecretState) sandgate.AdmissionInput {
	if st.MountRoots == nil {
		st.MountRoots = []string{}
	}
	if p.Roles == nil {
		p.Roles = []sandgate.Role{}
	}
	return sandgate.AdmissionInput{APIVersion: sandgate.APIVersion, Operation: op, Principal: p, Request: spec, Settings: st, Session: session, Secrets: secrets}
}

// secretStates are the stored secrets among those spec names, with their
// versions: what the policy input says of them. A gateway without
// secrets refuses a request that names any.
func (g *Gate) secretStates(ctx context.Context, spec sandgate.Normalized) (map[string]sandgate.SecretState, error) {
	if len(spec.Secrets) == 0 {
		return nil, nil
	}
	if g.d.Secrets == nil {
		return nil, sandgate.FieldError("secrets", "secrets are not configured on this gateway (it has no SANDGATE_SECRETS_KEY_FILE)")
	}
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	states, err := g.d.Secrets.States(sctx, spec.Secrets)
	if err != nil {
		return nil, unavailable(err, "secrets")
	}
	return states, nil
}

// decideBy is step 5: d decides the pass's input.
func (p *pass) decideBy(ctx context.Context, d Decider) error {
	dec, err := d.Decide(ctx, p.input)
	if err != nil {
		return unavailable(err, "policy evaluation")
	}
	p.dec = dec
	return nil
}

// decide is step 5 of a live request: the policy in force decides, and
// the decision is counted.
func (p *pass) decide(ctx context.Context) error {
	if err := p.decideBy(ctx, p.g.d.Admitter); err != nil {
		return err
	}
	p.g.d.Observer.Decided(p.input.Operation, p.dec)
	return nil
}

// subject is who and what the events of the pass's decision are about;
// runID is set only for a decision that made something: an allowed one,
// or one that waits for approval (a denied one made nothing).
func (p *pass) subject(runID string) sandgate.Subject {
	if !p.dec.Allow && p.approval == nil {
		runID = ""
	}
	return sandgate.Subject{CorrelationID: p.who.CorrelationID, RunID: runID, DecisionID: p.dec.DecisionID,
		Actor: p.who.Principal.Name, Team: p.who.Principal.Team, Node: p.g.cfg.Node, PolicyRevision: p.dec.PolicyRevision}.By(p.who.SignIn)
}

// recordPayload is the decision's record (DecisionRecord), the one shape
// of every decision's input in the trail.
func (p *pass) recordPayload() map[string]any {
	return sandgate.DecisionRecord{Input: p.input, SignIn: p.who.SignIn, Via: p.who.Via, Client: p.who.Client}.Payload(p.g.d.Masker, p.dec.Mask)
}

// commit is step 6 for a run, a session or a command: the request in its
// record and the decision committed together, synchronously, before
// anything is stored or runs (AUDIT-UNAVAILABLE otherwise). extra goes
// into the decision's payload (the operation, the session). A denial is
// answered POLICY-DENIED once recorded.
func (p *pass) commit(ctx context.Context, extraRecord, extra map[string]any) error {
	g, dec := p.g, p.dec
	s := p.subject(p.id)
	rec := p.recordPayload()
	for k, v := range extraRecord {
		rec[k] = v
	}
	payload := sandgate.DecisionPayload(g.d.Masker, dec, dec.Allow)
	for k, v := range extra {
		payload[k] = v
	}
	now := p.now()
	decided := sandgate.NewAdmissionDenied(s, now, payload)
	switch {
	case dec.Allow:
		decided = sandgate.NewAdmissionAllowed(s, now, payload)
	case p.approval != nil:
		decided = sandgate.NewApprovalRequested(s, now, p.approvalPayload(payload))
	}
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	err := g.d.Recorder.Record(rctx, sandgate.NewRunRequested(s, now, rec), decided)
	cancel()
	if err != nil {
		g.d.Logger.Error("audit commit failed; refused", "correlation_id", p.who.CorrelationID, "error", err)
		if dec.Allow && errors.Is(err, sandgate.ErrCommitUncertain) {
			// The admission may reach the trail after all (the database
			// failed over mid-commit): the trail must then also say that
			// nothing ran.
			p.failed("the admission's commit could not be confirmed; the request was refused and nothing was run", extra)
		}
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err,
			"the audit trail cannot commit the decision now; nothing was run, retry later")
	}
	if !dec.Allow && p.approval == nil {
		return denial(dec)
	}
	return nil
}

// failed records that the pass's admitted request ended without running:
// the one place the gate records run.failed. extra names its session.
func (p *pass) failed(msg string, extra map[string]any) {
	payload := map[string]any{}
	if sid, ok := extra["session_id"]; ok {
		payload["session_id"] = sid
	}
	p.g.d.Recorder.Emit(sandgate.NewRunFailed(p.subject(p.id), p.now(), sandgate.Result{}, msg, payload))
}

// denial is the POLICY-DENIED error for a decision, with the decision in
// its details.
func denial(dec sandgate.Decision) error {
	msgs := make([]string, 0, len(dec.Violations))
	for _, v := range dec.Violations {
		if v.Action == "warn" {
			continue
		}
		msgs = append(msgs, fmt.Sprintf("%s: %s", v.Rule, v.Message))
	}
	msg := "denied by policy"
	if len(msgs) > 0 {
		msg += ": " + strings.Join(msgs, "; ")
	}
	return &sandgate.Error{Code: sandgate.CodePolicyDenied, Message: msg, Details: decisionDetails(dec)}
}

// decisionDetails is a decision as an error's details, every list a list.
func decisionDetails(d sandgate.Decision) map[string]any {
	orEmpty := func(vs []sandgate.Violation) []sandgate.Violation {
		if vs == nil {
			return []sandgate.Violation{}
		}
		return vs
	}
	muts := d.Mutations
	if muts == nil {
		muts = []sandgate.Mutation{}
	}
	return map[string]any{
		"allow": d.Allow, "violations": orEmpty(d.Violations), "warnings": orEmpty(d.Warnings),
		"mutations": muts, "policy_revision": d.PolicyRevision, "decision_id": d.DecisionID,
	}
}

// warnings are the decision's warnings as a run or a session shows them.
func warnings(dec sandgate.Decision) []string {
	out := []string{}
	for _, w := range dec.Warnings {
		out = append(out, fmt.Sprintf("%s: %s", w.Rule, w.Message))
	}
	for _, v := range dec.Violations {
		if v.Action == "warn" {
			out = append(out, fmt.Sprintf("%s: %s", v.Rule, v.Message))
		}
	}
	return out
}

// signIn is how the pass's caller signed in, as the stores keep it; nil
// for a caller the gateway did not say.
func (p *pass) signIn() *sandgate.SignIn {
	if p.who.SignIn.Method == "" {
		return nil
	}
	in := p.who.SignIn
	return &in
}

// storedRun is the admitted run as the store keeps it: pending, its
// admitted spec's secrets as keyed hashes.
func (p *pass) storedRun() sandgate.Run {
	dec := p.dec
	return sandgate.Run{
		ID: p.id, CorrelationID: p.who.CorrelationID, DecisionID: dec.DecisionID,
		PolicyRevision: dec.PolicyRevision, Principal: p.who.Principal.Name, Team: p.who.Principal.Team, Node: p.g.cfg.Node,
		IdempotencyKey: p.key, State: sandgate.StatePending, CreatedAt: p.now(), SignIn: p.signIn(),
		Spec: p.g.d.Masker.StoredSpec(dec.Spec.RunSpec, dec.Mask), Warnings: warnings(dec),
	}
}
