package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
)

// The commands and files of a session: each command a run decided with
// operation exec, each file operation recorded.

// refuseSessionLabel refuses a run whose session_id names a session of
// sandgate's: its commands are the session's own runs, made by
// POST /v1/sessions/{id}/runs, and a run of its own would pass for one.
func (s *service) refuseSessionLabel(ctx context.Context, sid string) error {
	if s.d.Sessions == nil || len(sid) != 36 {
		return nil
	}
	if _, err := uuid.Parse(sid); err != nil {
		return nil
	}
	if _, err := s.d.Sessions.GetSession(ctx, sid); err == nil {
		return sandgate.FieldError("session_id", "names a session: run commands in it with POST /v1/sessions/%s/runs", sid)
	}
	return nil
}

// execInSession admits a command in an open session and starts it as a
// run of the session. input.request is the session's admitted spec with
// the command's fields; input.session names the session.
func (s *service) execInSession(ctx context.Context, p sandgate.Principal, corr, id string, x sandgate.ExecSpec) (*sandgate.Run, error) {
	if err := s.mayStartWork(); err != nil {
		return nil, err
	}
	l, err := s.openSessionOf(ctx, p, id, false)
	if err != nil {
		return nil, err
	}
	ss := l.snapshot()
	spec, err := sandgate.Normalize(sandgate.ExecRunSpec(l.spec.RunSpec, x), s.d.Admitter.Defaults())
	if err != nil {
		return nil, err
	}
	dec, err := s.d.Admitter.Decide(ctx, sandgate.AdmissionInput{
		APIVersion: sandgate.APIVersion, Operation: sandgate.OperationExec,
		Principal: p, Request: spec, Settings: s.settings(),
		Session: &sandgate.SessionInput{ID: ss.ID, IdleTimeoutSeconds: ss.Limits.IdleTimeoutSeconds, MaxLifetimeSeconds: ss.Limits.MaxLifetimeSeconds},
	})
	if err != nil {
		return nil, unavailable(err, "policy evaluation")
	}
	s.metrics.decision(sandgate.OperationExec, dec)
	runID := ""
	if dec.Allow {
		runID = s.newID()
	}
	extra := map[string]any{"operation": string(sandgate.OperationExec), "session_id": ss.ID}
	if !dec.Allow {
		if err := s.recordDecision(ctx, p, corr, runID, spec, dec, extra); err != nil {
			return nil, err
		}
		return nil, denial(dec)
	}
	now := s.now()
	run := &sandgate.Run{
		ID: runID, CorrelationID: corr, DecisionID: dec.DecisionID,
		PolicyRevision: dec.PolicyRevision, Principal: p.Name, Team: p.Team, Node: s.cfg.Node,
		State: sandgate.StatePending, CreatedAt: now,
		Spec: s.storedSpec(dec.Spec, dec.Mask), Warnings: warningMessages(dec),
	}
	// The run is stored while its decision is committed: two round trips
	// to Postgres at once instead of one after the other. Nothing runs
	// until both are done.
	stored := make(chan error, 1)
	go func() {
		_, _, err := s.d.Runs.CreateRun(ctx, run)
		stored <- err
	}()
	commitErr := s.recordDecision(ctx, p, corr, runID, spec, dec, extra)
	storeErr := <-stored
	if commitErr != nil {
		if storeErr == nil {
			// Stored, never run: it ends as the request did.
			ended := *run
			ended.State, ended.Outcome = sandgate.StateFinished, sandgate.OutcomeError
			ended.Error = &sandgate.ErrorInfo{Code: sandgate.ErrorCodeOf(commitErr), Message: sandgate.ErrorMessageOf(commitErr)}
			ended.FinishedAt = &now
			saveRetrying("store a run refused for the trail", time.Now().Add(finalStoreFor), 200*time.Millisecond, s.log.With("run_id", runID), func(ctx context.Context) error {
				return s.d.Runs.UpdateRun(ctx, &ended)
			})
		}
		return nil, commitErr
	}
	if storeErr != nil {
		s.d.Recorder.Emit(sandgate.Event{Type: sandgate.EventRunFailed, Time: s.now(), Outcome: string(sandgate.OutcomeError),
			CorrelationID: corr, RunID: runID, DecisionID: dec.DecisionID, Actor: p.Name, Team: p.Team, Node: s.cfg.Node,
			Payload: map[string]any{"session_id": ss.ID, "error": "the run could not be stored; nothing was run"}})
		go s.endUnconfirmed(*run, "the run could not be stored; nothing was run")
		return nil, unavailable(storeErr, "the run store")
	}
	l.touch(now, 1)
	s.saveActivity(l)
	s.startInSession(*run, dec.Spec, dec.Enforcement, l)
	return s.overlay(run), nil
}

// startInSession starts a command's run: a run like any other, whose
// executor call is Exec in the session's container.
func (s *service) startInSession(run sandgate.Run, spec sandgate.Normalized, enforce sandgate.Enforcement, l *liveSession) {
	lr := newLiveRun(run, spec.OutputLimitBytes)
	lr.spec, lr.enforce, lr.session = spec, enforce, l.ss.ID
	ctx, cancel := context.WithCancel(s.runCtx)
	lr.cancel = cancel
	s.live.add(run.ID, lr)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		s.execute(ctx, lr)
		final := lr.snapshot()
		l.touch(s.now(), -1)
		s.saveActivity(l)
		// An OOM kill in the session's memory leaves it in no known state:
		// the session ends with it.
		if final.Outcome == sandgate.OutcomeOOMKilled {
			l.end(sandgate.SessionOOM)
		}
	}()
}

// putFiles writes a file or an archive into an open session's workspace
// and records it (session.file_put). fileSHA, for a single file, is the
// SHA-256 of its content, which is reported instead of its tar's.
func (s *service) putFiles(ctx context.Context, p sandgate.Principal, corr, id string, up sandgate.FileUpload, fileSHA string) (sandgate.FileDigest, error) {
	x, err := s.executorOf(id)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	l, err := s.openSessionOf(ctx, p, id, false)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	l.touch(s.now(), 0)
	s.saveActivity(l)
	d, err := x.PutFiles(ctx, id, l.spec, up)
	if err == nil && fileSHA != "" {
		d.SHA256 = fileSHA
	}
	s.fileEvent(sandgate.EventSessionFilePut, p, corr, l.snapshot(), up.Path, up.Format, d, err)
	return d, err
}

// getFiles streams a file or a directory of an open session's workspace
// and records it (session.file_get) once it is sent.
func (s *service) getFiles(ctx context.Context, p sandgate.Principal, corr, id, path string, w func(kind string) (writer, error)) (sandgate.FileDigest, error) {
	x, err := s.executorOf(id)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	l, err := s.openSessionOf(ctx, p, id, seesAllTeams(p))
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	l.touch(s.now(), 0)
	s.saveActivity(l)
	var out writer
	var werr error
	d, err := x.GetFiles(ctx, id, path, writerFunc(func(b []byte) (int, error) {
		if out == nil {
			return 0, errors.New("no writer")
		}
		return out.Write(b)
	}), func(kind string) { out, werr = w(kind) })
	if err == nil {
		err = werr
	}
	s.fileEvent(sandgate.EventSessionFileGet, p, corr, l.snapshot(), path, d.Kind, d, err)
	return d, err
}

type writer interface{ Write([]byte) (int, error) }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// fileEvent records a file operation, done or refused.
func (s *service) fileEvent(t sandgate.EventType, p sandgate.Principal, corr string, ss sandgate.Session, path, kind string, d sandgate.FileDigest, err error) {
	payload := map[string]any{"session_id": ss.ID, "path": shorten(path, 4096), "kind": kind}
	outcome := "done"
	if err != nil {
		outcome = "refused"
		payload["error_code"], payload["error"] = string(sandgate.ErrorCodeOf(err)), shorten(sandgate.ErrorMessageOf(err), 1024)
	} else {
		payload["bytes"], payload["sha256"], payload["entries"] = d.Bytes, d.SHA256, d.Entries
	}
	s.d.Recorder.Emit(sandgate.Event{
		Type: t, Time: s.now(), Outcome: outcome, CorrelationID: corr, RunID: ss.ID, DecisionID: ss.DecisionID,
		ContainerID: ss.ContainerID, Actor: p.Name, Team: p.Team, Node: s.cfg.Node, Payload: payload,
	})
}
