package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/sandgate/sandgate"
)

// Terminals and port connections: operations on an open session, each
// decided by policy (operation "terminal" or "port") and recorded like a
// command before anything opens, then opened through the session's agent
// and recorded again when they end (terminal.closed, port.connection).

// Streams opens terminals and port connections in sessions open on this
// node (the executor's sandgate.SessionStreams).
type Streams interface {
	Terminal(ctx context.Context, sessionID string, t sandgate.TerminalSpec) (sandgate.Terminal, error)
	DialPort(ctx context.Context, sessionID string, port int) (net.Conn, error)
}

// Transcripts keeps a terminal's transcript as an artifact of its session.
type Transcripts interface {
	sandgate.BlobStore
	SaveArtifacts(ctx context.Context, runID string, files []sandgate.Artifact) error
}

// Stream is a terminal or a port connection the gate opened. The caller
// copies its bytes through Counted, then calls Close once, which records
// its end.
type Stream struct {
	// Terminal is set for a terminal, Conn for a port connection.
	Terminal sandgate.Terminal
	Conn     net.Conn
	// ID names the stream in the trail (its events' run_id).
	ID string

	closeOnce sync.Once
	close     func(outcome string, extra map[string]any)
	mu        sync.Mutex
	in, out   int64 // bytes to the session, and from it
}

// CountIn and CountOut add n bytes sent to the session and received
// from it.
func (s *Stream) CountIn(n int)  { s.mu.Lock(); s.in += int64(n); s.mu.Unlock() }
func (s *Stream) CountOut(n int) { s.mu.Lock(); s.out += int64(n); s.mu.Unlock() }

// Bytes are the bytes counted each way so far.
func (s *Stream) Bytes() (in, out int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.in, s.out
}

// Close closes the stream and records its end with outcome and extra
// (an HTTP request's status, a terminal's exit).
func (s *Stream) Close(outcome string, extra map[string]any) {
	s.closeOnce.Do(func() {
		if s.Terminal != nil {
			_ = s.Terminal.Close()
		}
		if s.Conn != nil {
			_ = s.Conn.Close()
		}
		s.close(outcome, extra)
	})
}

// Terminal is GET /v1/sessions/{id}/terminal: a terminal in an open
// session, admitted with operation "terminal": input.request is the
// session's admitted spec with the terminal's program as its command.
type Terminal struct {
	none
	Session string
	Spec    sandgate.TerminalSpec
}

func (Terminal) operation() string { return "terminal" }

func (t Terminal) target(ctx context.Context, p *pass) error {
	if err := p.findOpenSession(ctx, t.Session, "session.terminal"); err != nil {
		return err
	}
	return p.g.streamsKept()
}

func (t Terminal) normalize(ctx context.Context, p *pass) error {
	if err := p.g.accepting(); err != nil {
		return err
	}
	spec := p.open.Spec
	spec.Command = t.command()
	return p.streamInput(ctx, sandgate.OperationTerminal, spec, nil)
}

// command is the terminal's program: the request's, or the shell.
func (t Terminal) command() []string {
	if len(t.Spec.Command) > 0 {
		return t.Spec.Command
	}
	return []string{"sh"}
}

func (Terminal) decide(ctx context.Context, p *pass) error { return p.decide(ctx) }

func (t Terminal) record(ctx context.Context, p *pass) error {
	return p.commit(ctx, nil, p.via(map[string]any{"operation": string(sandgate.OperationTerminal), "session_id": t.Session}))
}

// store keeps the terminal as a run of its session, as its commands are:
// listed with them, read like any run, its transcript its artifact.
func (t Terminal) store(ctx context.Context, p *pass) error {
	run := p.storedRun()
	run.Spec.SessionID = t.Session
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if err := p.g.d.Runs.CreateRun(sctx, &run); err != nil {
		p.failed("the terminal could not be stored; nothing was opened", map[string]any{"session_id": t.Session})
		return unavailable(err, "the run store")
	}
	p.run = &run
	return nil
}

func (t Terminal) execute(ctx context.Context, p *pass) error {
	spec := t.Spec
	spec.Command = t.command()
	term, err := p.g.d.Streams.Terminal(ctx, t.Session, spec)
	if err != nil {
		msg := "the terminal could not be opened: " + sandgate.ErrorMessageOf(err)
		p.failed(msg, map[string]any{"session_id": t.Session})
		p.endRun(ctx, sandgate.OutcomeError, nil, &sandgate.ErrorInfo{Code: sandgate.ErrorCodeOf(err), Message: msg})
		return err
	}
	opened := p.now()
	p.run.State, p.run.StartedAt = sandgate.StateRunning, &opened
	p.saveRun(ctx)
	base := p.via(map[string]any{"session_id": t.Session, "command": spec.Command, "rows": spec.Rows, "cols": spec.Cols})
	p.g.d.Recorder.Emit(sandgate.NewTerminalOpened(p.subject(p.id), opened, base))
	transcript := newTranscript(p.dec.Enforcement.TerminalTranscripts, p.g.d.Transcripts)
	s := &Stream{Terminal: &recorded{Terminal: term, t: transcript}, ID: p.id}
	s.close = func(outcome string, extra map[string]any) {
		in, out := s.Bytes()
		payload := map[string]any{"session_id": t.Session, "bytes_in": in, "bytes_out": out,
			"transcript_sha256": transcript.sum(), "duration_ms": p.now().Sub(opened).Milliseconds()}
		if code, err := term.ExitCode(); err == nil && outcome == "exited" {
			payload["exit_code"] = code
		}
		for k, v := range extra {
			payload[k] = v
		}
		if a, err := transcript.keep(context.WithoutCancel(ctx), p.id); err != nil {
			payload["transcript_error"] = shorten(err.Error(), 1024)
		} else if a != nil {
			payload["transcript_artifact"], payload["transcript_bytes"] = a.Path, a.Size
		}
		p.g.d.Recorder.Emit(sandgate.NewTerminalClosed(p.subject(p.id), p.now(), outcome, p.via(payload)))
		p.endTerminal(ctx, outcome, term, out, transcriptSummary(payload))
	}
	p.answer.Stream = s
	p.answer.Run = p.run
	return nil
}

// endTerminal stores the terminal's run as it ended: its program's exit
// (succeeded or failed), cancelled when its client left first, lost when
// its end was not seen.
func (p *pass) endTerminal(ctx context.Context, how string, term sandgate.Terminal, out int64, arts *sandgate.ArtifactSummary) {
	code, err := term.ExitCode()
	var exit *int
	outcome := sandgate.OutcomeCancelled
	switch {
	case how == "exited" && err == nil:
		exit, outcome = &code, sandgate.OutcomeSucceeded
		if code != 0 {
			outcome = sandgate.OutcomeFailed
		}
	case how == "error" || err != nil:
		outcome = sandgate.OutcomeLost
	}
	p.run.Stdout = sandgate.Output{Bytes: out, Encoding: sandgate.EncodingUTF8}
	p.run.Artifacts = arts
	p.endRun(ctx, outcome, exit, nil)
}

// endRun stores the pass's run finished.
func (p *pass) endRun(ctx context.Context, outcome sandgate.Outcome, exit *int, e *sandgate.ErrorInfo) {
	now := p.now()
	r := p.run
	r.State, r.Outcome, r.ExitCode, r.Error, r.FinishedAt = sandgate.StateFinished, outcome, exit, e, &now
	if r.StartedAt != nil {
		r.DurationMS = now.Sub(*r.StartedAt).Milliseconds()
	}
	p.saveRun(ctx)
}

func (p *pass) saveRun(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := p.g.d.Runs.UpdateRun(sctx, p.run); err != nil {
		p.g.d.Logger.Error("store the terminal's run", "run_id", p.run.ID, "error", err)
	}
}

// transcriptSummary is the terminal run's artifact summary: its
// transcript, when kept.
func transcriptSummary(payload map[string]any) *sandgate.ArtifactSummary {
	if _, kept := payload["transcript_artifact"]; !kept {
		return nil
	}
	n, _ := payload["transcript_bytes"].(int64)
	return &sandgate.ArtifactSummary{Count: 1, Bytes: n}
}

// Port is a connection to a port of an open session through the
// gateway (/v1/sessions/{id}/ports/{port}/…), admitted with operation
// "port" and input.port naming the port.
type Port struct {
	none
	Session string
	Port    int
	// Request describes the connection in the trail: an HTTP request's
	// method and path, and whether it is an upgrade.
	Request map[string]any
}

func (Port) operation() string { return "port" }

func (o Port) target(ctx context.Context, p *pass) error {
	if err := p.findOpenSession(ctx, o.Session, "session.port"); err != nil {
		return err
	}
	return p.g.streamsKept()
}

func (o Port) normalize(ctx context.Context, p *pass) error {
	if o.Port < 1 || o.Port > 65535 {
		return sandgate.FieldError("port", "must be a port number from 1 to 65535")
	}
	return p.streamInput(ctx, sandgate.OperationPort, p.open.Spec, &sandgate.PortInput{Number: o.Port})
}

func (Port) decide(ctx context.Context, p *pass) error { return p.decide(ctx) }

func (o Port) record(ctx context.Context, p *pass) error {
	return p.commit(ctx, nil, p.via(map[string]any{"operation": string(sandgate.OperationPort), "session_id": o.Session, "port": o.Port}))
}

func (o Port) execute(ctx context.Context, p *pass) error {
	conn, err := p.g.d.Streams.DialPort(ctx, o.Session, o.Port)
	base := map[string]any{"session_id": o.Session, "port": o.Port}
	for k, v := range o.Request {
		base[k] = v
	}
	if err != nil {
		base["error_code"], base["error"] = string(sandgate.ErrorCodeOf(err)), shorten(sandgate.ErrorMessageOf(err), 1024)
		p.g.d.Recorder.Emit(sandgate.NewPortConnection(p.subject(p.id), p.now(), "failed", p.via(base)))
		return err
	}
	opened := p.now()
	s := &Stream{Conn: conn, ID: p.id}
	s.close = func(outcome string, extra map[string]any) {
		in, out := s.Bytes()
		payload := map[string]any{"bytes_in": in, "bytes_out": out, "duration_ms": p.now().Sub(opened).Milliseconds()}
		for k, v := range base {
			payload[k] = v
		}
		for k, v := range extra {
			payload[k] = v
		}
		p.g.d.Recorder.Emit(sandgate.NewPortConnection(p.subject(p.id), p.now(), outcome, p.via(payload)))
	}
	p.answer.Stream = s
	return nil
}

// streamInput builds the input of a terminal or a port connection: the
// session's admitted spec as policy judges it, the session named.
func (p *pass) streamInput(ctx context.Context, op sandgate.Operation, spec sandgate.Normalized, port *sandgate.PortInput) error {
	ss := p.session
	p.id = p.g.newID()
	sin := &sandgate.SessionInput{ID: ss.ID, IdleTimeoutSeconds: ss.Limits.IdleTimeoutSeconds, MaxLifetimeSeconds: ss.Limits.MaxLifetimeSeconds}
	// The stored secrets the session's spec names, as its commands have.
	secrets, err := p.g.secretStates(ctx, spec)
	if err != nil {
		return err
	}
	p.input = input(op, p.who.Principal, spec, p.g.settings(), sin, secrets)
	p.input.Port = port
	return nil
}

func (g *Gate) streamsKept() error {
	if g.d.Streams == nil {
		return sandgate.Errorf(sandgate.CodeConflict, "this gateway opens no terminals or ports")
	}
	return nil
}

// via adds the caller's surface and client to an event's payload.
func (p *pass) via(payload map[string]any) map[string]any {
	if p.who.Via != "" {
		payload["via"] = p.who.Via
	}
	if c := p.who.Client; c != nil {
		payload["client"] = map[string]any{"name": c.Name, "version": c.Version}
	}
	return payload
}

// recorded is a terminal whose output is hashed, and kept when the
// transcript is.
type recorded struct {
	sandgate.Terminal
	t *transcript
}

func (r *recorded) Read(b []byte) (int, error) {
	n, err := r.Terminal.Read(b)
	r.t.write(b[:n])
	return n, err
}

// transcript is a terminal's output: always its SHA-256, and its bytes
// in a temporary file when they are kept.
type transcript struct {
	mu    sync.Mutex
	h     hash.Hash
	file  *spoolFile
	store Transcripts
	err   error
}

// TranscriptPath is a terminal's transcript among its run's artifacts.
const TranscriptPath = "transcript.log"

// maxTranscriptBytes bounds a kept transcript; what comes after is
// hashed, not kept, and the artifact says it was cut.
const maxTranscriptBytes = 64 << 20

func newTranscript(keep bool, store Transcripts) *transcript {
	t := &transcript{h: sha256.New(), store: store}
	if keep && store != nil {
		t.file, t.err = createTemp()
	}
	return t
}

func (t *transcript) write(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.h.Write(b)
	if t.file != nil && t.err == nil && t.file.size+int64(len(b)) <= maxTranscriptBytes {
		t.err = t.file.write(b)
	}
}

func (t *transcript) sum() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return hex.EncodeToString(t.h.Sum(nil))
}

// keep stores the transcript as the artifact transcript.log of the
// terminal's run; nil when it is not kept.
func (t *transcript) keep(ctx context.Context, id string) (*sandgate.Artifact, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.file == nil {
		return nil, t.err
	}
	defer t.file.remove()
	if t.err != nil {
		return nil, t.err
	}
	r, err := t.file.reader()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sum, size, err := t.store.PutBlob(cctx, r)
	if err != nil {
		return nil, err
	}
	a := sandgate.Artifact{Path: TranscriptPath, Size: size, SHA256: sum, Mode: 0o600}
	if err := t.store.SaveArtifacts(cctx, id, []sandgate.Artifact{a}); err != nil {
		return nil, err
	}
	return &a, nil
}

// spoolFile is a transcript's bytes on the gateway's disk.
type spoolFile struct {
	f    *os.File
	size int64
}

func createTemp() (*spoolFile, error) {
	f, err := os.CreateTemp("", "sandgate-transcript-*")
	if err != nil {
		return nil, err
	}
	return &spoolFile{f: f}, nil
}

func (s *spoolFile) write(b []byte) error {
	n, err := s.f.Write(b)
	s.size += int64(n)
	return err
}

func (s *spoolFile) reader() (io.Reader, error) {
	_, err := s.f.Seek(0, io.SeekStart)
	return s.f, err
}

func (s *spoolFile) remove() {
	_ = s.f.Close()
	_ = os.Remove(s.f.Name())
}
