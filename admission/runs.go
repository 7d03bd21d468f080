package admission

import (
	"context"
	"errors"
	"io"
	"mime/multipart"

	"github.com/sandgate/sandgate"
)

// Run is POST /v1/runs: a run spec as JSON, or as multipart/form-data
// with the spec first and a workspace archive after it.
type Run struct {
	// IdempotencyKey, when set, makes a retry answer the run the first
	// request made.
	IdempotencyKey string
	Body           Body
}

func (Run) operation() string { return "run" }

// target asks whether the principal may make a run for its team.
func (Run) target(ctx context.Context, p *pass) error {
	return p.authorizeNew(ctx, "run.create", "run")
}

// bounds counts the run against its team's runs, and an archive that may
// come with it against the uploads' quotas, before the body is read.
func (r Run) bounds(_ context.Context, p *pass) error {
	if err := p.g.accepting(); err != nil {
		return err
	}
	if err := p.countTeam(); err != nil {
		return err
	}
	if r.Body.Boundary != "" {
		return p.reserveUpload(r.Body.Size)
	}
	return nil
}

// normalize reads the spec, resolves what it names, normalises it once,
// sizes it against its team's budget, and only then reads the archive.
func (r Run) normalize(ctx context.Context, p *pass) error {
	g := p.g
	spec, mr, err := r.decode()
	if err != nil {
		return err
	}
	var archive *multipart.Part
	if mr != nil {
		if archive, err = nextPart(mr, "spec"); err != nil {
			return err
		}
		if archive != nil {
			// The spec has a workspace: its normalisation knows it before
			// the archive is read, and the summary fills it after.
			spec.Workspace = &sandgate.WorkspaceArchive{}
		}
	}
	n, err := p.normalizeRun(ctx, spec)
	if err != nil {
		return err
	}
	p.id = g.newID()
	if err := p.fitTeam(ctx, n.Resources, true); err != nil {
		return err
	}
	if archive != nil {
		up, err := p.spool(archive, r.Body.SetReadDeadline, g.d.Workspaces.Archive)
		if err != nil {
			return err
		}
		n.Workspace = up.Archive
		if extra, err := nextPart(mr, "workspace"); err != nil || extra != nil {
			if err == nil {
				err = sandgate.FieldError(extra.FormName(), "a multipart run has two parts at most: spec and workspace")
			}
			return err
		}
	}
	p.key = r.IdempotencyKey
	secrets, err := g.secretStates(ctx, n)
	if err != nil {
		return err
	}
	p.input = input(sandgate.OperationRun, p.who.Principal, n, g.settings(), nil, secrets)
	return nil
}

// decode reads the spec: the JSON body, or the first part of a multipart
// one, whose reader it returns positioned after the spec.
func (r Run) decode() (sandgate.RunSpec, *multipart.Reader, error) {
	if r.Body.Boundary == "" {
		spec, err := sandgate.DecodeRunSpec(r.Body.R)
		return spec, nil, err
	}
	mr := multipart.NewReader(r.Body.R, r.Body.Boundary)
	part, err := mr.NextPart()
	if errors.Is(err, io.EOF) {
		return sandgate.RunSpec{}, nil, sandgate.FieldError("spec", "is required: the run spec as JSON")
	}
	if err != nil {
		return sandgate.RunSpec{}, nil, bodyError(err, "multipart body")
	}
	switch name := part.FormName(); name {
	case "spec":
	case "workspace":
		return sandgate.RunSpec{}, nil, sandgate.FieldError("spec", "is required as the first part, before the workspace")
	default:
		return sandgate.RunSpec{}, nil, sandgate.FieldError(name, "unknown part: a multipart run has a spec part and a workspace part")
	}
	spec, err := sandgate.DecodeRunSpec(part)
	part.Close()
	return spec, mr, err
}

// nextPart reads the next part's header after the part named after: nil
// at the end, the workspace part, or an error naming the part that may
// not come.
func nextPart(mr *multipart.Reader, after string) (*multipart.Part, error) {
	part, err := mr.NextPart()
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	if err != nil {
		return nil, bodyError(err, "multipart body")
	}
	switch name := part.FormName(); {
	case name == after:
		return nil, sandgate.FieldError(name, "given more than once")
	case after == "spec" && name == "workspace":
		return part, nil
	case after == "spec":
		return nil, sandgate.FieldError(name, "unknown part: a multipart run has a spec part and a workspace part")
	default:
		return part, nil
	}
}

// normalizeRun checks what only the gateway can (the workspace's entries,
// a callback it can sign, the session the spec names) and normalises the
// spec, once.
func (p *pass) normalizeRun(ctx context.Context, spec sandgate.RunSpec) (sandgate.Normalized, error) {
	g := p.g
	if err := g.d.Workspaces.CheckSpec(spec); err != nil {
		return sandgate.Normalized{}, err
	}
	n, err := sandgate.Normalize(spec, g.d.Admitter.Defaults())
	if err != nil {
		return sandgate.Normalized{}, err
	}
	if err := p.refuseSessionRef(ctx, n.SessionID); err != nil {
		return sandgate.Normalized{}, err
	}
	if n.CallbackURL != "" && !g.cfg.Callbacks {
		return sandgate.Normalized{}, sandgate.FieldError("callback_url", "completion callbacks are not configured on this gateway (it has no callback key)")
	}
	return n, nil
}

// refuseSessionRef refuses a run whose session_id has the form of
// sandgate's session IDs: its commands are the session's own runs, made
// by POST /v1/sessions/{id}/runs, and a run of its own would pass for
// one. A session of the principal's team is named in the answer; any
// other (another team's, or none) is NOT-FOUND, the same answer for
// both. A session_id of another form is the run's own label.
func (p *pass) refuseSessionRef(ctx context.Context, sid string) error {
	if !isID(sid) {
		return nil
	}
	if err := p.g.sessionsKept(); err != nil {
		return nil
	}
	ss, _, err := p.g.lookupSession(ctx, sid)
	switch {
	case sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound, err == nil && ss.Team != p.who.Principal.Team:
		e := &sandgate.Error{Code: sandgate.CodeNotFound, Field: "session_id", Message: "session " + sid + " not found"}
		return e
	case err != nil:
		return err
	}
	return sandgate.FieldError("session_id", "names a session: run commands in it with POST /v1/sessions/%s/runs", sid)
}

// decide claims the run's Idempotency-Key, if any (a retry is answered
// with the run the key made), then the policy decides. A run that needs
// approval waits for it, unless it comes with a workspace archive, which
// no node keeps that long.
func (Run) decide(ctx context.Context, p *pass) error {
	if err := p.claim(ctx); err != nil {
		return err
	}
	if err := p.decide(ctx); err != nil {
		return err
	}
	why := ""
	if p.spooled != nil {
		why = "a run with a workspace archive cannot wait for it: put its files in the spec (files) or in a session"
	}
	p.askApproval(sandgate.OperationRun, why)
	return nil
}

func (r Run) record(ctx context.Context, p *pass) error {
	var extra map[string]any
	if r.IdempotencyKey != "" {
		extra = map[string]any{"idempotency_key": p.g.d.Masker.Hash(r.IdempotencyKey)}
	}
	return p.commit(ctx, extra, nil)
}

func (Run) store(ctx context.Context, p *pass) error {
	run := p.storedRun()
	if p.approval != nil {
		run.State, run.ApprovalID = sandgate.StatePendingApproval, p.approval.ID
	}
	if err := p.storeRun(ctx, &run, nil); err != nil {
		return err
	}
	p.answer.Run = &run
	if p.approval != nil {
		return p.storePending(ctx)
	}
	return nil
}

func (Run) execute(_ context.Context, p *pass) error {
	if p.approval != nil {
		p.holdPending()
		return nil
	}
	p.start("")
	return nil
}

// start hands the pass's stored run to the runner, with what it holds:
// from now on the run gives it back when it ends.
func (p *pass) start(session string) {
	g, hold, up, spooled := p.g, p.hold, p.upload, p.spooled
	dec := p.dec
	a := Admitted{
		Run: *p.answer.Run, Spec: dec.Spec, Enforcement: dec.Enforcement, Session: session, Workspace: spooled,
		Release: func() {
			hold.release()
			up.release()
		},
	}
	if hold != nil {
		a.TeamConcurrency = hold.limits.Concurrent
	}
	p.keep()
	g.d.Runner.Start(a)
	if live := g.d.Live.Run(a.Run.ID); live != nil {
		p.answer.Run = live
	}
}

// Review is POST /v1/admission/review: a run spec decided, never run.
type Review struct {
	none
	Body Body
}

func (Review) operation() string { return "review" }

// target asks whether the principal may have a spec reviewed.
func (Review) target(ctx context.Context, p *pass) error {
	return p.authorize(ctx, "review", sandgate.AuthzObject{Kind: "review"}, nil)
}

func (r Review) normalize(ctx context.Context, p *pass) error {
	spec, err := sandgate.DecodeRunSpec(r.Body.R)
	if err != nil {
		return err
	}
	n, err := sandgate.Normalize(spec, p.g.d.Admitter.Defaults())
	if err != nil {
		return err
	}
	secrets, err := p.g.secretStates(ctx, n)
	if err != nil {
		return err
	}
	p.input = input(sandgate.OperationReview, p.who.Principal, n, p.g.settings(), nil, secrets)
	return nil
}

func (Review) decide(ctx context.Context, p *pass) error { return p.decide(ctx) }

// record queues the review's event, its record and its decision in one
// payload. The review is answered once the event is queued, not
// committed, but never further ahead of the trail than its bounded
// backlog: under sustained load reviews are answered as fast as they are
// audited.
func (Review) record(ctx context.Context, p *pass) error {
	g, dec := p.g, p.dec
	payload := p.recordPayload()
	for k, v := range sandgate.DecisionPayload(g.d.Masker, dec, false) {
		payload[k] = v
	}
	qctx, cancel := context.WithTimeout(ctx, storeTimeout)
	err := g.d.Recorder.Queue(qctx, sandgate.NewAdmissionReviewed(p.subject(""), p.now(), dec.Allow, payload))
	cancel()
	if err != nil {
		g.d.Logger.Error("audit trail too far behind; review refused", "correlation_id", p.who.CorrelationID, "error", err)
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "the audit trail cannot take the review now; retry later")
	}
	// The answer shows the spec as the runs API does: secrets as their
	// keyed hashes, never echoed in clear.
	dec.Spec = sandgate.Normalized{RunSpec: g.d.Masker.StoredSpec(dec.Spec.RunSpec, dec.Mask)}
	p.answer.Decision = &dec
	return nil
}
