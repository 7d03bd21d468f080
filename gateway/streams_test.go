package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate"
)

// The fake executor's streams: a terminal that echoes its input, and a
// port served by an HTTP handler that shows what reached it.

var _ sandgate.SessionStreams = (*fakeExecutor)(nil)

func (e *fakeExecutor) Terminal(_ context.Context, _ string, t sandgate.TerminalSpec) (sandgate.Terminal, error) {
	a, b := net.Pipe()
	term := &echoTerminal{Conn: a, done: make(chan struct{})}
	go func() {
		defer close(term.done)
		defer b.Close()
		r := bufio.NewReader(b)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.TrimSpace(line) == "exit" {
				return
			}
			if _, err := b.Write([]byte("echo:" + line)); err != nil {
				return
			}
		}
	}()
	return term, nil
}

type echoTerminal struct {
	net.Conn
	done    chan struct{}
	mu      sync.Mutex
	resized [2]uint16
}

func (t *echoTerminal) Resize(rows, cols uint16) error {
	t.mu.Lock()
	t.resized = [2]uint16{rows, cols}
	t.mu.Unlock()
	return nil
}
func (t *echoTerminal) Signal(int) error           { return nil }
func (t *echoTerminal) Done() <-chan struct{}      { return t.done }
func (t *echoTerminal) ExitCode() (int, error)     { return 0, nil }
func (t *echoTerminal) Read(b []byte) (int, error) { return t.Conn.Read(b) }

func (e *fakeExecutor) DialPort(_ context.Context, _ string, port int) (net.Conn, error) {
	a, b := net.Pipe()
	go func() {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The body is read before the answer, as a kernel's socket
			// buffer would take it: a pipe has none, and a server that
			// answers and closes first fails the proxy's write.
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Set-Cookie", "session=stolen; Path=/")
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "uri": r.RequestURI, "host": r.Host, "header": r.Header})
		})}
		_ = srv.Serve(&oneConnListener{c: b})
	}()
	return a, nil
}

// oneConnListener accepts one connection, then waits for it to close:
// the server that serves it must not return (and leave its connection
// to a race) before the connection is done.
type oneConnListener struct {
	mu     sync.Mutex
	c      net.Conn
	closed chan struct{}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.closed == nil {
		l.closed = make(chan struct{})
	}
	c, closed := l.c, l.closed
	l.c = nil
	l.mu.Unlock()
	if c == nil {
		<-closed
		return nil, io.EOF
	}
	return &closeSignal{Conn: c, closed: closed}, nil
}

// closeSignal closes its channel when the connection is closed.
type closeSignal struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *closeSignal) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{} }

func openSession(t *testing.T, e *testEnv, token string) string {
	t.Helper()
	r := e.do("POST", "/v1/sessions", token, `{}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	return r.session(t).ID
}

// TestPortProxy: a request to a session's port reaches the session's
// 127.0.0.1:port with its path and query, without the caller's
// credentials; the session's answer sets no cookie and runs sandboxed;
// the connection is decided (operation port), and recorded with its
// bytes and status. A port the policy does not admit is refused with the
// rule and its fix; another team's session is not found.
func TestPortProxy(t *testing.T) {
	e := newEnv(t)
	id := openSession(t, e, tokAlice)
	for _, m := range portMethods {
		r := e.do(m, "/v1/sessions/"+id+"/ports/8080/app/x.js?q=1", tokAlice, `{"a":1}`,
			"Cookie: sandgate=1", "X-Sandgate-Via: mcp", "Proxy-Authorization: Basic eA==")
		if r.status != 200 {
			t.Fatalf("%s: %d %s", m, r.status, r.body)
		}
		var seen struct {
			Method, URI, Host string
			Header            http.Header
		}
		if err := json.Unmarshal(r.body, &seen); err != nil {
			t.Fatal(err)
		}
		if seen.Method != m || seen.URI != "/app/x.js?q=1" || seen.Host != "127.0.0.1:8080" {
			t.Errorf("%s: the session saw %+v", m, seen)
		}
		for _, h := range []string{"Authorization", "Cookie", "X-Sandgate-Via", "Proxy-Authorization", "X-Correlation-Id"} {
			if v := seen.Header.Get(h); v != "" {
				t.Errorf("%s: the session saw %s: %q", m, h, v)
			}
		}
		if r.header.Get("Set-Cookie") != "" || !strings.HasPrefix(r.header.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("%s: answer headers %v", m, r.header)
		}
	}
	in, ok := e.admitter.last(sandgate.OperationPort)
	if !ok || in.Port == nil || in.Port.Number != 8080 || in.Session == nil || in.Session.ID != id {
		t.Errorf("port input: %+v", in)
	}
	conns := e.recorder.ofType(sandgate.EventPortConnection)
	if len(conns) != len(portMethods) {
		t.Fatalf("%d port.connection events, want %d", len(conns), len(portMethods))
	}
	last := conns[len(conns)-1].Payload
	if last["status"] != 200 || last["port"] != 8080 || last["session_id"] != id || last["bytes_out"].(int64) == 0 {
		t.Errorf("port.connection: %+v", last)
	}
	r := e.do("GET", "/v1/sessions/"+id+"/ports/22/", tokAlice, "")
	if r.status != 403 || r.errorCode() != string(sandgate.CodePolicyDenied) || !strings.Contains(string(r.body), "serve on 8080") {
		t.Errorf("a port not admitted: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/sessions/"+id+"/ports/8080/", tokBob, ""); r.status != 404 {
		t.Errorf("another team's session: %d %s", r.status, r.body)
	}
	for _, bad := range []string{"0", "65536", "x"} {
		if r := e.do("GET", "/v1/sessions/"+id+"/ports/"+bad+"/", tokAlice, ""); r.status != 400 {
			t.Errorf("port %s: %d %s", bad, r.status, r.body)
		}
	}
}

// TestTerminalWebSocket: the terminal's bytes travel as binary messages
// both ways, a resize reaches it, its program's exit is sent before the
// close; it is decided with operation terminal and recorded opened and
// closed with the bytes each way and the transcript's digest. Without an
// upgrade, or for another team, it is refused before anything opens.
func TestTerminalWebSocket(t *testing.T) {
	e := newEnv(t)
	id := openSession(t, e, tokAlice)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/v1/sessions/" + id + "/terminal?rows=30&cols=100"
	ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tokAlice}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","rows":40,"cols":120}`)); err != nil {
		t.Fatal(err)
	}
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	typ, b, err := ws.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || string(b) != "echo:hello\n" {
		t.Fatalf("read: %v %v %q", typ, err, b)
	}
	ws.Write(ctx, websocket.MessageBinary, []byte("exit\n"))
	typ, b, err = ws.Read(ctx)
	if err != nil || typ != websocket.MessageText || string(b) != `{"type":"exit","code":0}` {
		t.Fatalf("exit: %v %v %q", typ, err, b)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("close: %v", err)
	}
	in, ok := e.admitter.last(sandgate.OperationTerminal)
	if !ok || in.Session == nil || in.Session.ID != id || in.Request.Command[0] != "sh" {
		t.Errorf("terminal input: %+v", in)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(e.recorder.ofType(sandgate.EventTerminalClosed)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	closed := e.recorder.ofType(sandgate.EventTerminalClosed)
	opened := e.recorder.ofType(sandgate.EventTerminalOpened)
	if len(opened) != 1 || len(closed) != 1 {
		t.Fatalf("terminal events: %d opened, %d closed", len(opened), len(closed))
	}
	p := closed[0].Payload
	if closed[0].Outcome != "exited" || p["bytes_in"].(int64) != int64(len("hello\nexit\n")) || p["bytes_out"].(int64) != int64(len("echo:hello\n")) ||
		p["transcript_sha256"] != sha256Hex("echo:hello\n") || p["exit_code"] != 0 {
		t.Errorf("terminal.closed: %s %+v", closed[0].Outcome, p)
	}
	// The terminal is a run of its session, its transcript the run's
	// artifact (the data says so).
	if p["transcript_artifact"] != "transcript.log" {
		t.Errorf("transcript artifact %v", p["transcript_artifact"])
	}
	if r := e.do("GET", "/v1/runs/"+closed[0].RunID+"/artifacts/transcript.log", tokAuditor, ""); r.status != 200 || string(r.body) != "echo:hello\n" {
		t.Errorf("the transcript: %d %q", r.status, r.body)
	}
	run := e.do("GET", "/v1/runs/"+closed[0].RunID, tokAlice, "").run(t)
	if run.Spec.SessionID != id || run.Outcome == nil || *run.Outcome != sandgate.OutcomeSucceeded || run.ExitCode == nil || *run.ExitCode != 0 {
		t.Errorf("the terminal's run: %+v", run)
	}
	if r := e.do("GET", "/v1/runs/"+closed[0].RunID+"/artifacts", tokBob, ""); r.status != 404 {
		t.Errorf("another team's transcript: %d", r.status)
	}
	if r := e.do("GET", "/v1/sessions/"+id+"/terminal", tokAlice, ""); r.status != 400 {
		t.Errorf("without an upgrade: %d %s", r.status, r.body)
	}
	if _, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tokBob}}}); err == nil || resp == nil || resp.StatusCode != 404 {
		t.Errorf("another team's session: %v", err)
	}
	if _, resp, err := websocket.Dial(ctx, u, nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("without a token: %v", err)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
