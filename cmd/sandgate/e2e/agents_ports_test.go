package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// buildPortServer builds testdata/portserver statically, for a session to
// serve.
func buildPortServer(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "portserver")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./testdata/portserver")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build portserver: %v: %s", err, b)
	}
	return out
}

// hostListener listens on the host's loopback, where no session may
// reach, and counts the connections it accepts.
func hostListener(t *testing.T) (int, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhost!\n"))
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, &n
}

// servePort starts the port server in session id on port and waits until
// the gateway reaches it.
func servePort(t *testing.T, s *testServer, c *client.Client, token, id string, port int) {
	t.Helper()
	bin, err := os.Open(buildPortServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := c.PutFile(context.Background(), id, "portserver", 0o755, bin); err != nil {
		t.Fatal(err)
	}
	execWait(t, c, id, api.ExecRequest{Command: []string{"sh", "-c", "./portserver " + strconv.Itoa(port) + " >/dev/null 2>&1 &"}})
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, _, body := s.doAs(t, token, "GET", "/v1/sessions/"+id+"/ports/"+strconv.Itoa(port)+"/", "")
		if status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's port never answered: %d %s", status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEndToEndPortPreview: a session (network none) serves HTTP on a port
// the policy admits; the gateway reaches it through the session's agent
// with the caller's token only, never a host port, for HTTP and for a
// WebSocket upgrade, a large body included; every connection is decided
// (operation port) and recorded (port.connection) with its bytes.
func TestEndToEndPortPreview(t *testing.T) {
	hostPort, hostHits := hostListener(t)
	policy := bundleWith(t, func(c map[string]any) {
		c["session_ports"] = map[string]any{"default": []int{8080, hostPort}, "teams": map[string]any{}}
	})
	tokensFile, tok := writeTokensFile(t, authPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile), withEnv("SANDGATE_POLICY_DIR", policy))
	alice := clientAs(t, s, tok["alice"])
	ss := openSession(t, alice, api.SessionRequest{})
	servePort(t, s, alice, tok["alice"], ss.ID, 8080)
	base := "/v1/sessions/" + ss.ID + "/ports/8080"

	// What reached the session: its own path and query, its own host,
	// none of the caller's credentials.
	status, h, body := s.doAs(t, tok["alice"], "GET", base+"/hello/world?x=1", "", "Cookie", "sandgate=secret", "X-Sandgate-Via", "mcp")
	var seen struct {
		Method, URI, Host string
		Header            http.Header
	}
	if status != 200 || json.Unmarshal(body, &seen) != nil {
		t.Fatalf("GET through the port: %d %s", status, body)
	}
	if seen.URI != "/hello/world?x=1" || seen.Host != "127.0.0.1:8080" {
		t.Errorf("the session saw %+v", seen)
	}
	for _, name := range []string{"Authorization", "Cookie", "X-Sandgate-Via"} {
		if v := seen.Header.Get(name); v != "" {
			t.Errorf("the session saw the caller's %s: %q", name, v)
		}
	}
	if h.Get("Set-Cookie") != "" || !strings.HasPrefix(h.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("the answer's headers: %v", h)
	}

	// A WebSocket through the port.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+base+"/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok["alice"]}}})
	if err != nil {
		t.Fatalf("WebSocket through the port: %v", err)
	}
	for _, msg := range []string{"ping", strings.Repeat("x", 100<<10)} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		ws.SetReadLimit(1 << 20)
		_, b, err := ws.Read(ctx)
		if err != nil || string(b) != "echo:"+msg {
			t.Fatalf("WebSocket echo: %v (%d bytes)", err, len(b))
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")

	// Many windows' worth of body, whole.
	status, _, body = s.doAs(t, tok["alice"], "GET", base+"/big?mib=24", "")
	if status != 200 || len(body) != 24<<20 {
		t.Fatalf("a large body: %d, %d bytes", status, len(body))
	}

	// A port the policy does not admit: refused with the rule and its fix.
	status, _, body = s.doAs(t, tok["alice"], "GET", "/v1/sessions/"+ss.ID+"/ports/9999/", "")
	e := apiError(body)
	if status != 403 || e.Error.Code != sandgate.CodePolicyDenied || !strings.Contains(string(body), "session_port_not_admitted") || !strings.Contains(string(body), `"fix"`) {
		t.Errorf("a port not admitted: %d %s", status, body)
	}
	// Without a token, and as another team.
	if status, _, _ := s.doAs(t, "", "GET", base+"/", ""); status != 401 {
		t.Errorf("without a token: %d", status)
	}
	if status, _, _ := s.doAs(t, tok["bob"], "GET", base+"/", ""); status != 404 {
		t.Errorf("another team: %d", status)
	}

	// The trail: each connection decided with operation port, and
	// recorded with its bytes.
	evs := s.waitAuditEvents(t, tok["audrey"], url.Values{"type": {string(sandgate.EventPortConnection)}}, func(evs []sandgate.AuditRecord) bool {
		return len(evs) >= 4
	})
	var big bool
	for _, ev := range evs {
		if ev.Payload["session_id"] != ss.ID || ev.Actor != "alice" {
			t.Errorf("port.connection of %v by %s", ev.Payload["session_id"], ev.Actor)
		}
		if n, _ := ev.Payload["bytes_out"].(float64); n >= 24<<20 {
			big = true
		}
	}
	if !big {
		t.Errorf("no port.connection with the large body's bytes: %+v", evs)
	}
	if hostHits.Load() != 0 {
		t.Errorf("the host's listener was reached %d times", hostHits.Load())
	}
}

// TestPortPreviewHostile: a hostile session cannot use its preview to
// reach anything but its own port: a port of the host's loopback is not
// the sandbox's (nothing answers), a redirect is handed to the caller, not
// followed, and the path cannot name another host. No host port is
// published for a session.
func TestPortPreviewHostile(t *testing.T) {
	hostPort, hostHits := hostListener(t)
	policy := bundleWith(t, func(c map[string]any) {
		c["session_ports"] = map[string]any{"default": []int{8080, hostPort}}
	})
	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", policy))
	for _, network := range []string{"none", "bridge"} {
		t.Run(network, func(t *testing.T) {
			ss := openSession(t, s.Client, api.SessionRequest{RunSpec: sandgate.RunSpec{Network: network}})
			servePort(t, s, s.Client, s.Token, ss.ID, 8080)
			base := "/v1/sessions/" + ss.ID + "/ports/"
			// The host's loopback port, admitted by the policy: the
			// agent dials the sandbox's own 127.0.0.1, where nothing
			// listens on it.
			status, _, body := s.do(t, "GET", base+strconv.Itoa(hostPort)+"/", "")
			if status != http.StatusServiceUnavailable {
				t.Errorf("the host's port through the session: %d %s", status, body)
			}
			// A redirect to the host is the caller's to follow, not the
			// gateway's.
			req, _ := http.NewRequest("GET", s.URL+base+"8080/redirect?to="+url.QueryEscape("http://127.0.0.1:"+strconv.Itoa(hostPort)+"/"), nil)
			req.Header.Set("Authorization", "Bearer "+s.Token)
			hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusFound {
				t.Errorf("redirect: %d", resp.StatusCode)
			}
			// A path that names a host is a path of the session's server.
			status, _, body = s.do(t, "GET", base+"8080/127.0.0.1:"+strconv.Itoa(hostPort)+"/x", "")
			var seen struct{ URI, Host string }
			if status != 200 || json.Unmarshal(body, &seen) != nil || seen.Host != "127.0.0.1:8080" || seen.URI != "/127.0.0.1:"+strconv.Itoa(hostPort)+"/x" {
				t.Errorf("a path naming a host: %d %s", status, body)
			}
			// The session's redirects within itself stay under its
			// preview's prefix.
			req, _ = http.NewRequest("GET", s.URL+base+"8080/redirect?to=/inside", nil)
			req.Header.Set("Authorization", "Bearer "+s.Token)
			if resp, err = hc.Do(req); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if loc := resp.Header.Get("Location"); loc != base+"8080/inside" {
				t.Errorf("a redirect within the session: Location %q", loc)
			}
			// No port of the session's container is published.
			out, err := exec.Command("docker", "port", ss.ContainerID).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "" {
				t.Errorf("docker port %s: %q %v", ss.ContainerID, out, err)
			}
			if _, err := s.Client.DeleteSession(context.Background(), ss.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
	if hostHits.Load() != 0 {
		t.Errorf("the host's listener was reached %d times", hostHits.Load())
	}
}
