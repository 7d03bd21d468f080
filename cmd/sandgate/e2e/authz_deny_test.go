package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
)

// denyAll is a rule that refuses every question data.sandgate.authz is
// asked.
const denyAll = `
deny contains {"rule": "site.deny_all", "message": "this site lets no one do anything"} if true
`

// TestBundleDenyingEverything: authorization is the policy's alone. A
// bundle whose authz denies every action yields 403, naming its rule, on
// every route of the OpenAPI document, for an admin holding every role;
// only the health, readiness and metrics routes, which ask no one's
// identity, answer.
func TestBundleDenyingEverything(t *testing.T) {
	dir := bundleWith(t, func(map[string]any) {})
	authz := filepath.Join(dir, "authz.rego")
	src, err := os.ReadFile(authz)
	if err != nil {
		t.Fatal(err)
	}
	// The bundle's own authz tests expect grants: the site removes them
	// with its change.
	if err := os.Remove(filepath.Join(dir, "authz_test.rego")); err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, authz, append(src, denyAll...))
	// One admin holding every role per route, and one source address:
	// the refusals stay under the per-principal and per-source limits.
	routes := openAPIRoutes(t)
	var admins []authPrincipal
	for i := range routes {
		admins = append(admins, authPrincipal{fmt.Sprintf("root%d", i), "alpha", sandgate.Roles})
	}
	path, tok := writeTokensFile(t, admins)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", path), withEnv("SANDGATE_POLICY_DIR", dir))

	unauthenticated := map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}
	for i, r := range routes {
		method, route := r[0], r[1]
		t.Run(method+" "+route, func(t *testing.T) {
			status, body := requestFrom(t, fmt.Sprintf("127.0.%d.%d", 30+i/200, 1+i%200), tok[fmt.Sprintf("root%d", i)], method, s.URL+concretePath(route)+wellFormed[method+" "+route])
			if strings.Contains(route, "{link}") {
				// A port link is the request's credential: a made-up one
				// signs in no one, and a real one cannot be minted under
				// this bundle.
				if e := apiError(body); status != http.StatusUnauthorized || e.Error.Code != sandgate.CodeUnauthenticated {
					t.Errorf("= %d %s; want 401 for a link the gateway did not make", status, body)
				}
				return
			}
			if unauthenticated[route] {
				if status == http.StatusForbidden {
					t.Errorf("= 403 %s", body)
				}
				return
			}
			e := apiError(body)
			if status != http.StatusForbidden || e.Error.Code != sandgate.CodeForbidden || e.Error.Details["rule"] != "site.deny_all" {
				t.Errorf("= %d %s; want 403 naming site.deny_all", status, body)
			}
		})
	}
	if len(routes) < 30 {
		t.Errorf("the OpenAPI document lists %d operations", len(routes))
	}
}

// openAPIRoutes are the document's operations, [method, path] each.
func openAPIRoutes(t *testing.T) [][2]string {
	t.Helper()
	raw, err := os.ReadFile("../../../gateway/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for p, ops := range doc.Paths {
		for m := range ops {
			switch m {
			case "get", "post", "put", "delete", "patch":
				out = append(out, [2]string{strings.ToUpper(m), p})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][1]+out[i][0] < out[j][1]+out[j][0] })
	return out
}

// concretePath fills a route's parameters: a run, session or approval ID
// that exists nowhere, a team, a name, a path.
func concretePath(route string) string {
	r := strings.NewReplacer("{id}", "0192f0c4-6c1a-7bb2-9a2e-3f5c3d1e2a10", "{team}", "alpha", "{name}", "cache", "{path}", "out.txt")
	return r.Replace(route)
}

// wellFormed is the query a route needs to be well formed: a request
// that is not is refused for its form (400) before anyone is asked who
// may make it, which tells nothing of any object.
var wellFormed = map[string]string{"PUT /v1/sessions/{id}/files": "?path=f.txt"}

// requestFrom makes one request from the loopback source src, a JSON
// body of {} for the methods that take one.
func requestFrom(t *testing.T, src, token, method, url string) (int, []byte) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := sourceClient(src).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}
