package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
	"github.com/sandgate/sandgate/gateway/client"
)

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(req)
}

// mcpOverHTTP connects the Go SDK's client to the gateway's /v1/mcp.
func mcpOverHTTP(t *testing.T, s *testServer, token, name string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: name, Version: "0.1.0"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: s.URL + "/v1/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
	if err != nil {
		t.Fatalf("connect over streamable HTTP: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpOverStdio runs `sandgate mcp` (in process, through the command
// line) against s and connects the Go SDK's client to its stdin and
// stdout.
func mcpOverStdio(t *testing.T, s *testServer, name string) *sdk.ClientSession {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr syncBuffer
	go func() {
		done <- cli.Run(ctx, []string{"mcp"}, cli.Env{
			Getenv: func(k string) string {
				return map[string]string{"SANDGATE_URL": s.URL, "SANDGATE_TOKEN": s.Token}[k]
			},
			Stdin: inR, Stdout: outW, Stderr: &stderr,
		})
		outW.Close()
	}()
	c := sdk.NewClient(&sdk.Implementation{Name: name, Version: "0.2.0"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		cancel()
		t.Fatalf("connect over stdio: %v (%s)", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		inW.Close()
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("sandgate mcp: %v (%s)", err, stderr.String())
		}
	})
	return cs
}

// callTool calls a tool and returns its result and structured content.
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (*sdk.CallToolResult, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &out)
	return res, out
}

// exerciseMCP drives every tool and resource through cs as an agent
// would, and checks what the trail recorded of it: each call as the
// principal, via mcp, with the client's name.
func exerciseMCP(t *testing.T, s *testServer, cs *sdk.ClientSession, client string) {
	t.Helper()
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	want := []string{"artifact_read", "review", "run", "session_close", "session_exec", "session_open", "session_read_file", "session_write_file"}
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}

	// run: exit code, bounded output, artifacts; then the artifact and
	// the logs resource.
	res, out := callTool(t, cs, "run", map[string]any{
		"command":   []string{"sh", "-c", "mkdir -p out; echo report > out/r.txt; echo to-stdout; echo to-stderr >&2; exit 3"},
		"artifacts": []string{"out/*"},
	})
	if res.IsError || out["exit_code"] != float64(3) || out["outcome"] != "failed" ||
		out["stdout"].(map[string]any)["text"] != "to-stdout\n" || out["stderr"].(map[string]any)["text"] != "to-stderr\n" {
		t.Fatalf("run: %+v %v", out, res.Content)
	}
	runID := out["run_id"].(string)
	if arts, _ := out["artifacts"].([]any); len(arts) != 1 || arts[0].(map[string]any)["path"] != "out/r.txt" {
		t.Errorf("run's artifacts: %v", out["artifacts"])
	}
	_, art := callTool(t, cs, "artifact_read", map[string]any{"run_id": runID, "path": "out/r.txt"})
	if art["content"] != "report\n" || art["sha256"] == "" {
		t.Errorf("artifact_read: %v", art)
	}
	logs, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "sandgate://runs/" + runID + "/logs"})
	if err != nil || len(logs.Contents) != 1 || !strings.Contains(logs.Contents[0].Text, "to-stdout") {
		t.Errorf("the logs resource: %v %+v", err, logs)
	}
	blob, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "sandgate://runs/" + runID + "/artifacts/out/r.txt"})
	if err != nil || len(blob.Contents) != 1 || string(blob.Contents[0].Blob) != "report\n" {
		t.Errorf("the artifact resource: %v %+v", err, blob)
	}

	// A denial is a tool error naming the rule, its reason and the fix.
	res, out = callTool(t, cs, "run", map[string]any{"command": []string{"true"}, "image": "evil/image:1"})
	errDoc, _ := out["error"].(map[string]any)
	vs, _ := errDoc["violations"].([]any)
	if !res.IsError || errDoc["code"] != string(sandgate.CodePolicyDenied) || len(vs) == 0 {
		t.Fatalf("a denied run: %+v", out)
	}
	v := vs[0].(map[string]any)
	if v["rule"] != "image_allowlist" || v["message"] == "" || !strings.Contains(v["fix"].(string), "allowed_images") {
		t.Errorf("the denial's violation: %v", v)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if !strings.Contains(text, "image_allowlist") || !strings.Contains(text, "fix:") {
		t.Errorf("the denial's text: %q", text)
	}
	_, out = callTool(t, cs, "review", map[string]any{"command": []string{"true"}, "image": "evil/image:1"})
	if out["allow"] != false || len(out["violations"].([]any)) == 0 {
		t.Errorf("review: %v", out)
	}

	// A session: open, a file in, a command reading it, the file out,
	// closed.
	_, out = callTool(t, cs, "session_open", map[string]any{})
	sid, _ := out["session_id"].(string)
	if sid == "" || out["state"] != "open" {
		t.Fatalf("session_open: %v", out)
	}
	if res, out = callTool(t, cs, "session_write_file", map[string]any{"session_id": sid, "path": "src/in.txt", "content": "from the agent"}); res.IsError || out["bytes"] != float64(14) {
		t.Errorf("session_write_file: %v %v", out, res.Content)
	}
	_, out = callTool(t, cs, "session_exec", map[string]any{"session_id": sid, "command": []string{"sh", "-c", "tr a-z A-Z < src/in.txt | tee src/out.txt"}})
	if out["exit_code"] != float64(0) || out["stdout"].(map[string]any)["text"] != "FROM THE AGENT" {
		t.Errorf("session_exec: %v", out)
	}
	_, out = callTool(t, cs, "session_read_file", map[string]any{"session_id": sid, "path": "src/out.txt"})
	if out["content"] != "FROM THE AGENT" || out["encoding"] != sandgate.EncodingUTF8 {
		t.Errorf("session_read_file: %v", out)
	}
	res, out = callTool(t, cs, "session_read_file", map[string]any{"session_id": sid, "path": "../../etc/passwd"})
	if !res.IsError {
		t.Errorf("a path out of the workspace: %v", out)
	}
	if _, out = callTool(t, cs, "session_close", map[string]any{"session_id": sid}); out["state"] != "ended" {
		t.Errorf("session_close: %v", out)
	}

	// The trail: every decision of these calls is the principal's, via
	// mcp, with the client's name and version.
	evs := s.auditEvents(t, s.Token, url.Values{"type": {string(sandgate.EventRunRequested)}})
	seen := map[string]bool{}
	for _, ev := range evs {
		c, _ := ev.Payload["client"].(map[string]any)
		if ev.Payload["via"] != "mcp" || c["name"] != client {
			continue
		}
		seen[ev.Payload["operation"].(string)] = true
		if ev.Actor != "dev" {
			t.Errorf("an MCP call recorded as %q", ev.Actor)
		}
	}
	for _, op := range []string{"run", "session", "exec"} {
		if !seen[op] {
			t.Errorf("no run.requested of operation %s via mcp from %s (%v)", op, client, seen)
		}
	}
	puts := s.auditEvents(t, s.Token, url.Values{"type": {string(sandgate.EventSessionFilePut)}, "run_id": {sid}})
	if len(puts) != 1 || puts[0].Payload["via"] != "mcp" {
		t.Errorf("session.file_put via mcp: %+v", puts)
	}
}

// TestMCPGoClientHTTP: the Go SDK's client over the streamable HTTP
// transport of a real gateway (/v1/mcp), every tool and resource.
func TestMCPGoClientHTTP(t *testing.T) {
	s := startServer(t)
	exerciseMCP(t, s, mcpOverHTTP(t, s, s.Token, "e2e-go-http"), "e2e-go-http")
}

// TestMCPGoClientStdio: the Go SDK's client over stdio to `sandgate mcp`,
// a client of a real gateway.
func TestMCPGoClientStdio(t *testing.T) {
	s := startServer(t)
	exerciseMCP(t, s, mcpOverStdio(t, s, "e2e-go-stdio"), "e2e-go-stdio")
}

// TestMCPHostileClient: an unknown tool and oversized arguments are
// JSON-RPC errors; a body over the gateway's limit, malformed JSON and a
// session another token opened are refused in the error shape; a wrong
// token gets nothing; the gateway stays up and serves the next call.
func TestMCPHostileClient(t *testing.T) {
	tokensFile, tok := writeTokensFile(t, authPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile))
	post := func(token, session, body string) (int, []byte) {
		req, _ := http.NewRequest("POST", s.URL+"/v1/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := s.checked(http.DefaultClient).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" && session == "" {
			return resp.StatusCode, []byte(sid)
		}
		return resp.StatusCode, b
	}
	status, sid := post(tok["alice"], "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"hostile","version":"6.6.6"}}}`)
	if status != 200 {
		t.Fatalf("initialize: %d %s", status, sid)
	}
	session := string(sid)
	post(tok["alice"], session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for name, c := range map[string]struct {
		body string
		want string
	}{
		"unknown tool":        {`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm_rf","arguments":{}}}`, `"code":-32602`},
		"oversized arguments": {`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run","arguments":{"command":["echo","` + strings.Repeat("A", 700<<10) + `"]}}}`, `"code":-32602`},
		"wrong argument type": {`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run","arguments":{"command":"rm -rf /"}}}`, `"isError":true`},
	} {
		t.Run(name, func(t *testing.T) {
			status, body := post(tok["alice"], session, c.body)
			if status != 200 || !strings.Contains(string(body), c.want) {
				t.Errorf("%d %.300s", status, body)
			}
		})
	}
	if status, body := post(tok["alice"], session, `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"run","arguments":{"command":["echo","`+strings.Repeat("B", 2<<20)+`"]}}}`); status != 413 || !strings.Contains(string(body), "SANDGATE-TOO-LARGE") {
		t.Errorf("a body over the limit: %d %.300s", status, body)
	}
	if status, body := post(tok["alice"], session, `{"jsonrpc":"2.0","id":4,"method":"sandgate/shell","params":{}}`); status != 400 || !strings.Contains(string(body), "SANDGATE-INVALID-REQUEST") {
		t.Errorf("an unknown method: %d %.300s", status, body)
	}
	if status, body := post(tok["alice"], session, `{"jsonrpc":"2.0","id":7,`); status/100 != 4 || !strings.Contains(string(body), `"error"`) {
		t.Errorf("malformed JSON: %d %.300s", status, body)
	}
	if status, _ := post("not-a-token", session, `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`); status != 401 {
		t.Errorf("a wrong token: %d", status)
	}
	// Bob holds alice's MCP session ID: his calls are still his own, and
	// alice's runs are not his to read.
	runs, err := clientAs(t, s, tok["alice"]).Submit(context.Background(), sandgate.RunSpec{Command: []string{"true"}}, client.SubmitOptions{Wait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, body := post(tok["bob"], session, `{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{"uri":"sandgate://runs/`+runs.ID+`/logs"}}`)
	if !strings.Contains(string(body), `"error"`) || strings.Contains(string(body), `"contents"`) {
		t.Errorf("bob reading alice's run through her session: %.300s", body)
	}
	if status, _, _ := s.do(t, "GET", "/readyz", ""); status != 200 {
		t.Fatalf("the gateway after the hostile client: %d", status)
	}
	cs := mcpOverHTTP(t, s, tok["alice"], "after")
	if _, out := callTool(t, cs, "run", map[string]any{"command": []string{"echo", "still"}}); out["exit_code"] != float64(0) {
		t.Errorf("a call after the hostile client: %v", out)
	}
}
