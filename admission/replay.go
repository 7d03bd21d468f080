package admission

import (
	"context"

	"github.com/sandgate/sandgate"
)

// Replay is a policy replay's re-evaluation of one recorded decision
// with a candidate bundle: the recorded principal and input, taken
// through the same steps as the live request was, with the input built
// by the same code, decided by the candidate. Nothing is recorded,
// stored or run.
type Replay struct {
	none
	Record    sandgate.DecisionRecord
	Candidate Decider
}

func (Replay) operation() string { return "replay" }

// normalize takes the recorded input as it is: the spec in it was
// normalised when it was decided (mount sources resolved then, on the
// host that decided) and is not normalised again.
func (r Replay) normalize(_ context.Context, p *pass) error {
	in := r.Record.Input
	p.input = input(in.Operation, in.Principal, in.Request, in.Settings, in.Session, in.Secrets)
	p.input.Port = in.Port
	return nil
}

func (r Replay) decide(ctx context.Context, p *pass) error {
	if err := p.decideBy(ctx, r.Candidate); err != nil {
		return err
	}
	dec := p.dec
	p.answer.Decision = &dec
	return nil
}

// Reevaluate is Admit of a Replay: the recorded input of rec decided
// again by cand (the candidate, or the policy in force for drift).
func (g *Gate) Reevaluate(ctx context.Context, rec sandgate.DecisionRecord, cand Decider) (sandgate.Decision, error) {
	who := Caller{Principal: rec.Input.Principal, SignIn: rec.SignIn}
	ans, err := g.Admit(ctx, who, Replay{Record: rec, Candidate: cand})
	if err != nil {
		return sandgate.Decision{}, err
	}
	return *ans.Decision, nil
}
