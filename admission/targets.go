package admission

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate"
)

// Step 2: the target. Every request on a run or a session resolves it
// here, and here the policy is asked whether the principal may do the
// request's action on it (data.sandgate.authz.decision, with the object's
// team and maker): the default rules let a submitter reach its own team's
// objects, auditors and admins every team's to read, admins every team's
// to change. An object the policy keeps from another team is answered
// exactly as one that does not exist, the same code and the same
// message, before a byte of the request's body is read; one of the
// principal's own team is FORBIDDEN, naming the rule.

// authorize asks the policy whether p's caller may do action on obj.
// notFound, for an object that exists, is the answer to a denial on
// another team's object when the caller may do action on its own team's:
// the object is hidden, not refused. A request asks one question when it
// is allowed; a denial, or an object not found, asks whether the caller
// may do the action at all (on its own team's objects), so that a role
// that may never do it is FORBIDDEN whatever the object, and another
// team's object and none answer alike.
func (p *pass) authorize(ctx context.Context, action sandgate.Action, obj sandgate.AuthzObject, notFound error) error {
	d := p.g.d.Authorizer.Authorize(ctx, sandgate.AuthzRequest{Principal: p.who.Principal, SignIn: p.who.SignIn, Action: action, Object: obj})
	if d.Allow {
		return nil
	}
	if notFound != nil && obj.Team != p.who.Principal.Team {
		return p.missing(ctx, action, obj.Kind, notFound)
	}
	return p.refused(action, obj, d)
}

// missing answers a request whose object was not found, or is another
// team's that the policy keeps from the caller: err (NOT-FOUND) when the
// caller may do action on its own team's objects of kind, FORBIDDEN when
// it may not do it at all.
func (p *pass) missing(ctx context.Context, action sandgate.Action, kind string, err error) error {
	if sandgate.ErrorCodeOf(err) != sandgate.CodeNotFound {
		return err
	}
	obj := sandgate.AuthzObject{Kind: kind, Team: p.who.Principal.Team}
	d := p.g.d.Authorizer.Authorize(ctx, sandgate.AuthzRequest{Principal: p.who.Principal, SignIn: p.who.SignIn, Action: action, Object: obj})
	if d.Allow {
		return err
	}
	return p.refused(action, obj, d)
}

// refused records an authorization's denial (auth.denied) and returns
// its FORBIDDEN error, which names the rule.
func (p *pass) refused(action sandgate.Action, obj sandgate.AuthzObject, d sandgate.AuthzDecision) error {
	s := sandgate.PrincipalSubject(p.who.Principal, p.who.CorrelationID, p.g.cfg.Node).By(p.who.SignIn)
	payload := map[string]any{
		"action": string(action), "rule": d.Rule, "reason": d.Rule + ": " + d.Message,
		"object": map[string]any{"kind": obj.Kind, "id": obj.ID, "team": obj.Team},
	}
	for k, v := range p.who.Origin {
		payload[k] = v
	}
	p.g.d.Recorder.Emit(sandgate.NewAuthDenied(s, p.now(), "forbidden", payload))
	return d.Err(action)
}

// authorizeNew asks the policy whether p's caller may make an object of
// kind (a run, a session) for its own team.
func (p *pass) authorizeNew(ctx context.Context, action sandgate.Action, kind string) error {
	return p.authorize(ctx, action, sandgate.AuthzObject{Kind: kind, Team: p.who.Principal.Team}, nil)
}

func runNotFound(id string) error {
	return sandgate.Errorf(sandgate.CodeNotFound, "run %s not found", id)
}

func sessionNotFound(id string) error {
	return sandgate.Errorf(sandgate.CodeNotFound, "session %s not found", id)
}

// findRun resolves the run id on which p's caller may do action, as this
// node knows it live, else as it is stored.
func (p *pass) findRun(ctx context.Context, id string, action sandgate.Action) error {
	run, err := p.g.lookupRun(ctx, id)
	if err != nil {
		return p.missing(ctx, action, "run", err)
	}
	if err := p.authorize(ctx, action, runObject(run), runNotFound(id)); err != nil {
		return err
	}
	p.run = run
	return nil
}

func runObject(r *sandgate.Run) sandgate.AuthzObject {
	return sandgate.AuthzObject{Kind: "run", ID: r.ID, Team: r.Team, Principal: r.Principal}
}

func sessionObject(s *sandgate.Session) sandgate.AuthzObject {
	return sandgate.AuthzObject{Kind: "session", ID: s.ID, Team: s.Team, Principal: s.Principal}
}

func (g *Gate) lookupRun(ctx context.Context, id string) (*sandgate.Run, error) {
	if !isID(id) {
		return nil, runNotFound(id)
	}
	if r := g.d.Live.Run(id); r != nil {
		return r, nil
	}
	run, err := g.d.Runs.GetRun(ctx, id)
	if err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound {
			return nil, runNotFound(id)
		}
		return nil, unavailable(err, "the run store")
	}
	if run == nil {
		return nil, runNotFound(id)
	}
	return run, nil
}

// findSession resolves the session id on which p's caller may do action,
// and whether it is open on this node.
func (p *pass) findSession(ctx context.Context, id string, action sandgate.Action) error {
	ss, open, err := p.g.lookupSession(ctx, id)
	if err != nil {
		return p.missing(ctx, action, "session", err)
	}
	if err := p.authorize(ctx, action, sessionObject(ss), sessionNotFound(id)); err != nil {
		return err
	}
	p.session, p.open = ss, open
	return nil
}

func (g *Gate) lookupSession(ctx context.Context, id string) (*sandgate.Session, *LiveSession, error) {
	if err := g.sessionsKept(); err != nil {
		return nil, nil, err
	}
	if !isID(id) {
		return nil, nil, sessionNotFound(id)
	}
	if l := g.d.Live.Session(id); l != nil {
		ss := l.Session
		return &ss, l, nil
	}
	ss, err := g.d.Sessions.GetSession(ctx, id)
	if err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound {
			return nil, nil, sessionNotFound(id)
		}
		return nil, nil, unavailable(err, "the session store")
	}
	if ss == nil {
		return nil, nil, sessionNotFound(id)
	}
	return ss, nil, nil
}

// findOpenSession is findSession for a request that needs the session
// open on this node: CONFLICT when it is not (ended, still opening, or
// open on another node).
func (p *pass) findOpenSession(ctx context.Context, id string, action sandgate.Action) error {
	if err := p.findSession(ctx, id, action); err != nil {
		return err
	}
	ss := p.session
	if p.open == nil || ss.State != sandgate.SessionOpen || ss.StartedAt == nil {
		return &sandgate.Error{Code: sandgate.CodeConflict,
			Message: fmt.Sprintf("session %s is not open on this node (%s %s)", id, ss.State, ss.EndReason),
			Details: map[string]any{"state": ss.State, "end_reason": ss.EndReason, "node": ss.Node}}
	}
	return nil
}

func (g *Gate) sessionsKept() error {
	if !g.cfg.Sessions || g.d.Sessions == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "this gateway has no sessions")
	}
	return nil
}

// RunOwner is the node that executes the run id, and whether it is
// unfinished, when who may read it; "" when who may not (another team's
// answers exactly as one that does not exist). The gateway forwards a
// request on a run to its owner only when who may reach it.
func (g *Gate) RunOwner(ctx context.Context, who Caller, id string) (node string, active bool) {
	run, err := g.lookupRun(ctx, id)
	if err != nil || !g.may(ctx, who, "run.read", runObject(run)) {
		return "", false
	}
	if g.d.Live.Run(id) != nil {
		return g.cfg.Node, true
	}
	return run.Node, run.State != sandgate.StateFinished
}

// SessionOwner is RunOwner for a session: the node it is open on.
func (g *Gate) SessionOwner(ctx context.Context, who Caller, id string) (node string, active bool) {
	ss, open, err := g.lookupSession(ctx, id)
	if err != nil || !g.may(ctx, who, "session.read", sessionObject(ss)) {
		return "", false
	}
	if open != nil {
		return g.cfg.Node, true
	}
	return ss.Node, ss.State == sandgate.SessionOpen
}

// may reports whether the policy lets who do action on obj.
func (g *Gate) may(ctx context.Context, who Caller, action sandgate.Action, obj sandgate.AuthzObject) bool {
	return g.d.Authorizer.Authorize(ctx, sandgate.AuthzRequest{Principal: who.Principal, SignIn: who.SignIn, Action: action, Object: obj}).Allow
}

// isID reports whether s has the form of sandgate's run and session IDs
// (a UUID, 8-4-4-4-12 hexadecimal digits).
func isID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
