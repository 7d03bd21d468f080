package gateway

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
)

// unfinishedStates are the states of a run a gateway process had not seen
// to its end.
var unfinishedStates = []sandgate.State{sandgate.StatePending, sandgate.StateCreating, sandgate.StateRunning}

// reconcileListTimeout bounds the look-up of unfinished runs at start.
const reconcileListTimeout = 30 * time.Second

// Reconcile takes over the runs that a previous process of this node left
// unfinished (it was killed, or the machine went down): it lists them in
// the run store, holds their containers against the executor's orphan
// reaper, and then finishes each in its own goroutine through the
// executor's Adopt: a running container is followed to its end, one that
// exited meanwhile is recorded with its real exit code, and a run whose
// container is gone becomes lost with a reason. The adopted runs are live
// like any other: they can be read, followed and cancelled, and Shutdown
// waits for them.
//
// In a cluster it first registers this node with a fresh heartbeat, so
// that no survivor takes over the runs it is about to adopt.
//
// Call it once, after New and before the executor's first reaper pass. It
// returns how many runs it took over, once they are held; it does not wait
// for them to end. When the executor cannot adopt, the runs are ended as
// lost. It returns UNAVAILABLE when the run store does not answer.
func (s *Server) Reconcile(ctx context.Context) (int, error) {
	return s.node.reconcile(ctx)
}

func (s *node) reconcile(ctx context.Context) (int, error) {
	if s.cluster != nil {
		// Registered (heartbeat fresh) before the runs are listed: a
		// survivor that would take this node over now finds it alive, or
		// has moved its runs already, so that no run is adopted twice.
		if err := s.cluster.store.RegisterNode(ctx, s.nodeRecord(ctx)); err != nil {
			return 0, unavailable(err, "the node registry")
		}
	}
	rec := s.d.Reconciler
	if rec == nil {
		rec, _ = s.d.Executor.(sandgate.Reconciler)
	}
	sessions, err := s.reconcileSessions(ctx, rec)
	if err != nil {
		return 0, err
	}
	runs, err := s.unfinishedRuns(ctx)
	if err != nil {
		return sessions, err
	}
	runs = s.runs.loseSessionCommands(ctx, runs)
	if len(runs) == 0 {
		return sessions, nil
	}
	if rec != nil {
		ids := make([]string, len(runs))
		var containers []string
		for i, r := range runs {
			ids[i] = r.ID
			// A warm pool's container carries no run ID: it is held, and
			// found, by the ID the run recorded when it started.
			if r.ContainerID != "" {
				containers = append(containers, r.ContainerID)
			}
		}
		rec.Hold(ids...)
		if len(containers) > 0 {
			rec.HoldContainers(containers...)
		}
	}
	s.log.Info("reconciling unfinished runs of this node", "count", len(runs))
	for _, run := range runs {
		s.runs.adoptDone(run, rec, s.teams, func() {})
	}
	return sessions + len(runs), nil
}

// reconcileSessions takes over the sessions a previous process of this
// node left open: each is held from the reaper and adopted, its container
// followed again by the executor with what is left of its lifetime, its
// idle timer started again from the last use the store knows. A session
// whose container is gone ends with reason lost. It returns how many it
// took over.
func (s *node) reconcileSessions(ctx context.Context, rec sandgate.Reconciler) (int, error) {
	if s.d.Sessions == nil {
		return 0, nil
	}
	lctx, cancel := context.WithTimeout(ctx, reconcileListTimeout)
	list, err := s.d.Sessions.ListSessions(lctx, sandgate.SessionFilter{Node: s.cfg.Node, State: sandgate.SessionOpen, Limit: 1000})
	cancel()
	if err != nil {
		return 0, unavailable(err, "the session store")
	}
	n := 0
	for _, ss := range list {
		if ss.Node != s.cfg.Node {
			continue
		}
		n++
		l := newLiveSession(ss, sandgate.Normalized{RunSpec: ss.Spec})
		log := s.log.With("session_id", ss.ID, "correlation_id", ss.CorrelationID)
		if rec == nil || ss.ContainerID == "" {
			// Never started, or nothing can follow it: it is lost.
			msg := "the gateway restarted and cannot take the session over"
			if ss.ContainerID == "" {
				msg = "the gateway restarted before the session's container ran"
			}
			s.sessions.end(l, sandgate.Result{Outcome: sandgate.OutcomeLost, FinishedAt: s.now(),
				Error: &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: msg}}, nil, log)
			continue
		}
		rec.Hold(ss.ID)
		rec.HoldContainers(ss.ContainerID)
		release := s.teams.HoldSession(ss.Team, ss.Spec.Resources)
		s.sessions.start(l, s.d.Admitter.Enforcement(ss.Team), 0, release, rec)
	}
	if n > 0 {
		s.log.Info("reconciling open sessions of this node", "count", n)
	}
	return n, nil
}

// loseSessionCommands ends as lost the unfinished runs that were commands
// in a session: their process is not followed after a restart (the
// session, when adopted, goes on). It returns the other runs.
func (s *runs) loseSessionCommands(ctx context.Context, runs []sandgate.Run) []sandgate.Run {
	if s.d.Sessions == nil {
		return runs
	}
	out := runs[:0]
	for _, run := range runs {
		sid := run.Spec.SessionID
		if sid == "" || sid == run.ID {
			out = append(out, run)
			continue
		}
		if _, err := uuid.Parse(sid); err != nil || s.d.Sessions == nil {
			out = append(out, run)
			continue
		}
		// A command ran in its session's container; a run that merely
		// names the session in its spec has a container of its own (or
		// none yet, and is then lost by Adopt all the same).
		ss, err := s.d.Sessions.GetSession(ctx, sid)
		if err != nil || ss.ContainerID == "" || run.ContainerID != ss.ContainerID {
			out = append(out, run)
			continue
		}
		msg := "the gateway restarted while the command ran in its session; its process was not followed"
		s.lose(run, msg, sandgate.CodeContainerCreate, map[string]any{"reason": msg, "reconciled": true, "session_id": sid})
	}
	return out
}

// lose ends a run this node cannot follow as lost with msg: run.lost in
// the trail, the end in the store.
func (s *runs) lose(run sandgate.Run, msg string, code sandgate.ErrorCode, payload map[string]any) {
	res := sandgate.Result{Outcome: sandgate.OutcomeLost, FinishedAt: s.now(), Error: &sandgate.ErrorInfo{Code: code, Message: msg}}
	final := run
	applyResult(&final, res, nil, s.now())
	s.d.Recorder.Emit(sandgate.NewRunLost(sandgate.RunSubject(run, s.cfg.Node), s.now(), res, payload))
	lr := newLiveRun(run, run.Spec.OutputLimitBytes)
	s.store(lr, final, s.log.With("run_id", run.ID))
}

// unfinishedRuns lists every run of this node that is not finished.
func (s *node) unfinishedRuns(ctx context.Context) ([]sandgate.Run, error) {
	ctx, cancel := context.WithTimeout(ctx, reconcileListTimeout)
	defer cancel()
	var out []sandgate.Run
	for _, st := range unfinishedStates {
		cursor := ""
		for {
			page, next, err := s.d.Runs.ListRuns(ctx, sandgate.RunFilter{Node: s.cfg.Node, State: st, Limit: 1000, Cursor: cursor})
			if err != nil {
				return nil, unavailable(err, "the run store")
			}
			for _, r := range page {
				// A store that ignores the node filter must not make this
				// node adopt another's runs.
				if r.Node == s.cfg.Node {
					out = append(out, r)
				}
			}
			if next == "" {
				break
			}
			cursor = next
		}
	}
	return out, nil
}

// adoptDone finishes one unfinished run in its own goroutine, calling
// done once the run has ended and been stored. The run holds its place in
// its team's count (teams) whatever the limits: it was admitted before.
func (s *runs) adoptDone(run sandgate.Run, rec sandgate.Reconciler, teams *admission.Teams, done func()) {
	// The stored spec is the admitted one: its output limit is set.
	lr := newLiveRun(run, run.Spec.OutputLimitBytes)
	ctx, cancel := context.WithCancel(s.runCtx)
	lr.cancel = cancel
	s.live.add(run.ID, lr)
	release := teams.Hold(run.Team, run.Spec.Resources)
	s.holdSlot(run)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer done()
		defer cancel()
		defer release()
		defer s.releaseSlot(run.ID)
		s.finishAdopted(ctx, lr, rec)
	}()
}

// finishAdopted drives an adopted run to its end and stores the result.
func (s *runs) finishAdopted(ctx context.Context, lr *liveRun, rec sandgate.Reconciler) {
	defer s.live.remove(lr.run.ID)
	run := lr.snapshot()
	log := s.log.With("run_id", run.ID, "correlation_id", run.CorrelationID)
	job := sandgate.Job{
		RunID: run.ID, CorrelationID: run.CorrelationID, DecisionID: run.DecisionID,
		Principal: run.Principal, SignIn: run.SignIn, Team: run.Team, AirGapped: s.cfg.AirGapped, PolicyRevision: run.PolicyRevision,
		// The stored spec is the admitted one (normalised before it was
		// stored), with its secrets as keyed hashes: a run adopted after
		// a restart needs no more than its container.
		Spec: sandgate.Normalized{RunSpec: run.Spec},
		// The decision's own enforcement is not stored; the policy in
		// force holds the run to today's.
		Enforcement: s.d.Admitter.Enforcement(run.Team),
		ContainerID: run.ContainerID,
		Stdout:      lr.out[sandgate.Stdout],
		Stderr:      lr.out[sandgate.Stderr],
		Output:      lr.output,
		Started: func(containerID string, at time.Time) {
			if r, ok := lr.setState(sandgate.StateRunning, containerID, at); ok {
				s.store(lr, r, log)
			}
		},
	}
	log.Info("adopting run", "state", run.State, "container_id", run.ContainerID)
	var (
		res sandgate.Result
		err error
	)
	if rec != nil {
		res, err = safely(log, func() (sandgate.Result, error) { return rec.Adopt(ctx, job) })
	} else {
		msg := "the gateway restarted and its executor cannot take over running containers"
		res = sandgate.Result{Outcome: sandgate.OutcomeLost, FinishedAt: s.now(),
			Error: &sandgate.ErrorInfo{Code: sandgate.CodeInternal, Message: msg}}
		s.d.Recorder.Emit(sandgate.NewRunLost(sandgate.RunSubject(run, s.cfg.Node), s.now(), res, map[string]any{"reason": msg, "reconciled": true}))
	}
	s.complete(lr, res, err, log, "adopted run finished")
}
