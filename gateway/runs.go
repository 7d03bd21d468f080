package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
)

// storeTimeout bounds the run-store writes a run's goroutine makes; they
// must not hang a run forever, nor be cut short by a client leaving.
const storeTimeout = 15 * time.Second

// finalStoreFor is how long a run's final save is retried while the run
// store does not answer.
const finalStoreFor = 2 * time.Minute

// cancelWait is how long DELETE waits for a cancelled run to end before
// answering 202 with the run still stopping (the grace period is 10 s).
const cancelWait = 15 * time.Second

// base is what every owner of the gateway's service side needs.
type base struct {
	cfg     Config
	d       Deps
	now     func() time.Time
	log     *slog.Logger
	metrics *Metrics
}

// runs owns the runs executing on this node, from the gate's hand-over
// (or their adoption after a restart) to their stored end: their live
// state and log, their executor call, their stores, their callbacks.
type runs struct {
	base
	live      *hub
	sessions  *sessions
	callbacks *callbacks

	runCtx   context.Context
	stopRuns context.CancelFunc
	wg       sync.WaitGroup
}

func newRuns(b base, sessions *sessions, cb *callbacks) *runs {
	ctx, stop := context.WithCancel(context.Background())
	return &runs{base: b, live: newHub(), sessions: sessions, callbacks: cb, runCtx: ctx, stopRuns: stop}
}

// start runs an admitted run (or a command in its session) in its own
// goroutine, detached from the request. a.Spec is the admitted spec with
// its secrets; a.Run carries the stored form.
func (r *runs) start(a admission.Admitted) {
	lr := newLiveRun(a.Run, a.Spec.OutputLimitBytes)
	lr.spec, lr.enforce, lr.teamConcurrency, lr.upload, lr.session = a.Spec, a.Enforcement, a.TeamConcurrency, a.Workspace, a.Session
	ctx, cancel := context.WithCancel(r.runCtx)
	lr.cancel = cancel
	var l *liveSession
	if a.Session != "" {
		if l = r.sessions.live.get(a.Session); l != nil {
			l.touch(r.now(), 1)
			r.sessions.saveActivity(l)
		}
	}
	r.live.add(a.Run.ID, lr)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		if a.Release != nil {
			defer a.Release()
		}
		r.execute(ctx, lr)
		if l == nil {
			return
		}
		l.touch(r.now(), -1)
		r.sessions.saveActivity(l)
		// An OOM kill in the session's memory leaves it in no known
		// state: the session ends with it.
		if lr.snapshot().Outcome == sandgate.OutcomeOOMKilled {
			l.end(sandgate.SessionOOM)
		}
	}()
}

// execute drives one run to its end and stores the result.
func (r *runs) execute(ctx context.Context, lr *liveRun) {
	defer r.live.remove(lr.run.ID)
	defer lr.upload.Remove()
	run, _ := lr.setState(sandgate.StateCreating, "", r.now())
	log := r.log.With("run_id", run.ID, "correlation_id", run.CorrelationID)
	r.storeLater(lr, run, log)

	job := sandgate.Job{
		RunID: run.ID, CorrelationID: run.CorrelationID, DecisionID: run.DecisionID,
		Principal: run.Principal, SignIn: run.SignIn, Team: run.Team, Spec: lr.spec, AirGapped: r.cfg.AirGapped,
		PolicyRevision:  run.PolicyRevision,
		Enforcement:     lr.enforce,
		TeamConcurrency: lr.teamConcurrency,
		Stdout:          lr.out[sandgate.Stdout],
		Stderr:          lr.out[sandgate.Stderr],
		Output:          lr.output,
		PullProgress:    lr.pullProgress,
		Workspace:       lr.upload.LocalPath(),
		Started: func(containerID string, at time.Time) {
			if s, ok := lr.setState(sandgate.StateRunning, containerID, at); ok {
				r.storeLater(lr, s, log)
			}
		},
	}
	log.Info("run starting", "image", run.Spec.Image)
	res, err := safely(log, func() (sandgate.Result, error) {
		if lr.session != "" {
			// A command in a session: the session's container runs it.
			x, err := r.sessions.executorOf(lr.session)
			if err != nil {
				return sandgate.Result{}, err
			}
			return x.Exec(ctx, lr.session, job)
		}
		return r.executeWithSecrets(ctx, job)
	})
	r.complete(lr, res, err, log, "run finished")
}

// complete stores a run's end as the executor's result says it ended,
// counts it, logs it, and hands it to its followers and its callback.
func (r *runs) complete(lr *liveRun, res sandgate.Result, err error, log *slog.Logger, msg string) {
	final := lr.snapshot()
	applyResult(&final, res, err, r.now())
	if res.Artifacts != nil {
		r.saveArtifacts(&final, *res.Artifacts, log)
	}
	r.metrics.runsFinished.WithLabelValues(string(final.Outcome)).Inc()
	r.metrics.observeUsage(final.Outcome, final.Usage)
	log.Info(msg, "outcome", final.Outcome, "exit_code", final.ExitCode, "duration_ms", final.DurationMS)
	r.store(lr, final, log)
	lr.finish(final)
	r.callback(lr, final)
}

// callback hands a finished run that asked for one to the callbacks'
// workers. The URL comes from the admitted spec; an adopted run has only
// the stored one (a keyed hash when the bundle's mask names it, which
// then cannot be delivered). The trail shows the stored one.
func (r *runs) callback(lr *liveRun, final sandgate.Run) {
	target := lr.spec.CallbackURL
	if target == "" {
		target = final.Spec.CallbackURL
	}
	if target == "" {
		return
	}
	body, err := callbackBody(final)
	if err != nil {
		r.log.Error("callback body", "run_id", final.ID, "error", err)
		return
	}
	r.callbacks.enqueue(callback{url: target, shown: final.Spec.CallbackURL, run: final, body: body})
}

// callbackBody is the run as GET /v1/runs answers it without
// include=output: each stream's size, encoding and digest, not its data.
func callbackBody(run sandgate.Run) ([]byte, error) {
	for _, o := range []*sandgate.Output{&run.Stdout, &run.Stderr} {
		o.Data, o.Raw = "", nil
	}
	return marshal(runView(&run))
}

// safely calls the executor, turning a panic into an error result so that
// the run still ends and is stored.
func safely(log *slog.Logger, call func() (sandgate.Result, error)) (res sandgate.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("executor panicked", "panic", fmt.Sprint(r))
			err = sandgate.Errorf(sandgate.CodeInternal, "the executor failed")
			res = sandgate.Result{Outcome: sandgate.OutcomeError,
				Error: &sandgate.ErrorInfo{Code: sandgate.CodeInternal, Message: "the executor failed"}}
		}
	}()
	return call()
}

// store saves the run, logging a failure: the run goes on regardless. The
// final save is retried for up to finalStoreFor, since a run left
// "running" in the store would outlive its end.
func (r *runs) store(lr *liveRun, run sandgate.Run, log *slog.Logger) {
	lr.storeMu.Lock()
	defer lr.storeMu.Unlock()
	if lr.finalStored {
		return // an earlier state, overtaken by the end
	}
	lr.finalStored = run.State == sandgate.StateFinished
	var until time.Time
	if run.State == sandgate.StateFinished {
		until = time.Now().Add(finalStoreFor)
	}
	admission.SaveRetrying("store run", until, 500*time.Millisecond, log.With("state", run.State), func(ctx context.Context) error {
		return r.d.Runs.UpdateRun(ctx, &run)
	})
}

// storeLater stores a state of a live run that is not its end, off the
// run's path: while the run is live the API answers from the live run,
// and the store has the state a moment later. Only the latest state
// waiting is stored, and never after the end (store).
func (r *runs) storeLater(lr *liveRun, run sandgate.Run, log *slog.Logger) {
	lr.pendingMu.Lock()
	defer lr.pendingMu.Unlock()
	lr.pending = &run
	if lr.storing {
		return
	}
	lr.storing = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			lr.pendingMu.Lock()
			p := lr.pending
			lr.pending = nil
			if p == nil {
				lr.storing = false
				lr.pendingMu.Unlock()
				return
			}
			lr.pendingMu.Unlock()
			r.store(lr, *p, log)
		}
	}()
}

// applyResult copies an execution's result onto the run. The outcome is
// the executor's (its handle decides it); a result without one is an
// internal error, and that is decided here alone.
func applyResult(run *sandgate.Run, res sandgate.Result, err error, now time.Time) {
	run.State = sandgate.StateFinished
	run.Outcome = res.Outcome
	run.ExitCode = res.ExitCode
	run.OOMKilled = res.OOMKilled
	if res.ContainerID != "" {
		run.ContainerID = res.ContainerID
	}
	if !res.StartedAt.IsZero() {
		t := res.StartedAt
		run.StartedAt = &t
	}
	finished := res.FinishedAt
	if finished.IsZero() {
		finished = now
	}
	run.FinishedAt = &finished
	from := run.CreatedAt
	if run.StartedAt != nil {
		from = *run.StartedAt
	}
	run.DurationMS = max(0, finished.Sub(from).Milliseconds())
	run.Stdout, run.Stderr = res.Stdout, res.Stderr
	run.Usage = res.Usage
	run.Egress = res.Egress
	run.Error = res.Error
	if err != nil && run.Error == nil {
		run.Error = &sandgate.ErrorInfo{Code: sandgate.ErrorCodeOf(err), Message: sandgate.ErrorMessageOf(err)}
	}
	if run.Outcome == "" {
		run.Outcome = sandgate.OutcomeError
		if run.Error == nil {
			run.Error = &sandgate.ErrorInfo{Code: sandgate.CodeInternal, Message: "the executor reported no outcome"}
		}
	}
}

// overlay returns the run with what this node knows live: the state and
// the output captured so far.
func (r *runs) overlay(run *sandgate.Run) *sandgate.Run {
	if lr := r.live.get(run.ID); lr != nil {
		s := lr.snapshot()
		return &s
	}
	return run
}

// list returns a page of runs: f.Team's, every team's when it is "".
func (r *runs) list(ctx context.Context, f sandgate.RunFilter) ([]sandgate.Run, string, error) {
	list, next, err := r.d.Runs.ListRuns(ctx, f)
	if err != nil {
		return nil, "", unavailable(err, "the run store")
	}
	for i := range list {
		if f.WithOutput {
			list[i] = *r.overlay(&list[i])
			continue
		}
		if lr := r.live.get(list[i].ID); lr != nil {
			list[i] = lr.snapshotMeta()
		}
	}
	return list, next, nil
}

// cancel stops a run executing on this node and waits a little for its
// end; the gate decided who may (admission.Cancel). It returns the run as
// it then is.
func (r *runs) cancel(ctx context.Context, run *sandgate.Run) (*sandgate.Run, error) {
	lr := r.live.get(run.ID)
	if lr == nil {
		return nil, &sandgate.Error{Code: sandgate.CodeConflict,
			Message: fmt.Sprintf("run %s is not executing on this node", run.ID),
			Details: map[string]any{"state": run.State, "node": run.Node}}
	}
	cancelCtx := lr.requestCancel()
	r.log.Info("run cancel requested", "run_id", run.ID, "correlation_id", run.CorrelationID)
	if err := r.d.Executor.Cancel(ctx, run.ID); err != nil {
		if sandgate.ErrorCodeOf(err) != sandgate.CodeNotFound {
			return nil, unavailable(err, "the executor")
		}
		// Not in the executor yet (or any more): end the job's context.
		cancelCtx()
	}
	t := time.NewTimer(cancelWait)
	defer t.Stop()
	select {
	case <-lr.done:
	case <-t.C:
	case <-ctx.Done():
	}
	s := lr.snapshot()
	return &s, nil
}

// shutdown ends the runs: at once when CancelOnShutdown, else after they
// finish or ShutdownGrace passes. It waits for every run's final store.
func (r *runs) shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	if !r.cfg.CancelOnShutdown {
		t := time.NewTimer(r.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-done:
			return nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	var cwg sync.WaitGroup
	for id, lr := range r.live.all() {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			cancelCtx := lr.requestCancel()
			if err := r.d.Executor.Cancel(ctx, id); err != nil {
				cancelCtx()
			}
		}()
	}
	cwg.Wait()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	// Out of time: cut every job's context and give the goroutines a last
	// moment to store their runs.
	r.stopRuns()
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("gateway shutdown: %d runs did not end", r.live.count())
	}
}

// unavailable gives an uncoded dependency error the UNAVAILABLE code.
func unavailable(err error, what string) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return sandgate.WrapError(sandgate.CodeUnavailable, err, "request cancelled")
	}
	return sandgate.WrapError(sandgate.CodeUnavailable, err, "%s is unavailable", what)
}
