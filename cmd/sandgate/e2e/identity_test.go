package e2e

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/identity/oidctest"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The people of the identity tests, as the test's OpenID provider knows
// them.
var (
	oidcAlice   = oidctest.User{Username: "alice", Password: "pw-alice", Email: "alice@example.com", Team: "alpha", Roles: []string{"submitter"}}
	oidcAuditor = oidctest.User{Username: "ada", Password: "pw-ada", Email: "ada@example.com", Team: "compliance", Roles: []string{"auditor"}}
	oidcNobody  = oidctest.User{Username: "nemo", Password: "pw-nemo", Email: "nemo@example.com", Team: "alpha"}
)

// startOIDCServer starts a provider and a gateway that trusts it, with
// its policy in a directory the test may edit.
func startOIDCServer(t *testing.T, opts ...serverOption) (*testServer, *oidctest.Provider, string) {
	t.Helper()
	op := oidctest.New(t, oidcAlice, oidcAuditor, oidcNobody)
	dir := bundleWith(t, func(map[string]any) {})
	opts = append([]serverOption{
		withEnv("SANDGATE_POLICY_DIR", dir),
		withEnv("SANDGATE_OIDC_ISSUER", op.Issuer()),
		withEnv("SANDGATE_OIDC_AUDIENCE", oidctest.Client),
		withEnv("SANDGATE_OIDC_KEYS_REFRESH", "1ms"),
	}, opts...)
	return startServer(t, opts...), op, dir
}

func whoami(t *testing.T, s *testServer, token string) (int, api.PrincipalView, []byte) {
	t.Helper()
	status, _, body := s.doAs(t, token, http.MethodGet, "/v1/whoami", "")
	var p api.PrincipalView
	if status == http.StatusOK {
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
	}
	return status, p, body
}

// TestOIDCBearerTokens: a real provider's ID tokens sign people in, the
// principal rule of the bundle names them, and the trail names the
// person with the issuer, subject, email and method; tokens of another
// audience or issuer, or that the rule maps to no one, are refused with
// the reason; a rotated key is fetched without a restart.
func TestOIDCBearerTokens(t *testing.T) {
	s, op, _ := startOIDCServer(t)
	alice := op.Token(t, oidctest.Client, "alice")

	status, p, body := whoami(t, s, alice)
	if status != http.StatusOK || p.Name != "alice@example.com" || p.Team != "alpha" || len(p.Roles) != 1 || p.Roles[0] != sandgate.RoleSubmitter {
		t.Fatalf("whoami = %d %s", status, body)
	}
	if in := p.SignIn; in == nil || in.Method != sandgate.MethodOIDC || in.Issuer != op.Issuer() || in.Email != "alice@example.com" || in.Subject == "" {
		t.Fatalf("sign-in = %+v", p.SignIn)
	}

	run := s.submitWait(t, alice, `{"command":["true"]}`)
	if run.Principal != "alice@example.com" || run.SignIn == nil || run.SignIn.Method != sandgate.MethodOIDC {
		t.Fatalf("run = %s %+v", run.Principal, run.SignIn)
	}
	// Every event of the run names the person: the decision's and the
	// container's.
	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventContainerRemoved)
	})
	for _, ev := range events {
		actor, _ := ev.Payload["actor"].(map[string]any)
		if actor["method"] != sandgate.MethodOIDC || actor["issuer"] != op.Issuer() || actor["email"] != "alice@example.com" ||
			actor["subject"] != p.SignIn.Subject || actor["name"] != "alice@example.com" {
			t.Errorf("%s: actor = %v", ev.Type, ev.Payload["actor"])
		}
	}

	other := oidctest.New(t, oidcAlice)
	for _, tc := range []struct {
		name, token, reason string
		status              int
	}{
		{"another audience", op.Token(t, oidctest.OtherClient, "alice"), "audience", http.StatusUnauthorized},
		{"another issuer", other.Token(t, oidctest.Client, "alice"), "not one sandgate trusts", http.StatusUnauthorized},
		{"mapped to no one", op.Token(t, oidctest.Client, "nemo"), "no role", http.StatusForbidden},
		{"a forged JWT", b64url(`{"alg":"none"}`) + "." + b64url(`{"iss":"`+op.Issuer()+`","sub":"x","aud":"sandgate","exp":9999999999,"roles":["admin"]}`) + ".", "signed with", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := whoami(t, s, tc.token)
			e := apiError(body)
			if status != tc.status || !strings.Contains(e.Error.Message, tc.reason) {
				t.Errorf("whoami = %d %s; want %d naming %q", status, body, tc.status, tc.reason)
			}
		})
	}

	// The provider rotates its key and withdraws the old one: the next
	// token names a key the gateway does not hold, which it fetches.
	if err := op.Rotate(jose.ES256, false); err != nil {
		t.Fatal(err)
	}
	if status, p, body := whoami(t, s, op.Token(t, oidctest.Client, "alice")); status != http.StatusOK || p.Name != "alice@example.com" {
		t.Fatalf("whoami with the rotated key = %d %s", status, body)
	}
	if status, _, body := whoami(t, s, alice); status != http.StatusUnauthorized {
		t.Errorf("a token of the withdrawn key = %d %s, want 401", status, body)
	}
}

// TestOIDCMappingHotReloaded: the principal rule is the bundle's, so a
// change to it (here: teams from a group claim, names lower-cased by
// security staff) is in force once the bundle reloads, with no restart.
// And a site that masks emails gets keyed hashes in the trail.
func TestOIDCMappingHotReloaded(t *testing.T) {
	s, op, dir := startOIDCServer(t)
	auditor := op.Token(t, oidctest.Client, "ada")
	if status, p, body := whoami(t, s, auditor); status != http.StatusOK || p.Team != "compliance" {
		t.Fatalf("whoami = %d %s", status, body)
	}
	rego := filepath.Join(dir, "authz.rego")
	src, err := os.ReadFile(rego)
	if err != nil {
		t.Fatal(err)
	}
	const old = "_team := input.claims.team if {"
	if !strings.Contains(string(src), old) {
		t.Fatalf("authz.rego has no %q", old)
	}
	edited := strings.Replace(string(src), old, "_team := concat(\"-\", [\"mapped\", input.claims.team]) if {", 1)
	data, err := os.ReadFile(filepath.Join(dir, "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["sandgate"].(map[string]any)["config"].(map[string]any)["mask_sign_in"] = []string{"email"}
	masked, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	// Security staff change the rule's tests with it; here they go.
	if err := os.Remove(filepath.Join(dir, "authz_test.rego")); err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, rego, []byte(edited))
	writeAtomically(t, filepath.Join(dir, "data.json"), masked)
	sandgatetest.WaitFor(t, "the new principal rule", 30*time.Second, func() bool {
		_, p, _ := whoami(t, s, auditor)
		return p.Team == "mapped-compliance"
	})
	_, p, _ := whoami(t, s, auditor)
	if p.SignIn == nil || !strings.HasPrefix(p.SignIn.Email, sandgate.MaskPrefix) {
		t.Errorf("sign-in with emails masked = %+v", p.SignIn)
	}
	// The trail keeps the hash, not the address.
	status, _, body := s.doAs(t, auditor, http.MethodGet, "/v1/audit/events?type=audit.exported", "")
	if status != http.StatusOK || strings.Contains(string(body), "ada@example.com") {
		t.Errorf("events = %d; the address is in the trail: %v", status, strings.Contains(string(body), "ada@example.com"))
	}
}

func writeAtomically(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func b64url(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// TestTokensFileReloaded: a token removed from the tokens file stops
// working once the file is read again (its directory is watched), with
// no restart; one added starts working; an edit that does not parse
// leaves the tokens in force.
func TestTokensFileReloaded(t *testing.T) {
	path, tok := writeTokensFile(t, authPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", path))
	if status, _, body := whoami(t, s, tok["bob"]); status != http.StatusOK {
		t.Fatalf("whoami as bob = %d %s", status, body)
	}
	// A broken edit: refused, the tokens in force stay.
	writeAtomically(t, path, []byte("principals: [{name: bob, roles: [wizard]}]\n"))
	time.Sleep(300 * time.Millisecond) // past the watch's debounce; what follows holds whatever the wait
	if status, _, body := whoami(t, s, tok["bob"]); status != http.StatusOK {
		t.Fatalf("after a broken edit, whoami as bob = %d %s", status, body)
	}
	// bob removed, carl added.
	rest := []authPrincipal{authPrincipals[0], {"carl", "beta", []sandgate.Role{sandgate.RoleSubmitter}}}
	newPath, newTok := writeTokensFile(t, rest)
	data, err := os.ReadFile(newPath)
	if err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, path, data)
	sandgatetest.WaitFor(t, "bob's token to stop working", 10*time.Second, func() bool {
		status, _, _ := whoami(t, s, tok["bob"])
		return status == http.StatusUnauthorized
	})
	if status, p, body := whoami(t, s, newTok["carl"]); status != http.StatusOK || p.Name != "carl" {
		t.Errorf("whoami as carl = %d %s", status, body)
	}
	if status, _, body := whoami(t, s, newTok["alice"]); status != http.StatusOK {
		t.Errorf("whoami as alice = %d %s", status, body)
	}
}
