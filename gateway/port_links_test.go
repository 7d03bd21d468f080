package gateway

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// exercisePreviewRoutes mints a port link for session and uses it with
// every method, for the contract test; and refuses a link that is not
// the gateway's, for another session, or minted by a role that may not.
func exercisePreviewRoutes(t *testing.T, e *testEnv, session string) {
	t.Helper()
	r := e.do("POST", "/v1/sessions/"+session+"/previews", tokAlice, `{"port":8080,"ttl_seconds":120}`)
	var link previewLink
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &link) != nil || !strings.HasPrefix(link.URL, "/v1/sessions/"+session+"/previews/") {
		t.Fatalf("mint a preview: %d %s", r.status, r.body)
	}
	for _, m := range portMethods {
		if r := e.do(m, link.URL+"x?y=1", "", ""); r.status != http.StatusOK || r.header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s through the link: %d %s %v", m, r.status, r.body, r.header)
		}
	}
	for _, c := range []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"no port", "POST", "/v1/sessions/" + session + "/previews", tokAlice, `{}`, 400},
		{"an hour and more", "POST", "/v1/sessions/" + session + "/previews", tokAlice, `{"port":8080,"ttl_seconds":3601}`, 400},
		{"an unknown field", "POST", "/v1/sessions/" + session + "/previews", tokAlice, `{"port":8080,"path":"/"}`, 400},
		{"an auditor", "POST", "/v1/sessions/" + session + "/previews", tokAuditor, `{"port":8080}`, 403},
		{"another team", "POST", "/v1/sessions/" + session + "/previews", tokBob, `{"port":8080}`, 404},
		{"a tampered link", "GET", strings.Replace(link.URL, "/previews/", "/previews/x", 1), "", "", 401},
		{"another session", "GET", strings.Replace(link.URL, session, "0193a000-0000-7000-8000-000000000000", 1), "", "", 401},
	} {
		if r := e.do(c.method, c.path, c.token, c.body); r.status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.status, r.body, c.status)
		}
	}
}

// TestPortLinks: a link opens for its session until it expires; one
// whose claims or signature were changed, made with another key, for
// another session, expired, or too long, does not.
func TestPortLinks(t *testing.T) {
	now := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	l := newPortLinks([]byte("0123456789abcdef0123"), func() time.Time { return now })
	claims := linkClaims{Session: "s1", Port: 8080, Principal: sandgate.Principal{Name: "alice", Team: "alpha", Roles: []sandgate.Role{sandgate.RoleSubmitter}},
		SignIn: sandgate.SignIn{Method: sandgate.MethodToken}, Expires: now.Add(time.Minute).Unix()}
	good, err := l.mint(claims)
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.open(good, "s1")
	if err != nil || got.Port != 8080 || got.Principal.Name != "alice" {
		t.Fatalf("open = %+v, %v", got, err)
	}
	payload, sig, _ := strings.Cut(good, ".")
	raised := claims
	raised.Port, raised.Principal.Roles = 22, []sandgate.Role{sandgate.RoleAdmin}
	raw, _ := json.Marshal(raised)
	other := newPortLinks([]byte("another cluster secret"), l.now)
	foreign, _ := other.mint(claims)
	sameSecret := newPortLinks([]byte("0123456789abcdef0123"), l.now)
	if _, err := sameSecret.open(good, "s1"); err != nil {
		t.Errorf("another node of the cluster refuses the link: %v", err)
	}
	for _, c := range []struct{ name, link, session string }{
		{"claims changed", base64.RawURLEncoding.EncodeToString(raw) + "." + sig, "s1"},
		{"signature changed", payload + "." + strings.Repeat("A", len(sig)), "s1"},
		{"no signature", payload, "s1"},
		{"another key", foreign, "s1"},
		{"another session", good, "s2"},
		{"too long", good + strings.Repeat("A", maxLinkLen), "s1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := l.open(c.link, c.session); sandgate.ErrorCodeOf(err) != sandgate.CodeUnauthenticated {
				t.Errorf("open = %v, want UNAUTHENTICATED", err)
			}
		})
	}
	now = now.Add(time.Minute)
	if _, err := l.open(good, "s1"); sandgate.ErrorCodeOf(err) != sandgate.CodeUnauthenticated || !strings.Contains(err.Error(), "expired") {
		t.Errorf("open after the expiry = %v", err)
	}
}
