package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/console"
	"github.com/sandgate/sandgate/gateway/api"
)

// plain sends a request outside the OpenAPI checker (the console's
// pages are not API operations), without following redirects.
func (e *testEnv) plain(method, path string, header ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, h := range header {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestWhoami checks GET /v1/whoami: each principal's name, team, roles
// and its team's limits as the node enforces them (the policy's, bounded
// by the team's share of 2 run slots and 4 session places), and 401
// without a token.
func TestWhoami(t *testing.T) {
	e := newEnv(t, func(c *Config, e *testEnv) {
		c.Capacity, c.MaxSessions, c.TeamSharePercent = 2, 4, 50
		e.admitter.limits = map[string]sandgate.TeamLimits{"payments": {Concurrent: 8, Queued: 64, Sessions: 1}}
	})
	share := &sandgate.TeamLimits{Concurrent: 1, Sessions: 2}
	tests := []struct {
		token string
		want  api.PrincipalView
	}{
		{tokAlice, api.PrincipalView{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}, SignIn: &sandgate.SignInToken,
			TeamLimits: &sandgate.TeamLimits{Concurrent: 1, Sessions: 1, Queued: 64}}},
		{tokSec, api.PrincipalView{Name: "sec", Team: "security", Roles: []sandgate.Role{sandgate.RoleSecurity}, SignIn: &sandgate.SignInToken, TeamLimits: share}},
		{tokAuditor, api.PrincipalView{Name: "aud", Team: "compliance", Roles: []sandgate.Role{sandgate.RoleAuditor}, SignIn: &sandgate.SignInToken, TeamLimits: share}},
	}
	for _, tc := range tests {
		r := e.do(http.MethodGet, "/v1/whoami", tc.token, "")
		var got api.PrincipalView
		if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
			t.Fatalf("whoami as %s: %d %s", tc.token, r.status, r.body)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("whoami as %s (-want +got):\n%s", tc.token, diff)
		}
	}
	if r := e.do(http.MethodGet, "/v1/whoami", "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("whoami without a token: %d", r.status)
	}
	if r := e.do(http.MethodGet, "/v1/whoami?x=1", tokAlice, ""); r.status != http.StatusBadRequest {
		t.Errorf("whoami with an unknown parameter: %d", r.status)
	}
}

// TestConsoleMounted checks the console under /console/: its files with
// their security headers and no token, / and /console redirecting to it,
// only GET and HEAD; and that mounting it changes nothing of the API's
// authentication: no token and no cookie of any name opens a /v1 route.
func TestConsoleMounted(t *testing.T) {
	e := newEnv(t)
	r := e.plain(http.MethodGet, "/console/")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `<script type="module" src="assets/js/app.js">`) {
		t.Fatalf("GET /console/ = %d %.200s", r.status, r.body)
	}
	for k, v := range console.SecurityHeaders {
		if r.header.Get(k) != v {
			t.Errorf("GET /console/: %s = %q, want %q", k, r.header.Get(k), v)
		}
	}
	if r.header.Get("X-Correlation-ID") == "" {
		t.Errorf("GET /console/ has no correlation ID")
	}
	if r := e.plain(http.MethodGet, "/console/assets/js/api.js"); r.status != http.StatusOK || r.header.Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Errorf("GET api.js = %d %q", r.status, r.header.Get("Content-Type"))
	}
	for _, p := range []string{"/", "/console"} {
		if r := e.plain(http.MethodGet, p); r.status != http.StatusFound || r.header.Get("Location") != "/console/" {
			t.Errorf("GET %s = %d Location %q, want a redirect to /console/", p, r.status, r.header.Get("Location"))
		}
	}
	if r := e.plain(http.MethodPost, "/console/"); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/ = %d, want 405", r.status)
	}
	if r := e.plain(http.MethodGet, "/console/assets/nope.js"); r.status != http.StatusNotFound {
		t.Errorf("GET a missing console file = %d", r.status)
	}
	// The API is untouched: its routes still need a bearer token.
	for _, p := range []string{"/v1/runs", "/v1/whoami", "/v1/audit/events"} {
		r := e.plain(http.MethodGet, p, "Cookie: session=x; sandgate=tok-admin; token=tok-admin", "Origin: "+e.ts.URL)
		if r.status != http.StatusUnauthorized {
			t.Errorf("GET %s with cookies and no token = %d, want 401", p, r.status)
		}
	}
	// Every answer, the API's too, refuses to be sniffed into HTML.
	if r := e.do(http.MethodGet, "/v1/config", tokAlice, ""); r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("API answer without nosniff")
	}
	// The console's requests are measured under their own route.
	if !strings.Contains(string(e.plain(http.MethodGet, "/metrics").body), `route="/console/*"`) {
		t.Errorf("/metrics has no route /console/*")
	}
}

// TestConsoleRateLimited checks that the console's files are limited per
// source address exactly like the API when Config.RateLimit is set.
func TestConsoleRateLimited(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) { c.RateLimit, c.RateBurst = 0.001, 2 })
	for i := 0; i < 2; i++ {
		if r := e.plain(http.MethodGet, "/console/"); r.status != http.StatusOK {
			t.Fatalf("request %d = %d", i, r.status)
		}
	}
	r := e.plain(http.MethodGet, "/console/")
	if r.status != http.StatusTooManyRequests || r.errorCode() != "SANDGATE-RATE-LIMITED" || r.header.Get("Retry-After") == "" {
		t.Errorf("third request = %d %s, want 429 with Retry-After", r.status, r.body)
	}
}

// TestConsoleOff checks that a gateway without Deps.Console (serve
// --console=false) serves the API alone.
func TestConsoleOff(t *testing.T) {
	e := newEnv(t, func(_ *Config, e *testEnv) { e.noConsole = true })
	for _, p := range []string{"/", "/console", "/console/", "/console/assets/js/app.js"} {
		if r := e.plain(http.MethodGet, p); r.status != http.StatusNotFound {
			t.Errorf("GET %s without the console = %d, want 404", p, r.status)
		}
	}
	if r := e.do(http.MethodGet, "/v1/whoami", tokAlice, ""); r.status != http.StatusOK {
		t.Errorf("the API without the console: %d", r.status)
	}
}
