package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/go-jose/go-jose/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/identity/oidctest"
)

// startSSOServer starts a provider and a gateway whose console signs
// people in with it: the gateway listens where its redirect URL says.
func startSSOServer(t *testing.T, opts ...serverOption) (*testServer, *oidctest.Provider) {
	t.Helper()
	addr := freeAddr(t)
	opts = append([]serverOption{
		withEnv("SANDGATE_LISTEN", addr),
		withEnv("SANDGATE_OIDC_CLIENT_ID", oidctest.Client),
		withEnv("SANDGATE_OIDC_REDIRECT_URL", "http://"+addr+"/console/callback"),
	}, opts...)
	s, op, _ := startOIDCServer(t, opts...)
	return s, op
}

// ssoSignIn signs user in through the console's button and the
// provider's form, by keyboard, and waits for the console's pages.
func ssoSignIn(t *testing.T, b *browserSession, s *testServer, user oidctest.User) {
	t.Helper()
	b.do("open the console", chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS("#sso-link")))
	b.do("follow the provider's button", chromedp.Focus(chromedp.CSS("#sso-link")), chromedp.KeyEvent(kb.Enter))
	b.do("the provider's form",
		chromedp.WaitVisible(chromedp.CSS("#username")),
		chromedp.SendKeys(chromedp.CSS("#username"), user.Username),
		chromedp.SendKeys(chromedp.CSS("#password"), user.Password+kb.Enter))
	b.waitJS("signed in with the provider", `!document.getElementById('nav').hidden && location.pathname === '/console/'`, 30*time.Second)
}

// fetchStatus is the status of a fetch the page makes with its cookies,
// the console's way (same-origin), with the headers given.
func fetchStatus(b *browserSession, method, path, body string, headers map[string]string) int {
	b.t.Helper()
	if headers == nil {
		headers = map[string]string{}
	}
	h, _ := json.Marshal(headers)
	init := fmt.Sprintf(`{method: %q, credentials: 'same-origin', cache: 'no-store', headers: %s`, method, h)
	if body != "" {
		init += fmt.Sprintf(`, body: %q`, body)
	}
	return evalIn[int](b, fmt.Sprintf(`fetch(%q, %s}).then((r) => r.status)`, path, init), chromedp.EvalAwaitPromise)
}

// TestConsoleSSO: the console offers the gateway's identity provider;
// the authorization code flow with PKCE, in Chromium against a real
// provider (zitadel's OP), signs alice in with the session cookie; the
// console shows who she is and lists her runs. The attacks: a request
// that changes something with the cookie but without the console's
// CSRF header is refused, as is one from a page of another origin on the
// same site; a callback whose state is not the sign-in's is refused; a
// replayed session cookie whose ID token has expired signs no one in and
// the page says the session ended; after signing out the cookie is gone.
func TestConsoleSSO(t *testing.T) {
	requireChromium(t)
	s, op := startSSOServer(t)
	alice := op.Token(t, oidctest.Client, oidcAlice.Username)
	mine := s.submitWait(t, alice, `{"command":["echo","alice's"]}`)

	b := newBrowser(t, "")
	b.do("open the console", chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS("#sso-link")))
	u, _ := url.Parse(op.Issuer())
	if got := b.text(`document.getElementById('sso-link').textContent`); got != "Sign in with "+u.Host {
		t.Errorf("the provider's button reads %q", got)
	}
	b.checkAxe("sign in with the provider")
	ssoSignIn(t, b, s, oidcAlice)
	if got := b.text(`document.getElementById('who-name').textContent`); !strings.Contains(got, oidcAlice.Email) || !strings.Contains(got, "alpha") {
		t.Errorf("the console shows %q signed in, want alice's email and team", got)
	}
	b.goTo("#/runs")
	b.waitJS("alice's run listed", fmt.Sprintf(`!!document.querySelector('tr[data-run=%q]')`, mine.ID), 30*time.Second)
	if got := b.text(`document.cookie`); got != "" {
		t.Errorf("the page's script reads cookies %q; the session cookie must be HttpOnly", got)
	}

	// The session's state-changing calls: with the console's header, as
	// alice; without it, refused.
	review := `{"command":["true"]}`
	if got := fetchStatus(b, "POST", "/v1/admission/review", review, map[string]string{"Content-Type": "application/json", "X-Sandgate-CSRF": "1"}); got != http.StatusOK {
		t.Errorf("a review with the CSRF header = %d, want 200", got)
	}
	if got := fetchStatus(b, "POST", "/v1/runs", `{"command":["echo","forged"]}`, map[string]string{"Content-Type": "application/json"}); got != http.StatusForbidden {
		t.Errorf("a run submitted with the cookie and no CSRF header = %d, want 403", got)
	}
	crossSitePost(t, b, s)
	assertRunCount(t, s, alice, 1)

	// Sign out: the cookie is cleared and the session cannot resume.
	b.do("sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#token")))
	if got := fetchStatus(b, "GET", "/v1/whoami", "", nil); got != http.StatusUnauthorized {
		t.Errorf("whoami after signing out = %d, want 401", got)
	}
	b.do("reload", chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS("#sso-link")))
	if b.text(`String(document.getElementById('nav').hidden)`) != "true" {
		t.Error("after signing out a reload signs the console in again")
	}

	// A callback whose state is not the one the sign-in began with.
	b.do("begin a sign-in", chromedp.Navigate(s.URL+"/console/login"), chromedp.WaitVisible(chromedp.CSS("#username")))
	b.do("a forged callback", chromedp.Navigate(s.URL+"/console/callback?code=forged&state=forged"))
	if got := b.text(`document.body.innerText`); !strings.Contains(got, string(sandgate.CodeUnauthenticated)) || !strings.Contains(got, "state") {
		t.Errorf("the forged callback answered %q", got)
	}
	if got := fetchStatus(b, "GET", "/v1/whoami", "", nil); got != http.StatusUnauthorized {
		t.Errorf("whoami after a forged callback = %d, want 401", got)
	}

	// A session cookie replayed after its ID token expired.
	expired := expiredIDToken(t, op)
	yes := true
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	_, err := chromedp.Call(ctx, network.SetCookie, network.SetCookieParams{Name: "__Host-sandgate-session", Value: expired,
		URL: s.URL + "/", Path: "/", Secure: &yes, HTTPOnly: &yes, SameSite: network.CookieSameSiteStrict})
	cancel()
	if err != nil {
		t.Fatalf("replay an expired session cookie: %v", err)
	}
	b.do("reload", chromedp.Navigate(s.URL+"/console/"))
	b.waitJS("the session said ended", `document.getElementById('signin-error').textContent.includes('session has ended')`, 20*time.Second)
	if b.text(`String(document.getElementById('nav').hidden)`) != "true" {
		t.Error("an expired session cookie signed the console in")
	}
	if got := b.consoleProblems(); len(got) > 0 {
		t.Errorf("the browser reported errors or dialogs: %q", got)
	}
}

// crossSitePost is the attack of another page of the same site (another
// port of the loopback address, so SameSite=Strict does not stop the
// cookie): a form that posts a run to the gateway. The gateway refuses
// it by the browser's Sec-Fetch-Site, and it has no CSRF header anyway.
func crossSitePost(t *testing.T, b *browserSession, s *testServer) {
	t.Helper()
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>evil</title><form id="f" method="post" enctype="text/plain" action="%s/v1/runs">`+
			`<input name='{"command":["echo","csrf"],"x":"' value='"}'></form><script>document.getElementById('f').submit()</script>`, s.URL)
	}))
	defer evil.Close()
	b.do("the other page posts", chromedp.Navigate(evil.URL))
	b.waitJS("the post answered", `location.pathname === '/v1/runs'`, 20*time.Second)
	if got := b.text(`document.body.innerText`); !strings.Contains(got, string(sandgate.CodeForbidden)) {
		t.Errorf("the cross-site post answered %q, want %s", got, sandgate.CodeForbidden)
	}
	b.do("back to the console", chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS("#nav")))
	// The resumed session's page is drawn, and the console moves the
	// focus to it, after #nav shows: a click before then can land where
	// the layout no longer has its button (CI once saw the sign-out
	// click do nothing).
	b.waitJS("the console's page drawn", `document.activeElement !== null && document.activeElement.id === 'main'`, 30*time.Second)
}

// assertRunCount checks that token's principal has exactly n runs.
func assertRunCount(t *testing.T, s *testServer, token string, n int) {
	t.Helper()
	status, _, body := s.doAs(t, token, http.MethodGet, "/v1/runs", "")
	var list struct {
		Runs []json.RawMessage `json:"runs"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list runs = %d %s", status, body)
	}
	if len(list.Runs) != n {
		t.Errorf("the principal has %d runs, want %d: %s", len(list.Runs), n, body)
	}
}

// expiredIDToken is an ID token for the console's client that the
// provider's own key signed, for alice, which expired an hour ago.
func expiredIDToken(t *testing.T, op *oidctest.Provider) string {
	t.Helper()
	key, pub := op.PrivateKey()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(pub.Algorithm), Key: key},
		(&jose.SignerOptions{}).WithHeader("kid", pub.KeyID).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims, _ := json.Marshal(map[string]any{
		"iss": op.Issuer(), "aud": []string{oidctest.Client}, "sub": "alice", "email": oidcAlice.Email,
		"team": oidcAlice.Team, "roles": oidcAlice.Roles, "iat": now.Add(-2 * time.Hour).Unix(), "exp": now.Add(-time.Hour).Unix(),
	})
	jws, err := signer.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
