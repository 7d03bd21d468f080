package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
)

// openWait bounds how long POST /v1/sessions waits for the session's
// container to run before it answers 202 with the session still opening.
const openWait = 2 * time.Minute

// A session is one long-lived container, a run of its keepalive command
// that the executor follows with the same handle as any run, and lasts
// until it is deleted, idle past its idle timeout, older than its
// lifetime, or its container dies. Its commands are runs (runs.start
// with liveRun.session set), admitted one by one with operation "exec".

// liveSession is a session open on this node.
type liveSession struct {
	mu   sync.Mutex
	ss   sandgate.Session
	spec sandgate.Normalized // the admitted spec, secrets in clear
	// active counts the commands running now: a session is not idle while
	// one runs.
	active int
	// reason is why the gateway asked the session to end, if it did.
	reason sandgate.SessionEndReason
	cancel context.CancelFunc
	// touched wakes the idle timer when the session was used.
	touched chan struct{}
	// saved is when its last use was last stored; saving is set while a
	// save is under way (a restart starts the idle timer again from the
	// stored last use).
	saved           time.Time
	saving, pending bool
	// storeMu orders the session's saves: a save of its last use never
	// lands after the save of its end.
	storeMu sync.Mutex
	opened  chan struct{}
	done    chan struct{}
	openErr error
	// exec runs the session's commands and files when it is not this
	// node's executor: a session taken over from a dead node lives on
	// that node's Docker daemon.
	exec sandgate.SessionExecutor
}

func newLiveSession(ss sandgate.Session, spec sandgate.Normalized) *liveSession {
	return &liveSession{ss: ss, spec: spec, touched: make(chan struct{}, 1),
		opened: make(chan struct{}), done: make(chan struct{}), cancel: func() {}}
}

func (l *liveSession) snapshot() sandgate.Session {
	l.mu.Lock()
	defer l.mu.Unlock()
	ss := l.ss
	return ss
}

// touch records a use of the session now; begin says a command starts
// (+1), ends (-1) or neither (0).
func (l *liveSession) touch(now time.Time, begin int) {
	l.mu.Lock()
	l.ss.LastActiveAt = now
	l.active += begin
	if begin > 0 {
		l.ss.Runs++
	}
	l.mu.Unlock()
	select {
	case l.touched <- struct{}{}:
	default:
	}
}

// end asks the session to end for reason; the first reason given wins.
func (l *liveSession) end(reason sandgate.SessionEndReason) {
	l.mu.Lock()
	if l.reason == "" {
		l.reason = reason
	}
	l.mu.Unlock()
	l.cancel()
}

// sessionHub holds the sessions open on this node.
type sessionHub struct {
	mu sync.Mutex
	m  map[string]*liveSession
}

func newSessionHub() *sessionHub { return &sessionHub{m: map[string]*liveSession{}} }

func (h *sessionHub) add(l *liveSession) {
	h.mu.Lock()
	h.m[l.ss.ID] = l
	h.mu.Unlock()
}

func (h *sessionHub) get(id string) *liveSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[id]
}

func (h *sessionHub) remove(id string) {
	h.mu.Lock()
	delete(h.m, id)
	h.mu.Unlock()
}

func (h *sessionHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

func (h *sessionHub) all() []*liveSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*liveSession, 0, len(h.m))
	for _, l := range h.m {
		out = append(out, l)
	}
	return out
}

// sessions owns the sessions open on this node, from the gate's
// hand-over (or their adoption) to their recorded end: their container's
// executor call, their idle timers, their uses, their stores.
type sessions struct {
	base
	live *sessionHub
	// draining says the gateway stops: a session the executor cancelled
	// then ended for shutdown.
	draining *atomic.Bool
	// swg waits for the sessions' goroutines, which outlive any run's.
	swg sync.WaitGroup
}

func newSessions(b base, draining *atomic.Bool) *sessions {
	return &sessions{base: b, live: newSessionHub(), draining: draining}
}

// keepsSessions reports whether this gateway keeps sessions: an executor that is a
// SessionExecutor, and a session store.
func (d Deps) keepsSessions() bool {
	_, ok := d.Executor.(sandgate.SessionExecutor)
	return ok && d.Sessions != nil
}

// executorOf is the executor that holds session id's container: the
// node's own, or the dead node's daemon of a session taken over.
func (s *sessions) executorOf(id string) (sandgate.SessionExecutor, error) {
	x, ok := s.d.Executor.(sandgate.SessionExecutor)
	if !ok || s.d.Sessions == nil {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "this gateway has no sessions")
	}
	if l := s.live.get(id); l != nil && l.exec != nil {
		return l.exec, nil
	}
	return x, nil
}

// open opens a session the gate admitted and stored, and waits until its
// container runs (or openWait passes). A container that could not be made
// is the executor's error, and the session is recorded as ended with
// reason error.
func (s *sessions) open(ctx context.Context, a admission.AdmittedSession) (*sandgate.Session, error) {
	l := newLiveSession(a.Session, a.Spec)
	s.start(l, a.Enforcement, a.TeamConcurrency, a.Release, nil)
	t := time.NewTimer(openWait)
	defer t.Stop()
	select {
	case <-l.opened:
	case <-l.done:
	case <-t.C:
	case <-ctx.Done():
	}
	if err := l.openErr; err != nil {
		return nil, err
	}
	out := l.snapshot()
	return &out, nil
}

func limitsPayload(l sandgate.SessionLimits) map[string]any {
	return map[string]any{"idle_timeout_seconds": l.IdleTimeoutSeconds, "max_lifetime_seconds": l.MaxLifetimeSeconds}
}

// start runs the session's container in its own goroutine until the
// session ends, and its idle timer beside it. rec, when set, adopts the
// container a previous process of this node made instead of making one.
func (s *sessions) start(l *liveSession, enforce sandgate.Enforcement, teamConcurrency int, release func(), rec sandgate.Reconciler) {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	s.live.add(l)
	s.swg.Add(1)
	go func() {
		defer s.swg.Done()
		defer cancel()
		defer release()
		s.run(ctx, l, enforce, teamConcurrency, rec)
	}()
}

// run follows the session's container to its end and records the end
// with its reason.
func (s *sessions) run(ctx context.Context, l *liveSession, enforce sandgate.Enforcement, teamConcurrency int, rec sandgate.Reconciler) {
	defer close(l.done)
	defer s.live.remove(l.ss.ID)
	ss := l.snapshot()
	log := s.log.With("session_id", ss.ID, "correlation_id", ss.CorrelationID)
	spec := l.spec
	// The container lives as long as the session may: its run's timeout
	// is the session's lifetime, which the executor enforces.
	spec.TimeoutSeconds = ss.Limits.MaxLifetimeSeconds
	// The keepalive prints nothing worth keeping.
	spec.OutputLimitBytes = min(spec.OutputLimitBytes, 64<<10)
	job := sandgate.Job{
		RunID: ss.ID, CorrelationID: ss.CorrelationID, DecisionID: ss.DecisionID,
		Principal: ss.Principal, SignIn: ss.SignIn, Team: ss.Team, Spec: spec, AirGapped: s.cfg.AirGapped, PolicyRevision: ss.PolicyRevision,
		Enforcement: enforce, TeamConcurrency: teamConcurrency, SessionContainer: true,
		ContainerID: ss.ContainerID,
		Started: func(containerID string, at time.Time) {
			l.mu.Lock()
			first := l.ss.StartedAt == nil
			l.ss.ContainerID = containerID
			if first {
				t := at
				l.ss.StartedAt = &t
			}
			snap := l.ss
			l.mu.Unlock()
			l.storeMu.Lock()
			s.store(l.snapshot(), log)
			l.storeMu.Unlock()
			if !first {
				return
			}
			if rec == nil {
				s.d.Recorder.Emit(sandgate.NewSessionCreated(sandgate.SessionSubject(snap, s.cfg.Node), s.now(),
					map[string]any{"session_id": snap.ID, "image": spec.Image, "limits": limitsPayload(snap.Limits)}))
			}
			close(l.opened)
		},
	}
	idleDone := make(chan struct{})
	go func() {
		defer close(idleDone)
		s.idleTimer(ctx, l)
	}()
	var (
		res sandgate.Result
		err error
	)
	if rec != nil {
		log.Info("adopting session", "container_id", ss.ContainerID)
		res, err = safely(log, func() (sandgate.Result, error) { return rec.Adopt(ctx, job) })
	} else {
		log.Info("session opening", "image", spec.Image)
		res, err = safely(log, func() (sandgate.Result, error) { return s.executeWithSecrets(ctx, job) })
	}
	l.cancel()
	<-idleDone
	s.end(l, res, err, log)
}

// idleTimer ends the session once it has been idle for its idle timeout,
// with no command running.
func (s *sessions) idleTimer(ctx context.Context, l *liveSession) {
	idle := time.Duration(l.ss.Limits.IdleTimeoutSeconds) * time.Second
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		l.mu.Lock()
		left := idle - s.now().Sub(l.ss.LastActiveAt)
		busy := l.active > 0
		l.mu.Unlock()
		if busy {
			left = idle
		} else if left <= 0 {
			l.end(sandgate.SessionIdle)
			return
		}
		t.Reset(left)
		select {
		case <-ctx.Done():
			return
		case <-l.touched:
		case <-t.C:
		}
	}
}

// end records the session's end: its reason, the session.ended event,
// and the stored session.
func (s *sessions) end(l *liveSession, res sandgate.Result, err error, log *slog.Logger) {
	l.mu.Lock()
	reason := l.reason
	opened := l.ss.StartedAt != nil
	if reason == "" {
		switch res.Outcome {
		case sandgate.OutcomeTimedOut:
			reason = sandgate.SessionLifetime
		case sandgate.OutcomeOOMKilled:
			reason = sandgate.SessionOOM
		case sandgate.OutcomeLost:
			reason = sandgate.SessionLost
		case sandgate.OutcomeSucceeded, sandgate.OutcomeFailed:
			reason = sandgate.SessionExited
		case sandgate.OutcomeCancelled:
			if s.draining != nil && s.draining.Load() {
				reason = sandgate.SessionShutdown
			} else {
				reason = sandgate.SessionError
			}
		default:
			reason = sandgate.SessionError
		}
	}
	now := s.now()
	if !res.FinishedAt.IsZero() {
		now = res.FinishedAt
	}
	l.ss.State, l.ss.EndReason, l.ss.EndedAt = sandgate.SessionEnded, reason, &now
	l.ss.Error = res.Error
	l.ss.Egress = res.Egress
	if err != nil && l.ss.Error == nil {
		l.ss.Error = &sandgate.ErrorInfo{Code: sandgate.ErrorCodeOf(err), Message: sandgate.ErrorMessageOf(err)}
	}
	if !opened && err != nil {
		l.openErr = err
	}
	ss := l.ss
	l.mu.Unlock()
	payload := map[string]any{"session_id": ss.ID, "runs": ss.Runs, "outcome": string(res.Outcome)}
	if ss.StartedAt != nil {
		payload["duration_ms"] = now.Sub(*ss.StartedAt).Milliseconds()
	}
	if ss.Error != nil {
		payload["error_code"], payload["error"] = string(ss.Error.Code), ss.Error.Message
	}
	if ss.Egress != nil {
		payload["egress"] = map[string]any{
			"connections_allowed": ss.Egress.ConnectionsAllowed, "connections_denied": ss.Egress.ConnectionsDenied,
			"bytes_sent": ss.Egress.BytesSent, "bytes_received": ss.Egress.BytesReceived,
		}
	}
	s.d.Recorder.Emit(sandgate.NewSessionEnded(sandgate.SessionSubject(ss, s.cfg.Node), s.now(), reason, payload))
	log.Info("session ended", "reason", reason, "runs", ss.Runs)
	l.storeMu.Lock()
	s.store(ss, log)
	l.storeMu.Unlock()
}

// storeSession saves the session, retrying a little while the store does
// not answer: a session left open in the store would be adopted again.
func (s *sessions) store(ss sandgate.Session, log *slog.Logger) {
	admission.SaveRetrying("store session", time.Now().Add(finalStoreFor), 200*time.Millisecond, log.With("state", ss.State), func(ctx context.Context) error {
		return s.d.Sessions.UpdateSession(ctx, &ss)
	})
}

// list returns f.Team's sessions (every team's when it is ""), newest
// first.
func (s *sessions) list(ctx context.Context, f sandgate.SessionFilter) ([]sandgate.Session, error) {
	if _, err := s.executorOf(""); err != nil {
		return nil, err
	}
	list, err := s.d.Sessions.ListSessions(ctx, f)
	if err != nil {
		return nil, unavailable(err, "the session store")
	}
	for i := range list {
		if l := s.live.get(list[i].ID); l != nil {
			list[i] = l.snapshot()
		}
	}
	return list, nil
}

// delete ends a session open on this node (the gate decided who may:
// admission.EndSession) and waits a little for its container's removal.
func (s *sessions) delete(ctx context.Context, id string) (*sandgate.Session, error) {
	l := s.live.get(id)
	if l == nil {
		return nil, &sandgate.Error{Code: sandgate.CodeConflict,
			Message: fmt.Sprintf("session %s is not open on this node", id), Details: map[string]any{"node": s.cfg.Node}}
	}
	s.log.Info("session delete requested", "session_id", id)
	l.end(sandgate.SessionDeleted)
	t := time.NewTimer(cancelWait)
	defer t.Stop()
	select {
	case <-l.done:
	case <-t.C:
	case <-ctx.Done():
	}
	out := l.snapshot()
	return &out, nil
}

// activitySaveEvery bounds how often a session's last use is stored.
const activitySaveEvery = time.Second

// saveActivity stores the session's last use and command count in the
// background, at most about once per activitySaveEvery: a use within that
// time is stored by a save queued for its end.
func (s *sessions) saveActivity(l *liveSession) {
	l.mu.Lock()
	now := s.now()
	if l.ss.State != sandgate.SessionOpen {
		l.mu.Unlock()
		return
	}
	if l.saving || now.Sub(l.saved) < activitySaveEvery {
		// A save later stores this use: one is queued at most.
		if !l.pending {
			l.pending = true
			time.AfterFunc(activitySaveEvery, func() {
				l.mu.Lock()
				l.pending = false
				l.saved = time.Time{}
				l.mu.Unlock()
				s.saveActivity(l)
			})
		}
		l.mu.Unlock()
		return
	}
	l.saving, l.saved = true, now
	l.mu.Unlock()
	go func() {
		l.storeMu.Lock()
		defer l.storeMu.Unlock()
		ss := l.snapshot()
		if ss.State == sandgate.SessionOpen {
			ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
			if err := s.d.Sessions.UpdateSession(ctx, &ss); err != nil {
				s.log.Warn("store session activity", "session_id", ss.ID, "error", err)
			}
			cancel()
		}
		l.mu.Lock()
		l.saving = false
		l.mu.Unlock()
	}()
}

// endAll ends every open session of this node (shutdown) and waits for
// them until ctx ends.
func (s *sessions) endAll(ctx context.Context) {
	for _, l := range s.live.all() {
		l.end(sandgate.SessionShutdown)
	}
	done := make(chan struct{})
	go func() { s.swg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
