package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
)

// terminal dials a session's terminal as token.
func terminal(t *testing.T, s *testServer, token, id, query string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(s.URL, "http") + "/v1/sessions/" + id + "/terminal" + query
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
}

// screen reads a terminal's output until it holds want.
type screen struct {
	ws  *websocket.Conn
	out bytes.Buffer
}

func (sc *screen) until(t *testing.T, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !strings.Contains(sc.out.String(), want) {
		typ, b, err := sc.ws.Read(ctx)
		if err != nil {
			t.Fatalf("the terminal ended before %q: %v\n%s", want, err, sc.out.String())
		}
		if typ == websocket.MessageBinary {
			sc.out.Write(b)
		} else {
			sc.out.WriteString("\n[control " + string(b) + "]\n")
		}
	}
}

func (sc *screen) send(t *testing.T, typ websocket.MessageType, s string) {
	t.Helper()
	if err := sc.ws.Write(context.Background(), typ, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

// TestEndToEndTerminal: a terminal on a session is a pseudo-terminal of
// the sandbox, the session's shell as its user in its workdir; resize and
// Ctrl-C reach it; its exit code comes back; it is decided (operation
// terminal) and recorded opened and closed, with the bytes each way and
// the transcript's SHA-256, and the transcript is kept as the session's
// artifact when the data says so, byte for byte.
func TestEndToEndTerminal(t *testing.T) {
	policy := bundleWith(t, func(c map[string]any) { c["terminal_transcripts"] = true })
	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", policy))
	ss := openSession(t, s.Client, api.SessionRequest{RunSpec: sandgate.RunSpec{Env: map[string]string{"GREETING": "hi-from-env"}}})
	ws, _, err := terminal(t, s, s.Token, ss.ID, "?rows=30&cols=100")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	sc := &screen{ws: ws}
	sc.send(t, websocket.MessageBinary, "test -t 0 && echo TTY-$((1+1)); id -u; pwd; echo $GREETING; stty size\n")
	sc.until(t, "30 100\r\n")
	for _, want := range []string{"TTY-2", "10001", "/workspace", "hi-from-env"} {
		if !strings.Contains(sc.out.String(), want) {
			t.Errorf("the terminal's output lacks %q:\n%s", want, sc.out.String())
		}
	}
	sc.send(t, websocket.MessageText, `{"type":"resize","rows":50,"cols":132}`)
	sc.send(t, websocket.MessageBinary, "stty size\n")
	sc.until(t, "50 132\r\n")
	// Ctrl-C interrupts the foreground program, not the shell.
	sc.send(t, websocket.MessageBinary, "sleep 60; echo SL$((0))EPT\n")
	time.Sleep(300 * time.Millisecond)
	sc.send(t, websocket.MessageBinary, "\x03")
	sc.send(t, websocket.MessageBinary, "echo AFTER-$((3*3))\n")
	sc.until(t, "AFTER-9\r\n")
	if strings.Contains(sc.out.String(), "SL0EPT") {
		t.Error("Ctrl-C did not interrupt sleep")
	}
	sc.send(t, websocket.MessageBinary, "exit 7\n")
	sc.until(t, `[control {"type":"exit","code":7}]`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("the close: %v", err)
	}
	evs := s.waitAuditEvents(t, s.Token, url.Values{"type": {string(sandgate.EventTerminalClosed)}}, func(evs []sandgate.AuditRecord) bool { return len(evs) == 1 })
	closed := evs[0]
	p := closed.Payload
	if closed.Outcome != "exited" || p["exit_code"] != float64(7) || p["session_id"] != ss.ID || p["bytes_in"].(float64) == 0 || p["bytes_out"].(float64) == 0 {
		t.Errorf("terminal.closed: %s %+v", closed.Outcome, p)
	}
	decided := s.auditEvents(t, s.Token, url.Values{"run_id": {closed.RunID}})
	for _, typ := range []sandgate.EventType{sandgate.EventRunRequested, sandgate.EventAdmissionAllowed, sandgate.EventTerminalOpened, sandgate.EventTerminalClosed} {
		if !hasEvent(decided, typ) {
			t.Errorf("the terminal's events lack %s: %s", typ, eventTypes(decided))
		}
	}
	// The terminal is a run of the session; its transcript is the run's
	// artifact, byte for byte what the terminal showed, with the digest
	// the trail holds.
	run, err := s.Client.Run(context.Background(), closed.RunID)
	if err != nil || run.Spec.SessionID != ss.ID || outcomeOf(run) != sandgate.OutcomeFailed || run.ExitCode == nil || *run.ExitCode != 7 {
		t.Errorf("the terminal's run: %+v %v", run, err)
	}
	var transcript bytes.Buffer
	if _, err := s.Client.Artifact(context.Background(), closed.RunID, "transcript.log", &transcript); err != nil {
		t.Fatalf("the transcript: %v", err)
	}
	body := transcript.Bytes()
	sum := sha256.Sum256(body)
	if !strings.Contains(string(body), "AFTER-9") || hex.EncodeToString(sum[:]) != p["transcript_sha256"] || p["transcript_artifact"] != "transcript.log" {
		t.Errorf("the transcript: %d bytes, sha256 %x, trail %v %v", len(body), sum, p["transcript_sha256"], p["transcript_artifact"])
	}
	shown, _, _ := strings.Cut(sc.out.String(), "\n[control ")
	if string(body) != shown {
		t.Errorf("the transcript (%d bytes) is not what the terminal showed (%d bytes)", len(body), len(shown))
	}
}

// TestTerminalRefused: a policy refuses terminals for a team (403 with
// the rule and its fix, recorded, before any upgrade); another team's
// session is not found; no token, no terminal; a session without an agent
// has none.
func TestTerminalRefused(t *testing.T) {
	policy := bundleWith(t, func(c map[string]any) {
		c["terminals"] = map[string]any{"default": true, "teams": map[string]any{"beta": false}}
	})
	tokensFile, tok := writeTokensFile(t, authPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile), withEnv("SANDGATE_POLICY_DIR", policy))
	alice, bob := clientAs(t, s, tok["alice"]), clientAs(t, s, tok["bob"])
	aliceSession := openSession(t, alice, api.SessionRequest{})
	bobSession := openSession(t, bob, api.SessionRequest{})
	_, resp, err := terminal(t, s, tok["bob"], bobSession.ID, "")
	if err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("bob's terminal: %v %v", resp, err)
	}
	denied := s.waitAuditEvents(t, tok["audrey"], url.Values{"type": {string(sandgate.EventAdmissionDenied)}, "actor": {"bob"}}, func(evs []sandgate.AuditRecord) bool { return len(evs) == 1 })
	if denied[0].Payload["operation"] != "terminal" || !strings.Contains(string(mustJSON(t, denied[0].Payload)), "terminal_not_allowed") {
		t.Errorf("admission.denied: %+v", denied[0].Payload)
	}
	if _, resp, err := terminal(t, s, tok["bob"], aliceSession.ID, ""); err == nil || resp == nil || resp.StatusCode != 404 {
		t.Errorf("another team's session: %v %v", resp, err)
	}
	if _, resp, err := terminal(t, s, "", aliceSession.ID, ""); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("without a token: %v %v", resp, err)
	}
	ws, _, err := terminal(t, s, tok["alice"], aliceSession.ID, "")
	if err != nil {
		t.Fatalf("alice's terminal: %v", err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	closed := s.waitAuditEvents(t, tok["audrey"], url.Values{"type": {string(sandgate.EventTerminalClosed)}}, func(evs []sandgate.AuditRecord) bool { return len(evs) == 1 })
	if closed[0].Outcome != "closed" {
		t.Errorf("a terminal its client left: %s", closed[0].Outcome)
	}
}

// TestSessionShellTmux: `sandgate session shell ID` in a real terminal
// (tmux): typed keys reach the session's shell, its output the screen,
// its exit code is the command's, and the local terminal is restored
// (canonical mode, echo) when it exits.
func TestSessionShellTmux(t *testing.T) {
	requireTool(t, "tmux")
	s := startServer(t)
	ss := openSession(t, s.Client, api.SessionRequest{})
	bin := executortest.AgentBinary(t)
	name := "sgshell-" + ss.ID[len(ss.ID)-8:]
	script := "SANDGATE_URL=" + s.URL + " SANDGATE_TOKEN=" + s.Token + " " + bin + " session shell " + ss.ID +
		"; echo EXIT=$?; echo TTYSTATE: $(stty -a | tr ' ' '\\n' | grep -E '^-?(icanon|echo)$'); sleep 600"
	tmux := func(args ...string) string {
		out, err := exec.Command("tmux", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v %s", args, err, out)
		}
		return string(out)
	}
	tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "sh", "-c", script)
	t.Cleanup(func() { exec.Command("tmux", "kill-session", "-t", name).Run() })
	pane := func(want string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			screen := tmux("capture-pane", "-p", "-t", name)
			if strings.Contains(screen, want) {
				return screen
			}
			if time.Now().After(deadline) {
				t.Fatalf("the screen never showed %q:\n%s", want, screen)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	pane("built-in shell")
	tmux("send-keys", "-t", name, "echo SIX-$((6*7)); stty size", "Enter")
	pane("SIX-42")
	pane("40 120")
	tmux("send-keys", "-t", name, "sleep 60", "Enter")
	time.Sleep(300 * time.Millisecond)
	tmux("send-keys", "-t", name, "C-c")
	tmux("send-keys", "-t", name, "echo INT-$((2+2))", "Enter")
	pane("INT-4")
	tmux("send-keys", "-t", name, "exit 5", "Enter")
	pane("EXIT=5")
	screen := pane("TTYSTATE:")
	_, state, _ := strings.Cut(screen, "TTYSTATE:")
	state, _, _ = strings.Cut(state, "\n")
	if strings.TrimSpace(state) != "icanon echo" {
		t.Errorf("the local terminal was not restored: %q\n%s", state, screen)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
