package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// mcpCall posts one JSON-RPC message to /v1/mcp and returns the answer
// (from JSON or the first event of a stream) and the session header.
func mcpCall(t *testing.T, e *testEnv, session, token string, msg map[string]any) (map[string]any, string, int) {
	t.Helper()
	b, _ := json.Marshal(msg)
	req, _ := http.NewRequest("POST", e.ts.URL+"/v1/mcp", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 {
		return nil, sid, resp.StatusCode
	}
	var out map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				if err := json.Unmarshal([]byte(data), &out); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
	} else if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out, sid, resp.StatusCode
}

// TestMCPHTTP: /v1/mcp speaks the streamable HTTP transport; a tool call
// is a call of the API as the request's principal, recorded with via mcp
// and the client's name and version; a denial is a tool error naming the
// rule; an unknown tool and oversized arguments are JSON-RPC errors;
// without a token nothing is served.
func TestMCPHTTP(t *testing.T) {
	e := newEnv(t)
	init := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "unit", "version": "1.0"}}}
	if _, _, status := mcpCall(t, e, "", "", init); status != 401 {
		t.Fatalf("without a token: %d", status)
	}
	res, sid, status := mcpCall(t, e, "", tokAlice, init)
	if status != 200 || sid == "" || res["result"] == nil {
		t.Fatalf("initialize: %d %q %v", status, sid, res)
	}
	if _, _, status := mcpCall(t, e, sid, tokAlice, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); status != 202 {
		t.Fatalf("initialized: %d", status)
	}
	call := func(id int, name string, args any) map[string]any {
		res, _, status := mcpCall(t, e, sid, tokAlice, map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
			"params": map[string]any{"name": name, "arguments": args}})
		if status != 200 {
			t.Fatalf("%s: %d", name, status)
		}
		return res
	}
	res = call(2, "run", map[string]any{"command": []string{"echo", "hi"}})
	r, _ := res["result"].(map[string]any)
	sc, _ := r["structuredContent"].(map[string]any)
	if r == nil || r["isError"] == true || sc["exit_code"] != float64(0) || sc["stdout"].(map[string]any)["text"] != "hi\n" {
		t.Fatalf("run: %v", res)
	}
	var requested []sandgate.Event
	for _, ev := range e.recorder.ofType(sandgate.EventRunRequested) {
		if ev.Payload["via"] == "mcp" {
			requested = append(requested, ev)
		}
	}
	if len(requested) != 1 || requested[0].Actor != "alice" {
		t.Fatalf("run.requested with via mcp: %+v", requested)
	}
	if c, _ := requested[0].Payload["client"].(map[string]any); c["name"] != "unit" || c["version"] != "1.0" {
		t.Errorf("client in the record: %+v", requested[0].Payload["client"])
	}
	res = call(3, "run", map[string]any{"command": []string{"true"}, "image": "evil/x"})
	r, _ = res["result"].(map[string]any)
	sc, _ = r["structuredContent"].(map[string]any)
	errDoc, _ := sc["error"].(map[string]any)
	if r["isError"] != true || errDoc["code"] != string(sandgate.CodePolicyDenied) ||
		!strings.Contains(errDoc["violations"].([]any)[0].(map[string]any)["rule"].(string), "allowed_images") {
		t.Fatalf("denied run: %v", res)
	}
	// A language instead of an image: the policy's image for it, in the
	// run as stored; an unknown one is refused naming the field.
	res = call(6, "run", map[string]any{"command": []string{"true"}, "language": "python"})
	r, _ = res["result"].(map[string]any)
	sc, _ = r["structuredContent"].(map[string]any)
	runID, _ := sc["run_id"].(string)
	if r["isError"] == true || runID == "" {
		t.Fatalf("run with a language: %v", res)
	}
	if got := e.do("GET", "/v1/runs/"+runID, tokAlice, "").run(t); got.Spec.Image != "sandgate/python:3" {
		t.Errorf("run with language python has image %q, want sandgate/python:3", got.Spec.Image)
	}
	res = call(7, "run", map[string]any{"command": []string{"true"}, "language": "cobol"})
	r, _ = res["result"].(map[string]any)
	sc, _ = r["structuredContent"].(map[string]any)
	errDoc, _ = sc["error"].(map[string]any)
	if r["isError"] != true || errDoc["code"] != string(sandgate.CodeInvalidRequest) || !strings.Contains(fmt.Sprint(errDoc), "language") {
		t.Errorf("run with an unknown language: %v", res)
	}
	res = call(4, "no_such_tool", map[string]any{})
	if res["error"] == nil {
		t.Errorf("an unknown tool: %v", res)
	}
	res = call(5, "run", map[string]any{"command": []string{"echo", strings.Repeat("x", 600<<10)}})
	if eo, _ := res["error"].(map[string]any); eo == nil || eo["code"] != float64(-32602) {
		t.Errorf("oversized arguments: %v", res)
	}
	// The session's stream, then its end.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.ts.URL+"/v1/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := e.ts.Client().Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET stream: %v %v", err, resp)
	}
	resp.Body.Close()
	req, _ = http.NewRequest("DELETE", e.ts.URL+"/v1/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err = e.ts.Client().Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE: %v %v", err, resp)
	}
	resp.Body.Close()
}

// exerciseAgentRoutes makes a successful request of every operation of
// the agents' routes that the contract test checks: each method of a
// session's port, and the MCP transport's POST, GET and DELETE.
func exerciseAgentRoutes(t *testing.T, e *testEnv, session string) {
	t.Helper()
	for _, m := range portMethods {
		if r := e.do(m, "/v1/sessions/"+session+"/ports/8080/", tokAlice, ""); r.status != 200 {
			t.Errorf("%s port: %d %s", m, r.status, r.body)
		}
	}
	init := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "contract", "version": "1"}}}
	_, sid, status := mcpCall(t, e, "", tokAlice, init)
	if status != 200 || sid == "" {
		t.Fatalf("MCP initialize: %d", status)
	}
	for _, method := range []string{"GET", "DELETE"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, method, e.ts.URL+"/v1/mcp", nil)
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		resp, err := e.ts.Client().Do(req)
		if err != nil || resp.StatusCode/100 != 2 {
			t.Errorf("MCP %s: %v %v", method, err, resp)
		} else {
			resp.Body.Close()
		}
		cancel()
	}
}
