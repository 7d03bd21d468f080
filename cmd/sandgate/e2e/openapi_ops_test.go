package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/secrets"
)

// The principals of TestEndToEndOpenAPI: authPrincipals and an approver of
// another team.
var openapiPrincipals = append(append([]authPrincipal{}, authPrincipals...),
	authPrincipal{"carol", "ops", []sandgate.Role{sandgate.RoleApprover}})

// openapiSecretDestination is where the test's secret may be sent; no
// run of the test goes there.
const openapiSecretDestination = "api.example.test:443"

// openapiBundleEdit sets up the data the newer operations need: secret
// demo for team alpha, and approval of team alpha's memory above the
// maximum, up to twice it (maxMB is set to the maximum).
func openapiBundleEdit(c map[string]any, maxMB *int) {
	*maxMB = int(c["maxima"].(map[string]any)["memory_mb"].(float64))
	c["approvals"].(map[string]any)["resources"] = map[string]any{
		"default": map[string]any{}, "teams": map[string]any{"alpha": map[string]any{"memory_mb": 2 * *maxMB}},
	}
	c["egress_destinations"] = map[string]any{"default": []any{openapiSecretDestination}, "teams": map[string]any{}}
	c["secrets"] = map[string]any{"demo": map[string]any{"teams": []any{"alpha"}, "destinations": []any{openapiSecretDestination},
		"header": "Authorization", "format": "Bearer {value}", "env": "DEMO_TOKEN"}}
}

// openapiSecretsKey writes a secrets key file (key k1) and returns its path.
func openapiSecretsKey(t *testing.T) string {
	t.Helper()
	line, err := secrets.NewKeyLine("k1")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "secrets.keys")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantFunc sends a request through the checker and requires its status.
type wantFunc func(r request, status int) []byte

// openapiSecrets drives putSecret (created, then replaced), listSecrets
// and deleteSecret, and their refusals.
func openapiSecrets(tok map[string]string, want wantFunc) {
	want(request{method: "PUT", path: "/v1/secrets/demo", token: tok["sam"], body: `{"value":"first"}`}, 201)
	want(request{method: "PUT", path: "/v1/secrets/demo", token: tok["adam"], body: `{"value":"second"}`}, 200)
	want(request{method: "PUT", path: "/v1/secrets/demo", token: tok["alice"], body: `{"value":"mine"}`}, 403)
	want(request{method: "PUT", path: "/v1/secrets/Bad.Name", token: tok["sam"], body: `{"value":"x"}`}, 400)
	want(request{method: "GET", path: "/v1/secrets", token: tok["sam"]}, 200)
	want(request{method: "DELETE", path: "/v1/secrets/demo", token: tok["sam"]}, 204)
	want(request{method: "DELETE", path: "/v1/secrets/demo", token: tok["sam"]}, 404)
}

// openapiApprovals drives listApprovals, getApproval, approveApproval and
// denyApproval: alice asks for memory above the maximum twice; carol
// approves the first and denies the second.
func openapiApprovals(t *testing.T, tok map[string]string, maxMB int, want wantFunc) {
	t.Helper()
	ask := func() string {
		var run api.RunView
		body := want(request{method: "POST", path: "/v1/runs", token: tok["alice"],
			body: `{"command":["echo","approved"],"resources":{"memory_mb":` + strconv.Itoa(maxMB+1) + `}}`}, 202)
		if err := json.Unmarshal(body, &run); err != nil || run.State != sandgate.StatePendingApproval || run.Approval == nil {
			t.Fatalf("a run above the maximum = %s, %v", body, err)
		}
		return run.Approval.ID
	}
	first := ask()
	want(request{method: "GET", path: "/v1/approvals?status=pending", token: tok["audrey"]}, 200)
	want(request{method: "GET", path: "/v1/approvals/" + first, token: tok["alice"]}, 200)
	want(request{method: "GET", path: "/v1/approvals/" + first, token: tok["bob"]}, 404)
	want(request{method: "POST", path: "/v1/approvals/" + first + "/approve", token: tok["alice"], body: `{}`}, 403)
	want(request{method: "POST", path: "/v1/approvals/" + first + "/approve", token: tok["carol"], body: `{"comment":"ticket OPS-1"}`}, 200)
	second := ask()
	want(request{method: "POST", path: "/v1/approvals/" + second + "/deny", token: tok["carol"], body: `{"comment":"no"}`}, 200)
	want(request{method: "POST", path: "/v1/approvals/" + second + "/approve", token: tok["carol"], body: `{}`}, 409)
}

// openapiSessionAgents drives a session's port (each method), a preview
// link to it (each method) and its terminal's handshake: alice's session serves the port server on 8080,
// which the default data admits.
func openapiSessionAgents(t *testing.T, s *testServer, tok map[string]string, want wantFunc) {
	t.Helper()
	alice := clientAs(t, s, tok["alice"])
	ss := openSession(t, alice, api.SessionRequest{})
	defer alice.DeleteSession(context.Background(), ss.ID)
	servePort(t, s, alice, tok["alice"], ss.ID, 8080)
	base := "/v1/sessions/" + ss.ID + "/ports/8080/echo?x=1"
	for _, m := range []string{"GET", "PUT", "POST", "PATCH", "DELETE"} {
		var seen struct{ Method, URI string }
		if err := json.Unmarshal(want(request{method: m, path: base, token: tok["alice"], body: `{"a":1}`}, 200), &seen); err != nil ||
			seen.Method != m || seen.URI != "/echo?x=1" {
			t.Errorf("%s through the port: the session saw %+v, %v", m, seen, err)
		}
	}
	want(request{method: "GET", path: "/v1/sessions/" + ss.ID + "/ports/9/", token: tok["alice"]}, 403)
	want(request{method: "GET", path: base, token: tok["bob"]}, 404)

	// A preview link to the port (mintSessionPreview), then each method
	// through it with no credential but the link.
	var link portLink
	if err := json.Unmarshal(want(request{method: "POST", path: "/v1/sessions/" + ss.ID + "/previews", token: tok["alice"],
		body: `{"port":8080,"ttl_seconds":600}`}, 201), &link); err != nil || !strings.HasPrefix(link.URL, "/v1/sessions/"+ss.ID+"/previews/") {
		t.Fatalf("preview link = %+v, %v", link, err)
	}
	for _, m := range []string{"GET", "PUT", "POST", "PATCH", "DELETE"} {
		var seen struct{ Method, URI string }
		if err := json.Unmarshal(want(request{method: m, path: link.URL + "echo?y=2", body: `{"b":2}`}, 200), &seen); err != nil ||
			seen.Method != m || seen.URI != "/echo?y=2" {
			t.Errorf("%s through the link: the session saw %+v, %v", m, seen, err)
		}
	}
	want(request{method: "POST", path: "/v1/sessions/" + ss.ID + "/previews", token: tok["bob"], body: `{"port":8080}`}, 404)

	// The terminal: its handshake (101) through the checker, then a
	// command and its exit, which closes it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(s.URL, "http") + "/v1/sessions/" + ss.ID + "/terminal?rows=30&cols=100"
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: s.checked(&http.Client{}),
		HTTPHeader: http.Header{"Authorization": {"Bearer " + tok["alice"]}}})
	if err != nil {
		t.Fatalf("terminal: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Correlation-ID") == "" {
		t.Errorf("terminal handshake: %d %v", resp.StatusCode, resp.Header)
	}
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("echo T$((6*7)); exit 0\n")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "T42") {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("terminal output %q: %v", out.String(), err)
		}
		if typ == websocket.MessageBinary {
			out.Write(b)
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")
	_, _, err = websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: s.checked(&http.Client{}),
		HTTPHeader: http.Header{"Authorization": {"Bearer " + tok["bob"]}}})
	if err == nil {
		t.Error("bob opened alice's terminal")
	}
}

// openapiMCP drives the MCP endpoint over raw HTTP, as a client of the
// streamable HTTP transport does: initialize (postMCP 200), the
// initialized notification (postMCP 202), a tool list, the session's
// event stream (getMCP 200, closed once its headers are read) and the
// session's end (deleteMCP 204).
func openapiMCP(t *testing.T, s *testServer, tok map[string]string, want wantFunc) {
	t.Helper()
	mcpHeader := func(session string) map[string]string {
		h := map[string]string{"Accept": "application/json, text/event-stream"}
		if session != "" {
			h["Mcp-Session-Id"], h["Mcp-Protocol-Version"] = session, "2025-06-18"
		}
		return h
	}
	c := s.checked(http.DefaultClient)
	req, _ := http.NewRequest("POST", s.URL+"/v1/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"openapi","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+tok["alice"])
	req.Header.Set("Content-Type", "application/json")
	for k, v := range mcpHeader("") {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || session == "" {
		t.Fatalf("MCP initialize: %d, session %q", resp.StatusCode, session)
	}
	want(request{method: "POST", path: "/v1/mcp", token: tok["alice"], header: mcpHeader(session),
		body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`}, 202)
	if body := want(request{method: "POST", path: "/v1/mcp", token: tok["alice"], header: mcpHeader(session),
		body: `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`}, 200); !strings.Contains(string(body), "run_command") && !strings.Contains(string(body), `"tools"`) {
		t.Errorf("tools/list = %.300s", body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	get, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/mcp", nil)
	get.Header.Set("Authorization", "Bearer "+tok["alice"])
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Mcp-Session-Id", session)
	get.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	stream, err := c.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	if stream.StatusCode != 200 || !strings.HasPrefix(stream.Header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("MCP GET: %d %s", stream.StatusCode, stream.Header.Get("Content-Type"))
	}
	cancel()
	stream.Body.Close()
	want(request{method: "DELETE", path: "/v1/mcp", token: tok["alice"], header: mcpHeader(session)}, 204)
	want(request{method: "POST", path: "/v1/mcp", token: tok["alice"], header: mcpHeader(session),
		body: `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`}, 404)
}

// openapiImagePackages drives imagePackages with the Python image's
// package list (built once per test binary when absent).
func openapiImagePackages(t *testing.T, tok map[string]string, want wantFunc) {
	t.Helper()
	py := executortest.RequireRecipeImage(t, "python")
	var list api.ImagePackagesView
	if err := json.Unmarshal(want(request{method: "GET", path: "/v1/images/" + url.PathEscape(py.Image) + "/packages", token: tok["audrey"]}, 200), &list); err != nil ||
		len(list.Packages) != len(py.Packages) {
		t.Errorf("packages of %s: %d, want %d (%v)", py.Image, len(list.Packages), len(py.Packages), err)
	}
	want(request{method: "GET", path: "/v1/images/" + url.PathEscape("sandgate-test/none:1") + "/packages", token: tok["audrey"]}, 404)
	want(request{method: "GET", path: "/v1/images/" + url.PathEscape(py.Image) + "/packages", token: tok["alice"]}, 403)
}
