package gateway

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
)

// The gateway's side of the one gate (package admission): handlers build
// a request from what HTTP says (the caller, the target in the path, the
// body unread) and call Gate.Admit; the gate drives the gateway's live
// runs and sessions through executorSide and its disk through spooler.

// admit takes a request of c's through the gate. When the gate refuses
// it before its body was read to the end, the rest of the body gets
// drainWait at most: net/http reads up to 256 KiB of an unread body to
// keep the connection for the next request, and a stalled client would
// hold the handler for that read until the server's read timeout.
func (s *web) admit(c echo.Context, r admission.Request) (admission.Answer, error) {
	ans, err := s.gate.Admit(c.Request().Context(), caller(c), r)
	if err != nil {
		if b, ok := c.Get(keyBody).(*bodyReader); ok && !b.eof {
			_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Now().Add(drainWait))
		}
	}
	return ans, err
}

// drainWait bounds how long the rest of a refused request's body may
// take to arrive before the connection is closed.
const drainWait = time.Second

// caller is the request's caller as the gate takes it.
func caller(c echo.Context) admission.Caller {
	via, client := viaOf(c)
	return admission.Caller{Principal: principal(c), SignIn: signIn(c), CorrelationID: correlationID(c), Via: via, Client: client,
		Origin: map[string]any{"method": c.Request().Method, "path": recordedPath(c), "source": c.RealIP()}}
}

// requestBody is the request's body for the gate, unread: its declared
// size, a multipart body's boundary, and the connection's read deadline
// for the uploads' minimum rate.
func requestBody(c echo.Context) (admission.Body, error) {
	req := c.Request()
	br := &bodyReader{r: req.Body}
	b := admission.Body{R: br, Size: req.ContentLength}
	if req.Body == nil || req.Body == http.NoBody {
		b.R, br.eof = http.NoBody, true
	}
	c.Set(keyBody, br)
	if isMultipart(req) {
		_, params, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
		if b.Boundary = params["boundary"]; b.Boundary == "" {
			return b, sandgate.FieldError("Content-Type", "multipart/form-data needs a boundary")
		}
	}
	rc := http.NewResponseController(c.Response())
	b.SetReadDeadline = rc.SetReadDeadline
	return b, nil
}

// keyBody is where requestBody leaves the body's reader for admit.
const keyBody = "sandgate.body"

// bodyReader reads a request's body, a body past the gateway's limit
// (http.MaxBytesReader's) as TOO-LARGE, and knows whether it was read to
// its end.
type bodyReader struct {
	r   io.Reader
	eof bool
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return n, sandgate.Errorf(sandgate.CodeTooLarge, "body exceeds %d bytes", mbe.Limit-1)
	}
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// executorSide is what the gate hands admitted work to and reads live
// state from: this node's runs and sessions.
type executorSide struct {
	runs     *runs
	sessions *sessions
}

var (
	_ admission.Runner = executorSide{}
	_ admission.Live   = executorSide{}
)

// Run is the run as it stands while it executes here.
func (x executorSide) Run(id string) *sandgate.Run {
	if lr := x.runs.live.get(id); lr != nil {
		r := lr.snapshot()
		return &r
	}
	return nil
}

// Session is the session open here, with its admitted spec.
func (x executorSide) Session(id string) *admission.LiveSession {
	if l := x.sessions.live.get(id); l != nil {
		return &admission.LiveSession{Session: l.snapshot(), Spec: l.spec}
	}
	return nil
}

// Start starts an admitted run or command.
func (x executorSide) Start(a admission.Admitted) { x.runs.start(a) }

// Open opens an admitted session.
func (x executorSide) Open(ctx context.Context, a admission.AdmittedSession) (*sandgate.Session, error) {
	return x.sessions.open(ctx, a)
}

// Cancel stops a run executing here.
func (x executorSide) Cancel(ctx context.Context, run *sandgate.Run) (*sandgate.Run, error) {
	return x.runs.cancel(ctx, run)
}

// End ends a session open here.
func (x executorSide) End(ctx context.Context, id string) (*sandgate.Session, error) {
	return x.sessions.delete(ctx, id)
}

// PutFiles writes into a session open here.
func (x executorSide) PutFiles(ctx context.Context, id string, up sandgate.FileUpload) (sandgate.FileDigest, error) {
	return x.sessions.putFiles(ctx, id, up)
}

// GetFiles reads out of a session open here.
func (x executorSide) GetFiles(ctx context.Context, id, path string, w func(kind string) (io.Writer, error)) (sandgate.FileDigest, error) {
	return x.sessions.getFiles(ctx, id, path, w)
}

// newGate builds the gate over the gateway's parts.
func newGate(cfg Config, d Deps, mask sandgate.Masker, m *Metrics, teams *admission.Teams, x executorSide, accepting func() error) (*admission.Gate, error) {
	keys := d.Keys
	if keys == nil {
		keys, _ = d.Runs.(sandgate.IdempotencyKeys)
	}
	var slots admission.Slots
	if d.Cluster != nil {
		slots = d.Cluster
	}
	up := cfg.Uploads
	up.MaxBytes = cfg.MaxWorkspaceBytes
	var secrets admission.Secrets
	if d.Secrets != nil {
		secrets = d.Secrets
	}
	return admission.New(admission.Config{
		Node: cfg.Node, AirGapped: cfg.AirGapped, MountRoots: cfg.MountRoots,
		Callbacks: len(cfg.CallbackKey) > 0, Sessions: d.keepsSessions(), Uploads: up,
		Capacity: cfg.capacity(),
	}, admission.Deps{
		Admitter: d.Admitter, Authorizer: d.Authorizer, Recorder: d.Recorder, Runs: d.Runs, Keys: keys, Sessions: d.Sessions, Approvals: d.Approvals,
		Artifacts: d.Artifacts, Slots: slots, Live: x, Runner: x, Streams: d.streams(), Transcripts: d.transcripts(),
		Workspaces: spooler{dir: cfg.UploadDir, maxBytes: cfg.MaxWorkspaceBytes, maxUnpacked: cfg.MaxWorkspaceUnpackedBytes},
		Masker:     mask, Observer: m, Clock: d.Clock, IDs: d.IDs, Logger: d.Logger,
		Accepting: accepting, Secrets: secrets,
	}, teams)
}
