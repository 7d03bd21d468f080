package admission

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/sandgate/sandgate"
)

// OpenSession is POST /v1/sessions: a session spec, admitted with
// operation "session" and its limits in input.session.
type OpenSession struct {
	Body Body
}

func (OpenSession) operation() string { return "session" }

func (OpenSession) target(ctx context.Context, p *pass) error {
	return p.authorizeNew(ctx, "session.create", "session")
}

func (OpenSession) bounds(_ context.Context, p *pass) error {
	if err := p.g.sessionsKept(); err != nil {
		return err
	}
	if err := p.g.accepting(); err != nil {
		return err
	}
	return p.countSession()
}

func (o OpenSession) normalize(ctx context.Context, p *pass) error {
	g := p.g
	in, err := sandgate.DecodeSessionSpec(o.Body.R)
	if err != nil {
		return err
	}
	p.id = g.newID()
	spec, lim, err := sandgate.NormalizeSession(in, p.id, g.d.Admitter.Defaults())
	if err != nil {
		return err
	}
	if err := p.fitTeam(ctx, spec.Resources, false); err != nil {
		return err
	}
	// The session has no ID in its input while it is being admitted.
	sin := &sandgate.SessionInput{IdleTimeoutSeconds: lim.IdleTimeoutSeconds, MaxLifetimeSeconds: lim.MaxLifetimeSeconds}
	secrets, err := g.secretStates(ctx, spec)
	if err != nil {
		return err
	}
	p.input = input(sandgate.OperationSession, p.who.Principal, spec, g.settings(), sin, secrets)
	return nil
}

func (OpenSession) decide(ctx context.Context, p *pass) error {
	if err := p.decide(ctx); err != nil {
		return err
	}
	p.askApproval(sandgate.OperationSession, "")
	return nil
}

func (OpenSession) record(ctx context.Context, p *pass) error {
	return p.commit(ctx, nil, map[string]any{"operation": string(sandgate.OperationSession), "limits": limitsPayload(p.limits())})
}

func (p *pass) limits() sandgate.SessionLimits {
	s := p.input.Session
	return sandgate.SessionLimits{IdleTimeoutSeconds: s.IdleTimeoutSeconds, MaxLifetimeSeconds: s.MaxLifetimeSeconds}
}

func limitsPayload(l sandgate.SessionLimits) map[string]any {
	return map[string]any{"idle_timeout_seconds": l.IdleTimeoutSeconds, "max_lifetime_seconds": l.MaxLifetimeSeconds}
}

func (OpenSession) store(ctx context.Context, p *pass) error {
	g, dec := p.g, p.dec
	now := p.now()
	ss := sandgate.Session{
		ID: p.id, CorrelationID: p.who.CorrelationID, DecisionID: dec.DecisionID, PolicyRevision: dec.PolicyRevision,
		Principal: p.who.Principal.Name, Team: p.who.Principal.Team, SignIn: p.signIn(), Node: g.cfg.Node, State: sandgate.SessionOpen,
		Limits: p.limits(), CreatedAt: now, LastActiveAt: now,
		Spec: g.d.Masker.StoredSpec(dec.Spec.RunSpec, dec.Mask), Warnings: warnings(dec),
	}
	if p.approval != nil {
		ss.State, ss.ApprovalID = sandgate.SessionPendingApproval, p.approval.ID
	}
	if err := g.d.Sessions.CreateSession(ctx, &ss); err != nil {
		g.d.Recorder.Emit(sandgate.NewSessionEnded(p.subject(p.id), p.now(), sandgate.SessionError,
			map[string]any{"session_id": p.id, "error": "the session could not be stored; nothing was made"}))
		return unavailable(err, "the session store")
	}
	p.session = &ss
	if p.approval != nil {
		p.answer.Session = &ss
		return p.storePending(ctx)
	}
	return nil
}

// execute opens the session and waits a while for its container to run.
func (OpenSession) execute(ctx context.Context, p *pass) error {
	if p.approval != nil {
		p.holdPending()
		return nil
	}
	hold := p.hold
	p.keep()
	ss, err := p.g.d.Runner.Open(ctx, AdmittedSession{Session: *p.session, Spec: p.dec.Spec, Enforcement: p.dec.Enforcement,
		TeamConcurrency: hold.limits.Sessions, Release: hold.release})
	if err != nil {
		return err
	}
	p.answer.Session = ss
	return nil
}

// Command is POST /v1/sessions/{id}/runs: a command in an open session,
// admitted with operation "exec": input.request is the session's
// admitted spec with the command's fields, input.session names the
// session.
type Command struct {
	Session string
	Body    Body
}

func (Command) operation() string { return "exec" }

func (c Command) target(ctx context.Context, p *pass) error {
	return p.findOpenSession(ctx, c.Session, "session.exec")
}

func (Command) bounds(context.Context, *pass) error { return nil }

func (c Command) normalize(ctx context.Context, p *pass) error {
	if err := p.g.accepting(); err != nil {
		return err
	}
	x, err := sandgate.DecodeExecSpec(c.Body.R)
	if err != nil {
		return err
	}
	n, err := sandgate.Normalize(sandgate.ExecRunSpec(p.open.Spec.RunSpec, x), p.g.d.Admitter.Defaults())
	if err != nil {
		return err
	}
	ss := p.session
	p.id = p.g.newID()
	sin := &sandgate.SessionInput{ID: ss.ID, IdleTimeoutSeconds: ss.Limits.IdleTimeoutSeconds, MaxLifetimeSeconds: ss.Limits.MaxLifetimeSeconds}
	secrets, err := p.g.secretStates(ctx, n)
	if err != nil {
		return err
	}
	p.input = input(sandgate.OperationExec, p.who.Principal, n, p.g.settings(), sin, secrets)
	return nil
}

func (Command) decide(ctx context.Context, p *pass) error {
	if err := p.decide(ctx); err != nil {
		return err
	}
	p.askApproval(sandgate.OperationExec, "a command in a session cannot wait for it")
	return nil
}

// record commits the command's decision. An allowed command's run is
// written to the store while its decision is committed: two round trips
// to Postgres at once instead of one after the other, on the path of
// every command. The store step waits for that write, and nothing runs
// until both are done; a run stored beside a record that failed is ended
// as the request was.
func (c Command) record(ctx context.Context, p *pass) error {
	if p.dec.Allow {
		p.storeAlongside(ctx)
	}
	err := p.commit(ctx, nil, map[string]any{"operation": string(sandgate.OperationExec), "session_id": c.Session})
	if err != nil && p.dec.Allow {
		p.unstore(err)
	}
	return err
}

func (c Command) store(ctx context.Context, p *pass) error {
	run, err := p.storedAlongside()
	if err != nil {
		const msg = "the run could not be stored; nothing was run"
		p.failed(msg, map[string]any{"session_id": c.Session})
		go p.g.endUnconfirmed(run, msg)
		return unavailable(err, "the run store")
	}
	p.answer.Run = &run
	return nil
}

func (c Command) execute(_ context.Context, p *pass) error {
	p.start(c.Session)
	return nil
}

// PutFiles is PUT /v1/sessions/{id}/files: a file, or an archive unpacked,
// into an open session's workspace. Its decision is the ownership of the
// session; the trail records it with what was written (session.file_put).
type PutFiles struct {
	none
	Session string
	// Path is the file's path, or the directory an archive is unpacked
	// in, relative to the workspace.
	Path string
	// Format is sandgate.FileFormatFile for one file, else the archive's.
	Format string
	// Mode is a single file's permission bits.
	Mode int64
	Body Body
}

func (PutFiles) operation() string { return "file_put" }

func (f PutFiles) target(ctx context.Context, p *pass) error {
	return p.findOpenSession(ctx, f.Session, "session.files_put")
}

func (f PutFiles) bounds(_ context.Context, p *pass) error { return p.reserveUpload(f.Body.Size) }

func (f PutFiles) normalize(_ context.Context, p *pass) error {
	_, err := p.spool(f.Body.R, f.Body.SetReadDeadline, func(r io.Reader) (*Upload, error) {
		return p.g.d.Workspaces.Files(r, f.Path, f.Format, f.Mode)
	})
	return err
}

func (f PutFiles) execute(ctx context.Context, p *pass) error {
	up := p.spooled
	file, err := os.Open(up.Path)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeUnavailable, err, "the gateway cannot read the upload it kept")
	}
	defer file.Close()
	d, err := p.g.d.Runner.PutFiles(ctx, f.Session, sandgate.FileUpload{Path: f.Path, Format: f.Format, Body: file, Size: up.Size})
	if err == nil && up.SHA256 != "" {
		d.SHA256 = up.SHA256
	}
	p.fileEvent(sandgate.NewSessionFilePut, f.Path, f.Format, d, err)
	p.answer.File = d
	return err
}

// GetFiles is GET /v1/sessions/{id}/files: a file, or a directory as a
// tar, out of an open session's workspace, recorded once sent
// (session.file_get).
type GetFiles struct {
	none
	Session string
	Path    string
	// Out makes the writer of the answer once its kind ("file" or "tar")
	// is known.
	Out func(kind string) (io.Writer, error)
}

func (GetFiles) operation() string { return "file_get" }

func (g GetFiles) target(ctx context.Context, p *pass) error {
	return p.findOpenSession(ctx, g.Session, "session.files_get")
}

func (g GetFiles) execute(ctx context.Context, p *pass) error {
	d, err := p.g.d.Runner.GetFiles(ctx, g.Session, g.Path, g.Out)
	p.fileEvent(sandgate.NewSessionFileGet, g.Path, d.Kind, d, err)
	p.answer.File = d
	return err
}

// fileEvent records a file operation, done or refused.
func (p *pass) fileEvent(event func(sandgate.Subject, time.Time, string, map[string]any) sandgate.Event, path, kind string, d sandgate.FileDigest, err error) {
	ss := p.session
	if l := p.g.d.Live.Session(ss.ID); l != nil {
		s := l.Session
		ss = &s
	}
	payload := p.via(map[string]any{"session_id": ss.ID, "path": shorten(path, 4096), "kind": kind})
	outcome := "done"
	if err != nil {
		outcome = "refused"
		payload["error_code"], payload["error"] = string(sandgate.ErrorCodeOf(err)), shorten(sandgate.ErrorMessageOf(err), 1024)
	} else {
		payload["bytes"], payload["sha256"], payload["entries"] = d.Bytes, d.SHA256, d.Entries
	}
	s := sandgate.SessionSubject(*ss, p.g.cfg.Node)
	s.Actor, s.Team, s.CorrelationID, s.PolicyRevision = p.who.Principal.Name, p.who.Principal.Team, p.who.CorrelationID, ""
	s.SignIn = p.signIn()
	p.g.d.Recorder.Emit(event(s, p.now(), outcome, payload))
}

// shorten cuts s to at most n bytes, so that hostile input cannot bloat
// an audit event.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// ReadSession is GET /v1/sessions/{id}.
type ReadSession struct {
	none
	Session string
}

func (ReadSession) operation() string { return "session_read" }

func (r ReadSession) target(ctx context.Context, p *pass) error {
	if err := p.findSession(ctx, r.Session, "session.read"); err != nil {
		return err
	}
	p.answer.Session = p.session
	return nil
}

// EndSession is DELETE /v1/sessions/{id}: the policy's session.end (by
// default submitters end their team's, admins any).
type EndSession struct {
	none
	Session string
}

func (EndSession) operation() string { return "session_end" }

func (e EndSession) target(ctx context.Context, p *pass) error {
	if err := p.findSession(ctx, e.Session, "session.end"); err != nil {
		return err
	}
	ss := p.session
	if p.open != nil {
		return nil
	}
	if ss.State == sandgate.SessionEnded {
		return &sandgate.Error{Code: sandgate.CodeConflict,
			Message: "session " + e.Session + " has already ended (" + string(ss.EndReason) + ")",
			Details: map[string]any{"state": ss.State, "end_reason": ss.EndReason}}
	}
	return &sandgate.Error{Code: sandgate.CodeConflict,
		Message: "session " + e.Session + " is not open on this node", Details: map[string]any{"node": ss.Node}}
}

func (e EndSession) execute(ctx context.Context, p *pass) error {
	ss, err := p.g.d.Runner.End(ctx, e.Session)
	if err != nil {
		return err
	}
	p.answer.Session = ss
	return nil
}
