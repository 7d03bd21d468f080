package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
)

// streamRoutes are a session's terminal (a WebSocket over a pseudo-
// terminal of the sandbox) and its ports (HTTP and WebSocket upgrades
// proxied to 127.0.0.1 in the sandbox through its agent). Each is opened
// through the gate, which decides it (operation terminal or port),
// records it before it opens and again when it ends.
type streamRoutes struct{ *web }

// maxTerminalMessage bounds a terminal message from the client: input,
// or a control message.
const maxTerminalMessage = 64 << 10

// terminalControl is a text message of the terminal's WebSocket: a
// resize or a signal from the client, the exit from the gateway.
type terminalControl struct {
	Type   string `json:"type"`
	Rows   uint16 `json:"rows,omitempty"`
	Cols   uint16 `json:"cols,omitempty"`
	Signal string `json:"signal,omitempty"`
	Code   *int   `json:"code,omitempty"`
}

// terminalSignals are the signals a client may send a terminal's
// process group.
var terminalSignals = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "TERM": 15, "WINCH": 28}

// terminal is GET /v1/sessions/{id}/terminal: admitted, then upgraded to
// a WebSocket whose binary messages are the terminal's bytes either way
// and whose text messages are controls (terminalControl).
func (s streamRoutes) terminal(c echo.Context) error {
	if err := checkQuery(c, "rows", "cols"); err != nil {
		return err
	}
	rows, err := querySize(c, "rows", 24)
	if err != nil {
		return err
	}
	cols, err := querySize(c, "cols", 80)
	if err != nil {
		return err
	}
	if !isWebSocket(c.Request()) {
		return sandgate.FieldError("Upgrade", "a terminal is a WebSocket: the request must ask to upgrade to websocket")
	}
	ans, err := s.admit(c, admission.Terminal{Session: c.Param("id"), Spec: sandgate.TerminalSpec{Rows: rows, Cols: cols}})
	if err != nil {
		return err
	}
	st := ans.Stream
	longLived(c)
	ws, err := websocket.Accept(c.Response(), c.Request(), nil)
	if err != nil {
		st.Close("error", map[string]any{"error": shorten(err.Error(), 1024)})
		return nil
	}
	ws.SetReadLimit(maxTerminalMessage)
	outcome := pumpTerminal(c.Request().Context(), ws, st)
	st.Close(outcome, nil)
	return nil
}

// pumpTerminal copies the terminal's output to ws and ws's input to the
// terminal until either ends, and says how it ended: "exited" (its
// program), "closed" (its client) or "error".
func pumpTerminal(ctx context.Context, ws *websocket.Conn, st *admission.Stream) string {
	term := st.Terminal
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var left atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		// Whether the client left is known before the terminal is
		// closed, which is what ends the output's copy below.
		if readInput(ctx, ws, st) {
			left.Store(true)
		}
		_ = term.Close()
	}()
	buf := make([]byte, 32<<10)
	outcome := "exited"
	for {
		n, rerr := term.Read(buf)
		if n > 0 {
			st.CountOut(n)
			if err := ws.Write(ctx, websocket.MessageBinary, buf[:n]); err != nil {
				outcome = "closed"
				break
			}
		}
		if rerr != nil {
			break
		}
	}
	if left.Load() {
		// The client left first: its leaving hung the terminal up.
		outcome = "closed"
	}
	if outcome == "exited" {
		<-term.Done()
		code, err := term.ExitCode()
		if err != nil {
			outcome = "error"
		}
		b, _ := json.Marshal(terminalControl{Type: "exit", Code: &code})
		_ = ws.Write(ctx, websocket.MessageText, b)
		_ = ws.Close(websocket.StatusNormalClosure, "the terminal's program exited")
	} else {
		_ = ws.CloseNow()
	}
	_ = term.Close()
	cancel()
	wg.Wait()
	return outcome
}

// readInput gives the terminal what the client sends, until it leaves
// (true) or the terminal ends (false); the caller then closes the
// terminal, which ends the output's copy.
func readInput(ctx context.Context, ws *websocket.Conn, st *admission.Stream) (clientLeft bool) {
	term := st.Terminal
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			select {
			case <-term.Done():
				return false
			default:
				return ctx.Err() == nil
			}
		}
		if typ == websocket.MessageBinary {
			st.CountIn(len(b))
			if _, err := term.Write(b); err != nil {
				return false
			}
			continue
		}
		var m terminalControl
		if json.Unmarshal(b, &m) != nil {
			_ = ws.Close(websocket.StatusUnsupportedData, "a text message is a JSON control: resize or signal")
			return true
		}
		switch m.Type {
		case "resize":
			if m.Rows > 0 && m.Cols > 0 && m.Rows <= maxTerminalSize && m.Cols <= maxTerminalSize {
				_ = term.Resize(m.Rows, m.Cols)
			}
		case "signal":
			if sig, ok := terminalSignals[m.Signal]; ok {
				_ = term.Signal(sig)
			}
		}
	}
}

// maxTerminalSize bounds a terminal's rows and columns.
const maxTerminalSize = 1000

func querySize(c echo.Context, name string, def uint16) (uint16, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxTerminalSize {
		return 0, sandgate.FieldError(name, "must be an integer from 1 to %d", maxTerminalSize)
	}
	return uint16(n), nil
}

func isWebSocket(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// portMethods are the methods a session's port is served with.
var portMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// longLived clears the deadlines the server set on the connection: a
// terminal or a WebSocket to a session's port lasts as long as its
// client.
func longLived(c echo.Context) {
	rc := http.NewResponseController(c.Response())
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}

// portRoute is where a session's port is served; the rest of the path
// is the path asked of the session.
const portRoute = "/sessions/:id/ports/:port/*"

// port is ANY /v1/sessions/{id}/ports/{port}/…: one HTTP request (or a
// WebSocket upgrade) to 127.0.0.1:{port} in the session, over a
// connection its agent makes, admitted and recorded as one connection.
// The caller's credentials never reach the session, and what the
// session answers cannot act as the gateway's origin.
func (s streamRoutes) port(c echo.Context) error {
	n, err := strconv.Atoi(c.Param("port"))
	if err != nil || n < 1 || n > 65535 {
		return sandgate.FieldError("port", "must be a port number from 1 to 65535")
	}
	return s.proxyPort(c, n, "/v1/sessions/"+c.Param("id")+"/ports/"+strconv.Itoa(n))
}

// proxyPort serves the request with port n of the session, admitted as
// the caller's connection; prefix is where the session's root is, to
// which its absolute redirects are moved.
func (s streamRoutes) proxyPort(c echo.Context, n int, prefix string) error {
	req := c.Request()
	path := "/" + c.Param("*")
	upgrade := headerHasToken(req.Header, "Connection", "upgrade")
	ans, err := s.admit(c, admission.Port{Session: c.Param("id"), Port: n,
		Request: map[string]any{"method": req.Method, "path": shorten(path, 1024), "upgrade": upgrade}})
	if err != nil {
		return err
	}
	st := ans.Stream
	if upgrade {
		longLived(c)
	}
	status := 0
	conn := &countedConn{Conn: st.Conn, st: st}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(n)), Path: path, RawQuery: req.URL.RawQuery}
			pr.Out.Host = pr.Out.URL.Host
			withoutCredentials(pr.Out.Header)
		},
		Transport: &http.Transport{
			// The one connection the gate opened: the proxy never dials.
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				return conn.take()
			},
			DisableKeepAlives: true, DisableCompression: true,
		},
		ModifyResponse: func(res *http.Response) error {
			status = res.StatusCode
			confine(res.Header)
			// The session's own absolute paths are under its preview.
			if loc := res.Header.Get("Location"); strings.HasPrefix(loc, "/") && !strings.HasPrefix(loc, "//") {
				res.Header.Set("Location", prefix+loc)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			// The session's program took the connection and did not
			// answer HTTP: the answer is the gateway's, in its shape.
			status = http.StatusServiceUnavailable
			edge{web: s.web}.handleError(sandgate.WrapError(sandgate.CodeUnavailable, err, "the session's port %d did not answer", n), c)
		},
	}
	proxy.ServeHTTP(c.Response(), req)
	outcome := "done"
	if status == http.StatusServiceUnavailable || status == 0 {
		outcome = "failed"
	}
	st.Close(outcome, map[string]any{"status": status})
	return nil
}

// withoutCredentials strips what authenticates the caller to sandgate
// from a request bound for a session: its token is not the session's.
func withoutCredentials(h http.Header) {
	h.Del("Authorization")
	h.Del("Cookie")
	h.Del("Proxy-Authorization")
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-sandgate-") || strings.EqualFold(k, "X-Correlation-ID") {
			h.Del(k)
		}
	}
}

// confine makes a session's answer unable to act as the gateway's origin:
// its pages run sandboxed in an opaque origin (they cannot read the
// console or call the API with a browser's credentials), and it sets no
// cookie on the gateway's domain.
func confine(h http.Header) {
	h.Del("Set-Cookie")
	h.Del("Set-Cookie2")
	h.Del("Access-Control-Allow-Origin")
	h.Del("Access-Control-Allow-Credentials")
	h.Set("Content-Security-Policy", "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// countedConn counts a port connection's bytes each way, and is dialled
// once.
type countedConn struct {
	net.Conn
	st    *admission.Stream
	mu    sync.Mutex
	taken bool
}

func (c *countedConn) take() (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken {
		return nil, errors.New("the session's connection was used already")
	}
	c.taken = true
	return c, nil
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.st.CountOut(n)
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.st.CountIn(n)
	return n, err
}

// streams is the executor's terminals and ports, nil when it has none.
func (d Deps) streams() admission.Streams {
	if x, ok := d.Executor.(sandgate.SessionStreams); ok && d.keepsSessions() {
		return x
	}
	return nil
}

// transcripts keeps terminals' transcripts in the artifact store.
func (d Deps) transcripts() admission.Transcripts {
	if d.Artifacts == nil {
		return nil
	}
	return d.Artifacts
}

// mcpRoute is the MCP server's streamable HTTP transport.
const mcpRoute = "/mcp"

// mountMCP serves Deps.MCP at /v1/mcp for every authenticated principal:
// what each tool may do is decided by the API route it calls, with the
// caller's own token, in process.
func (s *Server) mountMCP(v1 *authedRoutes) {
	if s.d.MCP == nil {
		return
	}
	mcp := s.d.MCP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.echo.ServeHTTP(w, r)
	}), s.cfg.BodyLimit)
	h := func(c echo.Context) error {
		w := &errorShaper{w: c.Response()}
		mcp.ServeHTTP(w, c.Request())
		if w.status != 0 {
			return &sandgate.Error{Code: api.CodeForStatus(w.status), Message: "MCP: " + strings.TrimSpace(w.body.String())}
		}
		return nil
	}
	// The endpoint itself asks the policy (action mcp); each tool's call
	// then goes through its own route and asks again.
	mayUse := s.edge.authorize("mcp", "mcp", false)
	for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		v1.add(m, mcpRoute, h, mayUse)
	}
}

// errorShaper passes an answer on, except an error answer (4xx, 5xx),
// which it keeps for the gateway to answer in its error shape: the MCP
// transport's own refusals (a missing Accept, an unknown session) are
// plain text.
type errorShaper struct {
	w      http.ResponseWriter
	status int
	body   strings.Builder
}

func (e *errorShaper) Header() http.Header { return e.w.Header() }

func (e *errorShaper) WriteHeader(code int) {
	if code >= 400 {
		e.status = code
		e.w.Header().Del("Content-Type")
		e.w.Header().Del("Content-Length")
		return
	}
	e.w.WriteHeader(code)
}

func (e *errorShaper) Write(b []byte) (int, error) {
	if e.status != 0 {
		if e.body.Len() < 1024 {
			e.body.Write(b[:min(len(b), 1024-e.body.Len())])
		}
		return len(b), nil
	}
	return e.w.Write(b)
}

// Flush sends what was written: MCP answers are streams of events.
func (e *errorShaper) Flush() {
	if f, ok := e.w.(http.Flusher); ok && e.status == 0 {
		f.Flush()
	}
}
