package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/api/apitest"
)

// fakeVolumes has one cache volume of team payments, in use by no run.
type fakeVolumes struct{}

func (fakeVolumes) CacheVolumes(context.Context) ([]sandgate.CacheVolume, error) {
	return []sandgate.CacheVolume{{Team: "payments", Name: "npm", DockerVolume: "sandgate-cache-payments-npm-0", SizeMB: 1024, UsedBytes: -1}}, nil
}

func (fakeVolumes) RemoveCacheVolume(_ context.Context, team, name string) error {
	if team != "payments" || name != "npm" {
		return sandgate.Errorf(sandgate.CodeNotFound, "team %s has no cache volume %q", team, name)
	}
	return nil
}

// TestOpenAPIServed checks GET /v1/openapi.json: the embedded document,
// for any authenticated principal.
func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t)
	for _, tok := range []string{tokAlice, tokSec, tokAuditor, tokAdmin} {
		r := e.do(http.MethodGet, "/v1/openapi.json", tok, "")
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || string(r.body) != string(api.OpenAPI()) {
			t.Errorf("as %s: %d %q, %d bytes", tok, r.status, r.header.Get("Content-Type"), len(r.body))
		}
	}
	if r := e.do(http.MethodGet, "/v1/openapi.json", "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("without a token: %d", r.status)
	}
}

// TestOpenAPIRoutes holds the routes the server registers to the
// document's operations, both ways.
func TestOpenAPIRoutes(t *testing.T) {
	e := newEnv(t)
	ops, err := apitest.Operations()
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`:(\w+)`)
	var routes []string
	for _, r := range e.srv.echo.Routes() {
		// The console's files and the redirects to them are pages for a
		// browser, not API operations: the document leaves them out
		// (TestConsoleMounted covers them).
		if r.Path == "/" || r.Path == "/console" || strings.HasPrefix(r.Path, "/console/") {
			continue
		}
		routes = append(routes, r.Method+" "+strings.Replace(param.ReplaceAllString(r.Path, "{$1}"), "/*", "/{path}", 1))
	}
	sort.Strings(routes)
	routes = slices.Compact(routes)
	if diff := cmp.Diff(apitest.Keys(ops), routes); diff != "" {
		t.Errorf("routes (-document +server):\n%s", diff)
	}
}

// contractRequest is a request of the contract tests; {run} is replaced
// by a finished run of alice's and {live} by one that blocks.
type contractRequest struct {
	method, path, token, body string
	header                    []string
	status                    int
}

// TestOpenAPIRoles holds each operation's x-sandgate-roles to the role
// table: a principal without one of the roles is refused FORBIDDEN, one
// with one is not.
func TestOpenAPIRoles(t *testing.T) {
	doc, err := apitest.Document()
	if err != nil {
		t.Fatal(err)
	}
	principals := []struct {
		token string
		role  string
	}{{tokAlice, "submitter"}, {tokSec, "security"}, {tokAuditor, "auditor"}, {tokAdmin, "admin"}}
	e := newEnv(t, func(_ *Config, e *testEnv) { e.volumes = fakeVolumes{} })
	done := e.submit(tokAlice, "echo", "hi")
	e.waitFinished(done.ID)
	fill := strings.NewReplacer("{id}", done.ID, "{team}", "payments", "{name}", "npm")
	checked := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			raw, ok := op.Extensions["x-sandgate-roles"]
			if !ok {
				continue
			}
			var roles []string
			for _, r := range raw.([]any) {
				roles = append(roles, r.(string))
			}
			body := ""
			if op.RequestBody != nil {
				body = echoBody
			}
			for _, p := range principals {
				allowed := len(roles) == 0 || slices.Contains(roles, p.role)
				target := fill.Replace(path)
				if strings.HasSuffix(path, "/files") {
					// Well formed: the role, not the query, is what is
					// checked.
					target += "?path=f.txt"
				}
				r := e.do(method, target, p.token, body)
				forbidden := r.status == http.StatusForbidden && r.errorCode() == string(sandgate.CodeForbidden)
				if forbidden == allowed {
					t.Errorf("%s %s as %s: %d %s; the document's roles are %v", method, path, p.role, r.status, r.errorCode(), roles)
				}
				checked++
			}
		}
	}
	if checked < 60 {
		t.Errorf("only %d requests checked", checked)
	}
}

// TestOpenAPIContract sends every operation of the document, and every
// kind of error answer, through the real handlers over the fakes: the
// checker in the test client validates each request and answer against
// the document, and the test then requires that each operation was seen
// succeeding.
func TestOpenAPIContract(t *testing.T) {
	e := newEnv(t, func(c *Config, e *testEnv) {
		e.volumes = fakeVolumes{}
		e.imagePackages = &fakePackages{images: map[string]sandgate.ImagePackages{"sandgate/python:3": {
			Ref: "sandgate/python:3", ID: "sha256:" + strings.Repeat("ab", 32), Listed: true, Digest: "sha256:" + strings.Repeat("cd", 32),
			Packages: []sandgate.Package{{Name: "python3", Version: "3.11.2-1+b1", Architecture: "amd64", Source: "python3-defaults", SourceVersion: "3.11.2-1"}},
		}}}
		e.secrets = &fakeVault{}
		e.admitter.limits = map[string]sandgate.TeamLimits{"search": {Concurrent: 1, Queued: 1}}
	})
	done := e.submit(tokAlice, "echo", "hi")
	e.waitFinished(done.ID)
	e.addArtifact(done.ID, "out/a.txt", []byte("artifact"))
	live := e.submit(tokAlice, "block")
	e.waitRunning(live.ID)
	opened := e.do("POST", "/v1/sessions", tokAlice, `{"idle_timeout_seconds":60}`)
	if opened.status != 201 {
		t.Fatalf("POST /v1/sessions: %d %s", opened.status, opened.body)
	}
	session := jsonMap(opened.body)["id"].(string)
	ended := e.do("POST", "/v1/sessions", tokAlice, `{}`)
	endedID := jsonMap(ended.body)["id"].(string)
	waiting := func() string {
		r := e.do("POST", "/v1/runs", tokAlice, `{"image":"approve/x","command":["echo","ok"]}`)
		a, _ := jsonMap(r.body)["approval"].(map[string]any)
		if r.status != 202 || a == nil {
			t.Fatalf("a run that needs approval: %d %s", r.status, r.body)
		}
		return a["id"].(string)
	}
	approval, approval2 := waiting(), waiting()
	octets := "Content-Type: application/octet-stream"
	idem := "Idempotency-Key: contract-1"
	steps := []contractRequest{
		{method: "POST", path: "/v1/runs?wait=2s", token: tokAlice, body: echoBody, status: 200},
		{method: "POST", path: "/v1/runs", token: tokAlice, body: `{"command":["echo","x"]}`, header: []string{idem}, status: 202},
		{method: "POST", path: "/v1/runs", token: tokAlice, body: `{"command":["echo","x"]}`, header: []string{idem}},
		{method: "POST", path: "/v1/runs", token: tokAlice, body: `{"command":["echo","y"]}`, header: []string{idem}, status: 409},
		{method: "POST", path: "/v1/runs", token: tokAlice, body: `{"command":["sh"],"privileged":true}`, status: 403},
		{method: "POST", path: "/v1/runs", token: tokAlice, body: `{"command":["sh"],"priviledged":true}`, status: 400},
		{method: "POST", path: "/v1/runs", token: tokAlice, body: `{"command":["sh"],"stdin":"` + strings.Repeat("x", 1<<20) + `"}`, status: 413},
		{method: "POST", path: "/v1/runs", token: tokAuditor, body: echoBody, status: 403},
		{method: "POST", path: "/v1/runs", token: "wrong", body: echoBody, status: 401},
		{method: "POST", path: "/v1/runs", token: tokBob, body: `{"command":["block"]}`, status: 202},
		{method: "POST", path: "/v1/runs", token: tokBob, body: `{"command":["block"]}`, status: 202},
		{method: "POST", path: "/v1/runs", token: tokBob, body: `{"command":["block"]}`, status: 429},
		{method: "GET", path: "/v1/runs", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/runs?include=output&state=finished&limit=1", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/runs?limit=0", token: tokAlice, status: 400},
		{method: "GET", path: "/v1/runs?color=red", token: tokAlice, status: 400},
		{method: "GET", path: "/v1/runs/{run}", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/runs/{run}", token: tokBob, status: 404},
		{method: "GET", path: "/v1/runs/{run}/logs", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/runs/{run}/logs?follow=true", token: tokAuditor, header: []string{"Last-Event-ID: 1.1.0"}, status: 200},
		{method: "GET", path: "/v1/runs/{live}/logs", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/runs/{run}/logs", token: tokAlice, header: []string{"Last-Event-ID: nope"}, status: 400},
		{method: "GET", path: "/v1/runs/{run}/artifacts", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/runs/{run}/artifacts/out/a.txt", token: tokAuditor, status: 200},
		{method: "GET", path: "/v1/runs/{run}/artifacts/out/a.txt", token: tokAlice, header: []string{"Range: bytes=1-2"}, status: 206},
		{method: "GET", path: "/v1/runs/{run}/artifacts/out/a.txt", token: tokAlice, header: []string{"Range: bytes=9-"}, status: 416},
		{method: "GET", path: "/v1/runs/{run}/artifacts/nope", token: tokAlice, status: 404},
		{method: "GET", path: "/v1/runs/{run}/artifacts.tar", token: tokAdmin, status: 200},
		{method: "GET", path: "/v1/runs/{run}/receipt", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/runs/{run}/receipt", token: tokBob, status: 404},
		{method: "GET", path: "/v1/runs/{run}/receipt?x=1", token: tokAuditor, status: 400},
		{method: "DELETE", path: "/v1/runs/{run}", token: tokAlice, status: 409},
		{method: "DELETE", path: "/v1/runs/{live}", token: tokAdmin, status: 200},
		{method: "POST", path: "/v1/admission/review", token: tokSec, body: `{"command":["sh"],"privileged":true,"network":"bridge"}`, status: 200},
		{method: "GET", path: "/v1/policies", token: tokAuditor, status: 200},
		{method: "POST", path: "/v1/policies/reload", token: tokSec, status: 200},
		{method: "POST", path: "/v1/policies/replay?examples=1&drift=true", token: tokSec, body: replayBody(`{"deny_commands":["echo"]}`), status: 200},
		{method: "POST", path: "/v1/policies/replay", token: tokAdmin, body: replayBody(`{}`, "broken.rego"), status: 422},
		{method: "POST", path: "/v1/policies/replay?limit=0", token: tokAdmin, body: replayBody(`{}`), status: 400},
		{method: "GET", path: "/v1/audit/events?type=run.requested&limit=5", token: tokAuditor, status: 200},
		{method: "GET", path: "/v1/audit/events?type=run.nope", token: tokAuditor, status: 400},
		{method: "GET", path: "/v1/audit/export", token: tokAuditor, status: 200},
		{method: "GET", path: "/v1/audit/export?format=csv", token: tokAdmin, status: 200},
		{method: "GET", path: "/v1/audit/verify?from_seq=1&to_seq=10", token: tokAuditor, status: 200},
		{method: "GET", path: "/v1/audit/checkpoint", token: tokAuditor, status: 200},
		{method: "GET", path: "/v1/audit/checkpoint?chain=test-node-1", token: tokAdmin, header: []string{"Accept: application/json"}, status: 200},
		{method: "GET", path: "/v1/audit/checkpoint?chain=nope", token: tokAuditor, status: 404},
		{method: "GET", path: "/v1/audit/proof/inclusion?event_id=" + purgedEventID, token: tokAuditor, status: 410},
		{method: "GET", path: "/v1/audit/checkpoint?chian=x", token: tokAuditor, status: 400},
		{method: "POST", path: "/v1/audit/checkpoint/cosignature", token: tokAuditor, body: `{"note":"x\n","witness_key":"w+00000000+AA=="}`, status: 200},
		{method: "POST", path: "/v1/audit/checkpoint/cosignature", token: tokAuditor, body: `{"note":"x\n","witness_key":"w","extra":1}`, status: 400},
		{method: "POST", path: "/v1/audit/checkpoint/cosignature", token: tokAdmin, body: `{"note":"x\n","witness_key":"w"}`, status: 403},
		{method: "POST", path: "/v1/audit/witness/alarm", token: tokAuditor, body: `{"alarm":"a\n","witness_key":"w+00000000+BA=="}`, status: 201},
		{method: "POST", path: "/v1/audit/witness/alarm", token: tokAuditor, body: `{"alarm":"a\n","witness_key":"bad"}`, status: 400},
		{method: "POST", path: "/v1/audit/witness/alarm", token: tokAuditor, body: `{"alarm":"a\n"}`, status: 400},
		{method: "POST", path: "/v1/audit/witness/alarm", token: tokAdmin, body: `{"alarm":"a\n","witness_key":"w"}`, status: 403},
		{method: "GET", path: "/v1/audit/proof/inclusion?event_id=0193a000-0000-7000-8000-000000000000", token: tokAuditor, status: 200},
		{method: "GET", path: "/v1/audit/proof/inclusion?event_id=0193a000-0000-7000-8000-000000000000&tree_size=-1", token: tokAuditor, status: 400},
		{method: "GET", path: "/v1/audit/proof/consistency?from=1&to=3", token: tokAuditor, status: 200},
		{method: "GET", path: "/v1/audit/proof/consistency", token: tokAuditor, status: 400},
		{method: "GET", path: "/v1/sandboxes", token: tokAdmin, status: 200},
		{method: "POST", path: "/v1/sandboxes/cleanup", token: tokAdmin, status: 200},
		{method: "GET", path: "/v1/volumes", token: tokAdmin, status: 200},
		{method: "DELETE", path: "/v1/volumes/payments/npm", token: tokAdmin, status: 204},
		{method: "DELETE", path: "/v1/volumes/payments/none", token: tokAdmin, status: 404},
		{method: "GET", path: "/v1/config", token: tokBob, status: 200},
		{method: "GET", path: "/v1/whoami", token: tokSec, status: 200},
		{method: "GET", path: "/v1/openapi.json", token: tokBob, status: 200},
		{method: "GET", path: "/healthz", status: 200},
		{method: "GET", path: "/readyz", status: 200},
		{method: "GET", path: "/metrics", status: 200},
		{method: "GET", path: "/v1/sessions", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/sessions?state=open&limit=5", token: tokAuditor, status: 200},
		{method: "GET", path: "/v1/sessions?state=nope", token: tokAlice, status: 400},
		{method: "GET", path: "/v1/sessions/{session}", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/sessions/{session}", token: tokBob, status: 404},
		{method: "POST", path: "/v1/sessions", token: tokAlice, body: `{"command":["sh"]}`, status: 400},
		{method: "POST", path: "/v1/sessions", token: tokAuditor, body: `{}`, status: 403},
		{method: "POST", path: "/v1/sessions/{session}/runs?wait=2s", token: tokAlice, body: echoBody, status: 200},
		{method: "POST", path: "/v1/sessions/{session}/runs", token: tokAlice, body: `{"command":["echo","x"]}`, status: 202},
		{method: "POST", path: "/v1/sessions/{session}/runs", token: tokAlice, body: `{"command":[]}`, status: 400},
		{method: "POST", path: "/v1/sessions/{session}/runs", token: tokBob, body: echoBody, status: 404},
		{method: "PUT", path: "/v1/sessions/{session}/files?path=a/b.txt&mode=0755", token: tokAlice, body: "hello", header: []string{octets}, status: 200},
		{method: "PUT", path: "/v1/sessions/{session}/files", token: tokAlice, body: "hello", header: []string{octets}, status: 400},
		{method: "GET", path: "/v1/sessions/{session}/files?path=a/b.txt", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/sessions/{session}/files?path=missing", token: tokAlice, status: 404},
		{method: "DELETE", path: "/v1/sessions/{ended}", token: tokAdmin, status: 200},
		{method: "DELETE", path: "/v1/sessions/{ended}", token: tokAlice, status: 409},
		{method: "POST", path: "/v1/sessions/{ended}/runs", token: tokAlice, body: echoBody, status: 409},
		{method: "GET", path: "/v1/approvals", token: tokCarol, status: 200},
		{method: "GET", path: "/v1/approvals?status=pending&limit=5", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/approvals?status=nope", token: tokAlice, status: 400},
		{method: "GET", path: "/v1/approvals/{approval}", token: tokAlice, status: 200},
		{method: "GET", path: "/v1/approvals/{approval}", token: tokBob, status: 404},
		{method: "POST", path: "/v1/approvals/{approval}/approve", token: tokAlice, body: `{"comment":"mine"}`, status: 403},
		{method: "POST", path: "/v1/approvals/{approval}/approve", token: tokCarol, body: `{"comment":"fine","extra":1}`, status: 400},
		{method: "POST", path: "/v1/approvals/{approval}/approve", token: tokCarol, body: `{"comment":"fine"}`, status: 200},
		{method: "POST", path: "/v1/approvals/{approval}/deny", token: tokCarol, body: `{}`, status: 409},
		{method: "POST", path: "/v1/approvals/{approval2}/deny", token: tokCarol, status: 200},
		{method: "POST", path: "/v1/approvals/0193a000-0000-7000-8000-000000000000/deny", token: tokCarol, status: 404},
		{method: "GET", path: "/v1/nodes", token: tokAdmin, status: 200},
		{method: "GET", path: "/v1/nodes", token: tokAlice, status: 403},
		{method: "GET", path: "/v1/images/sandgate%2Fpython:3/packages", token: tokAuditor, status: 200},
		{method: "GET", path: "/v1/images/sandgate%2Fnone:1/packages", token: tokAuditor, status: 404},
		{method: "GET", path: "/v1/images/a%2F..%2Fb/packages", token: tokAuditor, status: 400},
		{method: "PUT", path: "/v1/secrets/demo", token: tokSec, body: `{"value":"tok"}`, status: 201},
		{method: "PUT", path: "/v1/secrets/demo", token: tokAdmin, body: `{"value":"tok2"}`, status: 200},
		{method: "PUT", path: "/v1/secrets/Demo", token: tokSec, body: `{"value":"tok"}`, status: 400},
		{method: "PUT", path: "/v1/secrets/demo", token: tokAlice, body: `{"value":"tok"}`, status: 403},
		{method: "GET", path: "/v1/secrets", token: tokSec, status: 200},
		{method: "DELETE", path: "/v1/secrets/demo", token: tokSec, status: 204},
		{method: "DELETE", path: "/v1/secrets/demo", token: tokSec, status: 404},
		{method: "PUT", path: "/v1/runs", token: tokAlice, status: 405},
		{method: "GET", path: "/v1/nope", token: tokAlice, status: 404},
	}
	run := func(st contractRequest) {
		t.Helper()
		path := strings.NewReplacer("{run}", done.ID, "{live}", live.ID, "{session}", session, "{ended}", endedID,
			"{approval}", approval, "{approval2}", approval2).Replace(st.path)
		r := e.do(st.method, path, st.token, st.body, st.header...)
		if st.status != 0 && r.status != st.status {
			t.Errorf("%s %s: %d, want %d: %.300s", st.method, st.path, r.status, st.status, r.body)
		}
	}
	for _, st := range steps {
		run(st)
	}
	exerciseAgentRoutes(t, e, session)
	exercisePreviewRoutes(t, e, session)
	// The answers of a failing dependency.
	e.policies.reloadErr = &sandgate.Error{Code: sandgate.CodePolicyInvalid, Message: "policy does not compile",
		Details: map[string]any{"errors": []string{"admission.rego:3: rego_parse_error"}}}
	run(contractRequest{method: "POST", path: "/v1/policies/reload", token: tokAdmin, status: 422})
	e.recorder.failing.Store(true)
	run(contractRequest{method: "POST", path: "/v1/runs", token: tokAlice, body: echoBody, status: 503})
	e.recorder.failing.Store(false)
	e.audit.readyErr = sandgate.Errorf(sandgate.CodeAuditUnavailable, "postgres is away")
	run(contractRequest{method: "GET", path: "/readyz", status: 503})
	e.audit.readyErr = nil
	e.boxes.err = fmt.Errorf("daemon gone")
	run(contractRequest{method: "GET", path: "/v1/sandboxes", token: tokAdmin, status: 503})
	e.boxes.err = nil

	seen := e.check.Seen()
	ops, err := apitest.Operations()
	if err != nil {
		t.Fatal(err)
	}
	for key, id := range ops {
		if id == "openSessionTerminal" {
			// Its success is a WebSocket (101), which the checker cannot
			// read whole: TestTerminalWebSocket and the end-to-end tests.
			continue
		}
		ok := false
		for s := range seen {
			op, status, _ := strings.Cut(s, " ")
			ok = ok || (op == id && status[0] == '2')
		}
		if !ok {
			t.Errorf("%s (%s): no successful answer validated", key, id)
		}
	}
	for _, want := range []string{
		"submitRun 200", "submitRun 202", "submitRun 400", "submitRun 401", "submitRun 403", "submitRun 409",
		"submitRun 413", "submitRun 429", "submitRun 503", "listRuns 400", "getRun 404", "runLogs 400", "cancelRun 409",
		"auditEvents 400", "policyReload 422", "policyReplay 422", "policyReplay 400", "readyz 503", "sandboxes 503", "auditInclusionProof 410", "removeVolume 404", "unrouted 404", "unrouted 405",
	} {
		if seen[want] == 0 {
			t.Errorf("no %s answer validated", want)
		}
	}
	n := 0
	for _, c := range seen {
		n += c
	}
	t.Logf("%d answers validated against the OpenAPI document: %v", n, seen)
}

// TestOpenAPICheckerCatchesDrift makes sure the checker fails on what
// it must catch: an answer of the wrong shape, and a request the document
// refuses that the server accepted.
func TestOpenAPICheckerCatchesDrift(t *testing.T) {
	tests := []struct {
		name, method, path, body string
		status                   int
		answer                   string
		want                     string
	}{
		{"missing property", "GET", "/v1/config", "", 200, `{"version":"v"}`, "does not match the document"},
		{"unknown property", "GET", "/healthz", "", 200, `{"status":"ok","extra":1}`, "does not match the document"},
		{"undocumented status", "GET", "/healthz", "", 201, `{"status":"ok"}`, "does not match the document"},
		{"error of another status", "GET", "/v1/config", "", 404, `{"error":{"code":"SANDGATE-CONFLICT","message":"m","correlation_id":"c","details":{}}}`, "not its status"},
		{"accepted what the document refuses", "GET", "/v1/runs?limit=5000", "", 200, `{"runs":[],"next_cursor":null}`, "the document refuses this request"},
		{"not the error shape", "GET", "/v1/nope", "", 404, `nope`, "not the error shape"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingTB{TB: t}
			c := apitest.New(rec)
			srv := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Correlation-ID", "c")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.answer)
			})
			ts := newPlainServer(t, srv)
			req, _ := http.NewRequest(tc.method, ts+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer t")
			resp, err := c.Client(nil).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if !strings.Contains(rec.errors, tc.want) {
				t.Errorf("checker reported %q, want %q", rec.errors, tc.want)
			}
		})
	}
}

// recordingTB is a testing.TB that keeps the errors reported to it.
type recordingTB struct {
	testing.TB
	errors string
}

// Errorf records the error instead of failing the test.
func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors += fmt.Sprintf(format, args...) + "\n"
}

// newPlainServer serves h on a loopback test server until t ends.
func newPlainServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}
