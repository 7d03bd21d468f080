package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
)

// openWait bounds how long POST /v1/sessions waits for the session's
// container to run before it answers 202 with the session still opening.
const openWait = 2 * time.Minute

// A session is one long-lived container, a run of its keepalive command
// that the executor follows with the same handle as any run, and lasts
// until it is deleted, idle past its idle timeout, older than its
// lifetime, or its container dies. Its commands are runs (service.start
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

// sessionExecutor is the executor's session side, or UNAVAILABLE.
func (s *service) sessionExecutor() (sandgate.SessionExecutor, error) {
	x, ok := s.d.Executor.(sandgate.SessionExecutor)
	if !ok || s.d.Sessions == nil {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "this gateway has no sessions")
	}
	return x, nil
}

// executorOf is the executor that holds session id's container: the
// node's own, or the dead node's daemon of a session taken over.
func (s *service) executorOf(id string) (sandgate.SessionExecutor, error) {
	x, err := s.sessionExecutor()
	if err != nil {
		return nil, err
	}
	if l := s.sessions.get(id); l != nil && l.exec != nil {
		return l.exec, nil
	}
	return x, nil
}

// createSession admits and opens a session, and waits until its
// container runs (or openWait passes). A denial is POLICY-DENIED with the
// decision; a container that could not be made is the executor's error,
// and the session is recorded as ended with reason error.
func (s *service) createSession(ctx context.Context, p sandgate.Principal, corr string, in sandgate.SessionSpec) (*sandgate.Session, error) {
	if err := s.mayStartWork(); err != nil {
		return nil, err
	}
	if _, err := s.sessionExecutor(); err != nil {
		return nil, err
	}
	id := s.newID()
	spec, lim, err := sandgate.NormalizeSession(in, id, s.d.Admitter.Defaults())
	if err != nil {
		return nil, err
	}
	limits := s.d.Admitter.TeamLimits(p.Team)
	release, err := s.teams.reserve(p.Team, limits, spec.Resources)
	if err != nil {
		s.metrics.teamLimited.WithLabelValues(p.Team).Inc()
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			release()
		}
	}()
	sin := &sandgate.SessionInput{IdleTimeoutSeconds: lim.IdleTimeoutSeconds, MaxLifetimeSeconds: lim.MaxLifetimeSeconds}
	dec, err := s.d.Admitter.Decide(ctx, sandgate.AdmissionInput{
		APIVersion: sandgate.APIVersion, Operation: sandgate.OperationSession,
		Principal: p, Request: spec, Settings: s.settings(), Session: sin,
	})
	if err != nil {
		return nil, unavailable(err, "policy evaluation")
	}
	s.metrics.decision(sandgate.OperationSession, dec)
	if !dec.Allow {
		// A denied session has no ID: nothing was made.
		id = ""
	}
	extra := map[string]any{"operation": string(sandgate.OperationSession), "limits": limitsPayload(lim)}
	if err := s.recordDecision(ctx, p, corr, id, spec, dec, extra); err != nil {
		return nil, err
	}
	if !dec.Allow {
		return nil, denial(dec)
	}
	now := s.now()
	ss := sandgate.Session{
		ID: id, CorrelationID: corr, DecisionID: dec.DecisionID, PolicyRevision: dec.PolicyRevision,
		Principal: p.Name, Team: p.Team, Node: s.cfg.Node, State: sandgate.SessionOpen, Limits: lim,
		CreatedAt: now, LastActiveAt: now, Spec: s.storedSpec(dec.Spec, dec.Mask), Warnings: warningMessages(dec),
	}
	if err := s.d.Sessions.CreateSession(ctx, &ss); err != nil {
		s.d.Recorder.Emit(sandgate.Event{Type: sandgate.EventSessionEnded, Time: s.now(), Outcome: string(sandgate.SessionError),
			CorrelationID: corr, RunID: id, DecisionID: dec.DecisionID, Actor: p.Name, Team: p.Team, Node: s.cfg.Node,
			Payload: map[string]any{"session_id": id, "reason": string(sandgate.SessionError), "error": "the session could not be stored; nothing was made"}})
		return nil, unavailable(err, "the session store")
	}
	l := newLiveSession(ss, dec.Spec)
	started = true
	s.openSession(l, dec.Enforcement, limits.Concurrent, release, nil)
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

// recordDecision commits run.requested and the admission event of a
// session or of a command in one, before anything runs (AUDIT-UNAVAILABLE
// otherwise). runID is the session's ID for a session, the command's run
// ID for a command, empty for a denial; extra goes into both payloads.
func (s *service) recordDecision(ctx context.Context, p sandgate.Principal, corr, runID string, spec sandgate.Normalized, dec sandgate.Decision, extra map[string]any) error {
	base := sandgate.Event{
		Time: s.now(), CorrelationID: corr, RunID: runID, DecisionID: dec.DecisionID,
		Actor: p.Name, Team: p.Team, Node: s.cfg.Node, PolicyRevision: dec.PolicyRevision,
	}
	requested := base
	requested.Type, requested.Outcome = sandgate.EventRunRequested, "requested"
	requested.Payload = map[string]any{"spec": s.mask.spec(spec.RunSpec, dec.Mask)}
	admission := base
	admission.Payload = s.decisionPayload(dec)
	if dec.Allow {
		admission.Type, admission.Outcome = sandgate.EventAdmissionAllowed, "allowed"
		admission.Payload["spec"] = s.mask.spec(dec.Spec.RunSpec, dec.Mask)
	} else {
		admission.Type, admission.Outcome = sandgate.EventAdmissionDenied, "denied"
	}
	for k, v := range extra {
		requested.Payload[k], admission.Payload[k] = v, v
	}
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	err := s.d.Recorder.Record(rctx, requested, admission)
	cancel()
	if err != nil {
		s.log.Error("audit commit failed; refused", "correlation_id", corr, "error", err)
		if dec.Allow && errors.Is(err, sandgate.ErrCommitUncertain) {
			// As for a run (service.submit): the admission may reach the
			// trail after all, so the trail says nothing ran.
			failed := admission
			failed.Type, failed.Outcome, failed.Time = sandgate.EventRunFailed, string(sandgate.OutcomeError), s.now()
			failed.ID, failed.Payload = "", map[string]any{"error": "the admission's commit could not be confirmed; the request was refused and nothing was run"}
			s.d.Recorder.Emit(failed)
		}
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err,
			"the audit trail cannot commit the decision now; nothing was run, retry later")
	}
	return nil
}

// openSession runs the session's container in its own goroutine until
// the session ends, and its idle timer beside it. rec, when set, adopts
// the container a previous process of this node made instead of making
// one.
func (s *service) openSession(l *liveSession, enforce sandgate.Enforcement, teamConcurrency int, release func(), rec sandgate.Reconciler) {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	s.sessions.add(l)
	s.swg.Add(1)
	go func() {
		defer s.swg.Done()
		defer cancel()
		defer release()
		s.runSession(ctx, l, enforce, teamConcurrency, rec)
	}()
}

// runSession follows the session's container to its end and records the
// end with its reason.
func (s *service) runSession(ctx context.Context, l *liveSession, enforce sandgate.Enforcement, teamConcurrency int, rec sandgate.Reconciler) {
	defer close(l.done)
	defer s.sessions.remove(l.ss.ID)
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
		Principal: ss.Principal, Team: ss.Team, Spec: spec, AirGapped: s.cfg.AirGapped, PolicyRevision: ss.PolicyRevision,
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
			s.storeSession(l.snapshot(), log)
			l.storeMu.Unlock()
			if !first {
				return
			}
			if rec == nil {
				s.d.Recorder.Emit(sandgate.Event{
					Type: sandgate.EventSessionCreated, Time: s.now(), Outcome: "open",
					CorrelationID: snap.CorrelationID, RunID: snap.ID, DecisionID: snap.DecisionID,
					ContainerID: containerID, Actor: snap.Principal, Team: snap.Team, Node: s.cfg.Node,
					PolicyRevision: snap.PolicyRevision,
					Payload:        map[string]any{"session_id": snap.ID, "image": spec.Image, "limits": limitsPayload(snap.Limits)},
				})
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
		res, err = safely(log, func() (sandgate.Result, error) { return s.d.Executor.Execute(ctx, job) })
	}
	l.cancel()
	<-idleDone
	s.endSession(l, res, err, log)
}

// idleTimer ends the session once it has been idle for its idle timeout,
// with no command running.
func (s *service) idleTimer(ctx context.Context, l *liveSession) {
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

// endSession records the session's end: its reason, the session.ended
// event, and the stored session.
func (s *service) endSession(l *liveSession, res sandgate.Result, err error, log *slog.Logger) {
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
			if s.draining.Load() {
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
	payload := map[string]any{"session_id": ss.ID, "reason": string(reason), "runs": ss.Runs, "outcome": string(res.Outcome)}
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
	s.d.Recorder.Emit(sandgate.Event{
		Type: sandgate.EventSessionEnded, Time: s.now(), Outcome: string(reason),
		CorrelationID: ss.CorrelationID, RunID: ss.ID, DecisionID: ss.DecisionID, ContainerID: ss.ContainerID,
		Actor: ss.Principal, Team: ss.Team, Node: s.cfg.Node, PolicyRevision: ss.PolicyRevision, Payload: payload,
	})
	log.Info("session ended", "reason", reason, "runs", ss.Runs)
	l.storeMu.Lock()
	s.storeSession(ss, log)
	l.storeMu.Unlock()
}

// storeSession saves the session, retrying a little while the store does
// not answer: a session left open in the store would be adopted again.
func (s *service) storeSession(ss sandgate.Session, log *slog.Logger) {
	saveRetrying("store session", time.Now().Add(finalStoreFor), 200*time.Millisecond, log.With("state", ss.State), func(ctx context.Context) error {
		return s.d.Sessions.UpdateSession(ctx, &ss)
	})
}

// visibleSession returns the session when p may see it (another team's
// is NOT-FOUND), with what this node knows live.
func (s *service) visibleSession(ctx context.Context, p sandgate.Principal, id string, allTeams bool) (*sandgate.Session, *liveSession, error) {
	if _, err := s.sessionExecutor(); err != nil {
		return nil, nil, err
	}
	notFound := sandgate.Errorf(sandgate.CodeNotFound, "session %s not found", id)
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return nil, nil, notFound
	}
	if l := s.sessions.get(id); l != nil {
		ss := l.snapshot()
		if !allTeams && ss.Team != p.Team {
			return nil, nil, notFound
		}
		return &ss, l, nil
	}
	ss, err := s.d.Sessions.GetSession(ctx, id)
	if err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound {
			return nil, nil, notFound
		}
		return nil, nil, unavailable(err, "the session store")
	}
	if !allTeams && ss.Team != p.Team {
		return nil, nil, notFound
	}
	return ss, nil, nil
}

// openSessionOf is the live session p may use, or CONFLICT when it is not
// open on this node.
func (s *service) openSessionOf(ctx context.Context, p sandgate.Principal, id string, allTeams bool) (*liveSession, error) {
	ss, l, err := s.visibleSession(ctx, p, id, allTeams)
	if err != nil {
		return nil, err
	}
	if l == nil || ss.State != sandgate.SessionOpen || ss.StartedAt == nil {
		return nil, &sandgate.Error{Code: sandgate.CodeConflict,
			Message: fmt.Sprintf("session %s is not open on this node (%s %s)", id, ss.State, ss.EndReason),
			Details: map[string]any{"state": ss.State, "end_reason": ss.EndReason, "node": ss.Node}}
	}
	return l, nil
}

// getSession returns a session p may see.
func (s *service) getSession(ctx context.Context, p sandgate.Principal, id string) (*sandgate.Session, error) {
	ss, _, err := s.visibleSession(ctx, p, id, seesAllTeams(p))
	return ss, err
}

// listSessions returns the sessions p may see, newest first.
func (s *service) listSessions(ctx context.Context, p sandgate.Principal, f sandgate.SessionFilter) ([]sandgate.Session, error) {
	if _, err := s.sessionExecutor(); err != nil {
		return nil, err
	}
	if !seesAllTeams(p) {
		f.Team = p.Team
	}
	list, err := s.d.Sessions.ListSessions(ctx, f)
	if err != nil {
		return nil, unavailable(err, "the session store")
	}
	for i := range list {
		if l := s.sessions.get(list[i].ID); l != nil {
			list[i] = l.snapshot()
		}
	}
	return list, nil
}

// deleteSession ends a session p may end (submitters their team's, admins
// any) and waits a little for its container to be removed.
func (s *service) deleteSession(ctx context.Context, p sandgate.Principal, id string) (*sandgate.Session, error) {
	ss, l, err := s.visibleSession(ctx, p, id, p.Has(sandgate.RoleAdmin))
	if err != nil {
		return nil, err
	}
	if l == nil {
		if ss.State == sandgate.SessionEnded {
			return nil, &sandgate.Error{Code: sandgate.CodeConflict,
				Message: fmt.Sprintf("session %s has already ended (%s)", id, ss.EndReason),
				Details: map[string]any{"state": ss.State, "end_reason": ss.EndReason}}
		}
		return nil, &sandgate.Error{Code: sandgate.CodeConflict,
			Message: fmt.Sprintf("session %s is not open on this node", id), Details: map[string]any{"node": ss.Node}}
	}
	s.log.Info("session delete requested", "session_id", id, "actor", p.Name)
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
func (s *service) saveActivity(l *liveSession) {
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

// endSessions ends every open session of this node (shutdown) and waits
// for them until ctx ends.
func (s *service) endSessions(ctx context.Context) {
	for _, l := range s.sessions.all() {
		l.end(sandgate.SessionShutdown)
	}
	done := make(chan struct{})
	go func() { s.swg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
