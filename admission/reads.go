package admission

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate"
)

// ReadRun is GET /v1/runs/{id} and what reads one run (its logs, its
// receipt): submitters their team's runs, auditors and admins any.
type ReadRun struct {
	none
	Run string
}

func (ReadRun) operation() string { return "run_read" }

func (r ReadRun) target(ctx context.Context, p *pass) error {
	if err := p.findRun(ctx, r.Run, readers); err != nil {
		return err
	}
	p.answer.Run = p.run
	return nil
}

// Artifacts is GET /v1/runs/{id}/artifacts and the reads of one or all of
// them: the run, and the files collected from it.
type Artifacts struct {
	none
	Run string
}

func (Artifacts) operation() string { return "artifacts" }

func (a Artifacts) target(ctx context.Context, p *pass) error {
	return p.findRun(ctx, a.Run, readers)
}

func (Artifacts) execute(ctx context.Context, p *pass) error {
	p.answer.Run, p.answer.Artifacts = p.run, []sandgate.Artifact{}
	if p.g.d.Artifacts == nil {
		return nil
	}
	files, err := p.g.d.Artifacts.RunArtifacts(ctx, p.run.ID)
	if err != nil {
		return err
	}
	if files != nil {
		p.answer.Artifacts = files
	}
	return nil
}

// Cancel is DELETE /v1/runs/{id}: submitters cancel their team's runs,
// admins any.
type Cancel struct {
	none
	Run string
}

func (Cancel) operation() string { return "cancel" }

func (c Cancel) target(ctx context.Context, p *pass) error {
	if err := p.findRun(ctx, c.Run, changers); err != nil {
		return err
	}
	if run := p.run; run.State == sandgate.StateFinished {
		return &sandgate.Error{Code: sandgate.CodeConflict,
			Message: fmt.Sprintf("run %s has already finished (%s)", run.ID, run.Outcome),
			Details: map[string]any{"state": run.State, "outcome": run.Outcome}}
	}
	return nil
}

func (Cancel) execute(ctx context.Context, p *pass) error {
	run, err := p.g.d.Runner.Cancel(ctx, p.run)
	if err != nil {
		return err
	}
	p.answer.Run = run
	return nil
}
