package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/sandgatetest"
)

// authPrincipal is one principal of the test's tokens file.
type authPrincipal struct {
	name, team string
	roles      []sandgate.Role
}

// The principals of TestEndToEndAuth: every role in team alpha, and a
// submitter of team beta.
var authPrincipals = []authPrincipal{
	{"alice", "alpha", []sandgate.Role{sandgate.RoleSubmitter}},
	{"sam", "alpha", []sandgate.Role{sandgate.RoleSecurity}},
	{"audrey", "alpha", []sandgate.Role{sandgate.RoleAuditor}},
	{"adam", "alpha", []sandgate.Role{sandgate.RoleAdmin}},
	{"bob", "beta", []sandgate.Role{sandgate.RoleSubmitter}},
}

// writeTokensFile writes a YAML tokens file for principals and returns its
// path and each principal's bearer token by name.
func writeTokensFile(t testing.TB, principals []authPrincipal) (string, map[string]string) {
	t.Helper()
	tokens := map[string]string{}
	var b strings.Builder
	b.WriteString("principals:\n")
	for _, p := range principals {
		tok := "sgtest_" + p.name + "_" + sandgatetest.RandomHex(t, 16)
		tokens[p.name] = tok
		roles := make([]string, len(p.roles))
		for i, r := range p.roles {
			roles[i] = string(r)
		}
		fmt.Fprintf(&b, "  - name: %s\n    team: %s\n    roles: [%s]\n    token_sha256: %s\n",
			p.name, p.team, strings.Join(roles, ", "), gateway.HashToken(tok))
	}
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, tokens
}

// TestEndToEndAuth runs every endpoint of the API against a server with a
// tokens file (no development token) as: no token, a bad token, a
// principal without the endpoint's role, and a submitter of another team.
// Each is refused with 401, 403 or 404 and nothing runs; the 401s and 403s
// are audited as auth.denied, and another team's run looks exactly like a
// run that does not exist. Each request comes from its own loopback source
// address, so that the per-source limit on failed attempts (checked last)
// does not turn the table's answers into 429s.
func TestEndToEndAuth(t *testing.T) {
	tokensFile, tok := writeTokensFile(t, authPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile))
	if s.Token != "" {
		t.Fatalf("a server with a tokens file made a development token")
	}

	// A finished run of team alpha, for the endpoints that take a run ID.
	run := s.submitWait(t, tok["alice"], `{"command":["true"]}`)
	if run.Team != "alpha" || run.Principal != "alice" {
		t.Fatalf("run = %s/%s, want alpha/alice", run.Team, run.Principal)
	}
	runPath := "/v1/runs/" + run.ID

	type endpoint struct {
		method, path, body string
		// wrongRole is a principal without the endpoint's role; "" when
		// every role may call it.
		wrongRole string
		// teamScoped marks the endpoints that take another team's run.
		teamScoped bool
	}
	endpoints := []endpoint{
		{http.MethodPost, "/v1/runs", `{"command":["true"]}`, "audrey", false},
		{http.MethodGet, "/v1/runs", "", "sam", false},
		{http.MethodGet, runPath, "", "sam", true},
		{http.MethodGet, runPath + "/logs", "", "sam", true},
		{http.MethodDelete, runPath, "", "audrey", true},
		{http.MethodPost, "/v1/admission/review", `{"command":["true"]}`, "", false},
		{http.MethodGet, "/v1/policies", "", "alice", false},
		{http.MethodPost, "/v1/policies/reload", "", "audrey", false},
		{http.MethodPost, "/v1/policies/replay", `{"files":{"data.json":"{}"}}`, "alice", false},
		{http.MethodGet, "/v1/audit/events", "", "alice", false},
		{http.MethodGet, "/v1/audit/export", "", "sam", false},
		{http.MethodGet, "/v1/audit/verify", "", "bob", false},
		{http.MethodGet, "/v1/sandboxes", "", "audrey", false},
		{http.MethodPost, "/v1/sandboxes/cleanup", "", "sam", false},
		{http.MethodGet, "/v1/config", "", "", false},
	}

	type authCase struct {
		name       string
		req        request
		wantStatus int
		wantCode   sandgate.ErrorCode
		// wantDenied is the auth.denied outcome expected ("" for none);
		// wantActor its actor.
		wantDenied, wantActor string
	}
	var cases []authCase
	for _, ep := range endpoints {
		base := request{method: ep.method, path: ep.path, body: ep.body}
		name := ep.method + " " + strings.Replace(ep.path, run.ID, "{id}", 1)
		noToken := base
		cases = append(cases, authCase{name + "/no token", noToken, 401, sandgate.CodeUnauthenticated, "unauthenticated", ""})
		badToken := base
		badToken.token = "sgtest_not_a_token_" + sandgatetest.RandomHex(t, 8)
		cases = append(cases, authCase{name + "/bad token", badToken, 401, sandgate.CodeUnauthenticated, "unauthenticated", ""})
		malformed := base
		malformed.header = map[string]string{"Authorization": "Basic " + tok["adam"]}
		cases = append(cases, authCase{name + "/not a bearer token", malformed, 401, sandgate.CodeUnauthenticated, "unauthenticated", ""})
		if ep.wrongRole != "" {
			wrong := base
			wrong.token = tok[ep.wrongRole]
			cases = append(cases, authCase{name + "/wrong role " + ep.wrongRole, wrong, 403, sandgate.CodeForbidden, "forbidden", ep.wrongRole})
		}
		if ep.teamScoped {
			other := base
			other.token = tok["bob"]
			cases = append(cases, authCase{name + "/other team", other, 404, sandgate.CodeNotFound, "", ""})
		}
	}
	// Sanity: the same team is let through where bob is not.
	cases = append(cases,
		authCase{"GET /v1/runs/{id}/own team", request{method: http.MethodGet, path: runPath, token: tok["alice"]}, 200, "", "", ""},
		authCase{"DELETE /v1/runs/{id}/own team finished run", request{method: http.MethodDelete, path: runPath, token: tok["alice"]}, 409, sandgate.CodeConflict, "", ""},
	)

	before := s.nodeContainers(t)
	corrs := map[string]authCase{}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			corr := fmt.Sprintf("e2e-auth-%d-%s", i, sandgatetest.RandomHex(t, 4))
			corrs[corr] = tc
			req := tc.req
			if req.header == nil {
				req.header = map[string]string{}
			}
			req.header["X-Correlation-ID"] = corr
			status, h, body := s.send(t, sourceClient(fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)), req)
			if status != tc.wantStatus {
				t.Fatalf("status = %d, want %d: %s", status, tc.wantStatus, body)
			}
			if tc.wantCode == "" {
				return
			}
			e := apiError(body)
			if e.Error.Code != tc.wantCode || e.Error.CorrelationID != corr {
				t.Errorf("error = %+v, want code %s, correlation ID %s", e.Error, tc.wantCode, corr)
			}
			if status == http.StatusUnauthorized && h.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
			if status == http.StatusNotFound && strings.Contains(string(body), "alpha") {
				t.Errorf("404 leaks the run's team: %s", body)
			}
		})
	}

	// bob's list of runs does not hold alpha's run; alice's does.
	for _, who := range []string{"alice", "bob"} {
		status, _, body := s.doAs(t, tok[who], http.MethodGet, "/v1/runs", "")
		if status != http.StatusOK {
			t.Fatalf("GET /v1/runs as %s = %d %s", who, status, body)
		}
		if got, want := strings.Contains(string(body), run.ID), who == "alice"; got != want {
			t.Errorf("GET /v1/runs as %s lists alpha's run: %v, want %v", who, got, want)
		}
	}

	// Every 401 and 403 is in the trail as auth.denied with the principal
	// (when known), the method and the path.
	want := map[string]string{}
	for corr, tc := range corrs {
		if tc.wantDenied != "" {
			want[corr] = tc.wantDenied + "/" + tc.wantActor
		}
	}
	denied := url.Values{"type": {string(sandgate.EventAuthDenied)}}
	events := s.waitAuditEvents(t, tok["adam"], denied, func(evs []sandgate.AuditRecord) bool {
		n := 0
		for _, ev := range evs {
			if _, ok := want[ev.CorrelationID]; ok {
				n++
			}
		}
		return n >= len(want)
	})
	got := map[string]string{}
	for _, ev := range events {
		if _, ok := corrs[ev.CorrelationID]; ok {
			got[ev.CorrelationID] = ev.Outcome + "/" + ev.Actor
			if ev.Payload["method"] != corrs[ev.CorrelationID].req.method {
				t.Errorf("auth.denied %s: payload method %v, want %s", ev.CorrelationID, ev.Payload["method"], corrs[ev.CorrelationID].req.method)
			}
		}
	}
	// The writer commits in order: with every expected event in, a 404
	// that had been audited would be in too.
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("auth.denied events by correlation ID (-want +got):\n%s", diff)
	}

	if after := s.nodeContainers(t); after != before {
		t.Errorf("containers of the node: %d before the table, %d after", before, after)
	}
	status, _, body := s.doAs(t, tok["adam"], http.MethodGet, "/v1/runs", "")
	if status != http.StatusOK || strings.Count(string(body), `"id":`) != 1 {
		t.Errorf("runs after the table: %d %s, want only alice's first run", status, body)
	}

	t.Run("failed attempts are rate-limited per source", func(t *testing.T) {
		src := sourceClient("127.0.9.9")
		bad := request{method: http.MethodGet, path: "/v1/config", token: "sgtest_wrong"}
		failures := 0
		for ; failures < 100; failures++ {
			status, h, body := s.send(t, src, bad)
			if status == http.StatusTooManyRequests {
				if e := apiError(body); e.Error.Code != sandgate.CodeRateLimited || h.Get("Retry-After") == "" {
					t.Errorf("429 answer = %s (Retry-After %q), want RATE-LIMITED with Retry-After", body, h.Get("Retry-After"))
				}
				break
			}
			if status != http.StatusUnauthorized {
				t.Fatalf("attempt %d: status %d, want 401 or 429: %s", failures+1, status, body)
			}
		}
		// The burst is 10 failures per source.
		if failures < 10 || failures == 100 {
			t.Fatalf("%d failures answered 401 before the first 429, want at least 10 and then 429", failures)
		}
		// Another source is not affected.
		status, _, body := s.send(t, sourceClient("127.0.9.10"), request{method: http.MethodGet, path: "/v1/config", token: tok["alice"]})
		if status != http.StatusOK {
			t.Errorf("another source with a good token: %d %s", status, body)
		}
	})
}
