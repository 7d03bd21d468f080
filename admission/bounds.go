package admission

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sandgate/sandgate"
)

// Step 3 and what it leaves for step 4: the pass's places in its team's
// count and in the uploads' quotas, taken before the body is read, given
// back when the pass ends without handing its work over.

// newID is a new run's or session's ID.
func (g *Gate) newID() string { return g.d.IDs() }

// accepting refuses new work while the gateway stops.
func (g *Gate) accepting() error {
	if g.draining.Load() {
		return sandgate.Errorf(sandgate.CodeUnavailable, "the gateway is shutting down")
	}
	if g.d.Accepting != nil {
		return g.d.Accepting()
	}
	return nil
}

// teamLimits are team's limits as this node enforces them: the policy's,
// bounded by the node's share (sandgate.Capacity.Effective).
func (g *Gate) teamLimits(team string) sandgate.TeamLimits {
	return g.cfg.Capacity.Effective(g.d.Admitter.TeamLimits(team))
}

// countTeam counts the request against its team's runs.
func (p *pass) countTeam() error {
	team := p.who.Principal.Team
	h, err := p.g.teams.count(team, p.g.teamLimits(team))
	if err != nil {
		p.g.d.Observer.TeamLimited(team)
		return err
	}
	p.hold = h
	p.onFail(h.release)
	return nil
}

// countSession counts a session against its team's sessions and the
// node's session budget.
func (p *pass) countSession() error {
	team := p.who.Principal.Team
	h, err := p.g.teams.countSession(team, p.g.teamLimits(team), p.g.cfg.Capacity.Sessions)
	if err != nil {
		p.g.d.Observer.TeamLimited(team)
		return err
	}
	p.hold = h
	p.onFail(h.release)
	return nil
}

// fitTeam adds the normalised request's size to its team's, and with slot
// counts the run in the cluster's slots.
func (p *pass) fitTeam(ctx context.Context, r sandgate.Resources, slot bool) error {
	team := p.who.Principal.Team
	if err := p.hold.fit(r); err != nil {
		p.g.d.Observer.TeamLimited(team)
		return err
	}
	if !slot {
		return nil
	}
	if err := p.g.reserveSlot(ctx, p.hold, p.id); err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodeRateLimited {
			p.g.d.Observer.TeamLimited(team)
		}
		return err
	}
	return nil
}

// reserveUpload counts an upload of declared bytes (-1 when undeclared).
func (p *pass) reserveUpload(declared int64) error {
	h, err := p.g.uploads.reserve(p.who.Principal.Name, p.who.Principal.Team, declared)
	if err != nil {
		return err
	}
	p.upload = h
	p.onFail(h.release)
	return nil
}

// spool reads an upload from r at no less than the minimum rate, through
// write (a Workspaces method), which leaves nothing behind on an error.
// The upload then holds its size on disk.
func (p *pass) spool(r io.Reader, deadline func(time.Time) error, write func(io.Reader) (*Upload, error)) (*Upload, error) {
	pr := p.g.uploads.paced(r, deadline)
	up, err := write(pr)
	pr.stop()
	if err != nil {
		if pr.err != nil {
			return nil, pr.err
		}
		return nil, err
	}
	p.spooled = up
	p.onFail(up.Remove)
	p.upload.landed(up.Size)
	return up, nil
}

// bodyError is a failure to read the request's body.
func bodyError(err error, what string) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return se
	}
	return sandgate.FieldError(what, "cannot be read: %v", err)
}
