package admission

import (
	"context"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate"
)

// Step 7: the admitted run or session stored, after its decision is in
// the trail and before anything runs.

// finalStoreFor is how long a save that must land (a run's or a
// session's end) is retried while the store does not answer.
const finalStoreFor = 2 * time.Minute

// storeRun stores the pass's admitted run. A store that fails leaves an
// admission in the trail for a run that will not run: the trail then says
// it failed, and the row, should the commit have landed with its answer
// lost, is ended as the trail says.
func (p *pass) storeRun(ctx context.Context, run *sandgate.Run, extra map[string]any) error {
	err := p.g.d.Runs.CreateRun(ctx, run)
	if err == nil {
		return nil
	}
	const msg = "the run could not be stored; nothing was run"
	p.failed(msg, extra)
	go p.g.endUnconfirmed(*run, msg)
	return unavailable(err, "the run store")
}

// storeAlongside starts the store of the pass's admitted run while its
// decision is committed (step 7 begun beside step 6); storedAlongside
// waits for it.
func (p *pass) storeAlongside(ctx context.Context) {
	run := p.storedRun()
	done := make(chan error, 1)
	p.stored = func() (sandgate.Run, error) { return run, <-done }
	go func() { done <- p.g.d.Runs.CreateRun(ctx, &run) }()
}

// storedAlongside waits for the store storeAlongside began.
func (p *pass) storedAlongside() (sandgate.Run, error) { return p.stored() }

// unstore ends, as the request ended (refused with err), a run stored
// beside a record that failed: it never runs.
func (p *pass) unstore(cause error) {
	run, err := p.storedAlongside()
	if err != nil {
		return
	}
	now := p.now()
	run.State, run.Outcome, run.FinishedAt = sandgate.StateFinished, sandgate.OutcomeError, &now
	run.Error = &sandgate.ErrorInfo{Code: sandgate.ErrorCodeOf(cause), Message: sandgate.ErrorMessageOf(cause)}
	SaveRetrying("store a run refused for the trail", time.Now().Add(finalStoreFor), 200*time.Millisecond, p.g.d.Logger.With("run_id", run.ID),
		func(ctx context.Context) error { return p.g.d.Runs.UpdateRun(ctx, &run) })
}

// endUnconfirmed ends, in the store, a run whose CreateRun failed: a
// commit can land though its answer is lost (a failover cut the
// connection), which would leave a pending run that never runs beside a
// trail that says it failed. The row, when it exists, ends as an error;
// when it does not, there is nothing to end.
func (g *Gate) endUnconfirmed(run sandgate.Run, msg string) {
	now := g.d.Clock()
	run.State, run.Outcome, run.FinishedAt = sandgate.StateFinished, sandgate.OutcomeError, &now
	run.Error = &sandgate.ErrorInfo{Code: sandgate.CodeUnavailable, Message: msg}
	SaveRetrying("end a run whose store was not confirmed", time.Now().Add(finalStoreFor), 500*time.Millisecond, g.d.Logger.With("run_id", run.ID),
		func(ctx context.Context) error {
			if err := g.d.Runs.UpdateRun(ctx, &run); sandgate.ErrorCodeOf(err) != sandgate.CodeNotFound {
				return err
			}
			return nil
		})
}

// SaveRetrying calls save until it succeeds, fails for good (NOT-FOUND,
// INVALID-REQUEST) or until has passed, waiting first and then twice as
// long each time, at most 5 s; each call gets storeTimeout.
func SaveRetrying(what string, until time.Time, first time.Duration, log *slog.Logger, save func(context.Context) error) {
	wait := first
	for i := 1; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		err := save(ctx)
		cancel()
		if err == nil {
			return
		}
		if code := sandgate.ErrorCodeOf(err); time.Now().After(until) || code == sandgate.CodeNotFound || code == sandgate.CodeInvalidRequest {
			log.Error(what, "attempts", i, "error", err)
			return
		}
		log.Warn(what+", retrying", "attempt", i, "error", err)
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Second)
	}
}
