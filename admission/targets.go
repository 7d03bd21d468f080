package admission

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate"
)

// Step 2: the target. Every request on a run or a session resolves it
// here, and here alone is it decided who may reach it: a submitter its
// own team's objects; auditors and admins every team's to read; admins
// every team's to change. Another team's object is answered exactly as
// one that does not exist, the same code and the same message, before a
// byte of the request's body is read.

// scope is whose objects a request may reach.
type scope int

const (
	// ownTeam: the principal's team's objects only (a command, a file put).
	ownTeam scope = iota
	// readers: every team's for auditors and admins (reads).
	readers
	// changers: every team's for admins (cancel, end).
	changers
)

func (s scope) allTeams(p sandgate.Principal) bool {
	switch s {
	case readers:
		return SeesAllTeams(p)
	case changers:
		return p.Has(sandgate.RoleAdmin)
	}
	return false
}

// SeesAllTeams reports whether p may read every team's runs and sessions.
func SeesAllTeams(p sandgate.Principal) bool {
	return p.Has(sandgate.RoleAdmin, sandgate.RoleAuditor)
}

func runNotFound(id string) error {
	return sandgate.Errorf(sandgate.CodeNotFound, "run %s not found", id)
}

func sessionNotFound(id string) error {
	return sandgate.Errorf(sandgate.CodeNotFound, "session %s not found", id)
}

// findRun resolves the run id that p's caller may reach in scope sc, as
// this node knows it live, else as it is stored.
func (p *pass) findRun(ctx context.Context, id string, sc scope) error {
	run, err := p.g.lookupRun(ctx, id)
	if err != nil {
		return err
	}
	if run.Team != p.who.Principal.Team && !sc.allTeams(p.who.Principal) {
		return runNotFound(id)
	}
	p.run = run
	return nil
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

// findSession resolves the session id that p's caller may reach in scope
// sc, and whether it is open on this node.
func (p *pass) findSession(ctx context.Context, id string, sc scope) error {
	ss, open, err := p.g.lookupSession(ctx, id)
	if err != nil {
		return err
	}
	if ss.Team != p.who.Principal.Team && !sc.allTeams(p.who.Principal) {
		return sessionNotFound(id)
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
func (p *pass) findOpenSession(ctx context.Context, id string, sc scope) error {
	if err := p.findSession(ctx, id, sc); err != nil {
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
// unfinished, when p may read it; "" when p may not (another team's
// answers exactly as one that does not exist). The gateway forwards a
// request on a run to its owner only when p may reach it.
func (g *Gate) RunOwner(ctx context.Context, p sandgate.Principal, id string) (node string, active bool) {
	run, err := g.lookupRun(ctx, id)
	if err != nil || (run.Team != p.Team && !readers.allTeams(p)) {
		return "", false
	}
	if g.d.Live.Run(id) != nil {
		return g.cfg.Node, true
	}
	return run.Node, run.State != sandgate.StateFinished
}

// SessionOwner is RunOwner for a session: the node it is open on.
func (g *Gate) SessionOwner(ctx context.Context, p sandgate.Principal, id string) (node string, active bool) {
	ss, open, err := g.lookupSession(ctx, id)
	if err != nil || (ss.Team != p.Team && !readers.allTeams(p)) {
		return "", false
	}
	if open != nil {
		return g.cfg.Node, true
	}
	return ss.Node, ss.State == sandgate.SessionOpen
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
