package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// portLink is POST /v1/sessions/{id}/previews's answer.
type portLink struct {
	URL       string    `json:"url"`
	Port      int       `json:"port"`
	ExpiresAt time.Time `json:"expires_at"`
}

// mintLink asks for a link to session's port as token's principal,
// failing the test unless it is made.
func mintLink(t *testing.T, s *testServer, token, session string, port, ttl int) portLink {
	t.Helper()
	status, _, body := s.doAs(t, token, http.MethodPost, "/v1/sessions/"+session+"/previews", fmt.Sprintf(`{"port":%d,"ttl_seconds":%d}`, port, ttl))
	var l portLink
	if status != http.StatusCreated || json.Unmarshal(body, &l) != nil {
		t.Fatalf("mint a link to %s:%d: %d %s", session, port, status, body)
	}
	return l
}

// getLink requests path of the gateway with no credential but the link
// in it, as a browser's new tab would.
func getLink(t *testing.T, s *testServer, path string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestPortPreviewLinks: the console's link to a session's port, against
// a real gateway, Docker and Postgres. Alice makes a link on her
// session's page in Chromium and opens it: her session's page answers,
// with none of her credentials. The attacks: a link whose signature was
// changed, another team's link pointed at her session, a request for a
// link to her session by another team, a link used after it expired,
// and a link used after its session closed are all refused; the trail
// records each link made and each connection through one as hers, and
// keeps no link in the paths it records.
func TestPortPreviewLinks(t *testing.T) {
	requireChromium(t)
	policy := bundleWith(t, func(c map[string]any) {
		c["session_ports"] = map[string]any{"default": []int{8080}, "teams": map[string]any{}}
	})
	tokensFile, tok := writeTokensFile(t, authPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile), withEnv("SANDGATE_POLICY_DIR", policy))
	alice := clientAs(t, s, tok["alice"])
	ss := openSession(t, alice, api.SessionRequest{})
	expiring := mintLink(t, s, tok["alice"], ss.ID, 8080, 60)
	servePort(t, s, alice, tok["alice"], ss.ID, 8080)

	// The console: the session's page makes the link, the browser opens it.
	b := newBrowser(t, "")
	b.do("open the console", chromedp.Navigate(s.URL+"/console/#/sessions/"+ss.ID))
	b.signIn(tok["alice"])
	b.waitJS("the preview section", `!!document.getElementById('preview-open')`, 30*time.Second)
	b.checkAxe("session with port previews")
	b.do("make a link", chromedp.Click(chromedp.CSS("#preview-open")))
	b.waitJS("the link", `!!document.getElementById('preview-link')`, 30*time.Second)
	href := b.text(`document.getElementById('preview-link').getAttribute('href')`)
	if !strings.HasPrefix(href, "/v1/sessions/"+ss.ID+"/previews/") {
		t.Fatalf("the console's link is %q", href)
	}
	b.do("open the preview", chromedp.Navigate(s.URL+href+"from-the-console"))
	if got := b.text(`document.body.innerText`); !strings.Contains(got, `"uri":"/from-the-console"`) || strings.Contains(got, tok["alice"]) {
		t.Errorf("the preview in the browser shows %q", got)
	}

	// Without the browser: the session sees its own path, no credential.
	link := mintLink(t, s, tok["alice"], ss.ID, 8080, 600)
	status, h, body := getLink(t, s, link.URL+"hello?x=1")
	var seen struct{ URI, Host string }
	if status != http.StatusOK || json.Unmarshal(body, &seen) != nil || seen.URI != "/hello?x=1" || seen.Host != "127.0.0.1:8080" {
		t.Fatalf("GET through the link: %d %s", status, body)
	}
	if h.Get("Referrer-Policy") != "no-referrer" || !strings.HasPrefix(h.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("the preview's headers: %v", h)
	}
	// Every method, through the document's checker.
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete} {
		if status, _, body := s.doAs(t, "", m, link.URL+"m", ""); status != http.StatusOK {
			t.Errorf("%s through the link: %d %s", m, status, body)
		}
	}

	// A changed signature.
	flip := "A"
	if strings.HasSuffix(link.URL, "A/") {
		flip = "B"
	}
	tampered := link.URL[:len(link.URL)-2] + flip + "/"
	if status, _, body := getLink(t, s, tampered); status != http.StatusUnauthorized || apiError(body).Error.Code != sandgate.CodeUnauthenticated {
		t.Errorf("a tampered link: %d %s", status, body)
	}
	// Another team: no link to her session, and theirs does not open it.
	if status, _, body := s.doAs(t, tok["bob"], http.MethodPost, "/v1/sessions/"+ss.ID+"/previews", `{"port":8080}`); status != http.StatusNotFound {
		t.Errorf("bob's link to alice's session: %d %s", status, body)
	}
	bobs := openSession(t, clientAs(t, s, tok["bob"]), api.SessionRequest{})
	theirs := mintLink(t, s, tok["bob"], bobs.ID, 8080, 600)
	if status, _, body := getLink(t, s, strings.Replace(theirs.URL, bobs.ID, ss.ID, 1)); status != http.StatusUnauthorized {
		t.Errorf("bob's link pointed at alice's session: %d %s", status, body)
	}

	// Expired: refused, though the session still serves.
	time.Sleep(time.Until(expiring.ExpiresAt.Add(time.Second)))
	if status, _, body := getLink(t, s, expiring.URL); status != http.StatusUnauthorized || !strings.Contains(string(body), "expired") {
		t.Errorf("an expired link: %d %s", status, body)
	}
	// The session closed: its links are refused.
	if status, _, body := s.doAs(t, tok["alice"], http.MethodDelete, "/v1/sessions/"+ss.ID, ""); status != http.StatusOK {
		t.Fatalf("close the session: %d %s", status, body)
	}
	if status, _, body := getLink(t, s, link.URL); status < 400 {
		t.Errorf("a link after its session closed: %d %s", status, body)
	}

	checkLinkTrail(t, s, tok["audrey"], ss.ID, link.URL)
}

// checkLinkTrail: the links made are decisions of operation port with
// link true, the connections through them are alice's, and no path the
// trail records holds a link's signature.
func checkLinkTrail(t *testing.T, s *testServer, auditor, session, link string) {
	t.Helper()
	sig := link[strings.LastIndex(link, ".")+1 : len(link)-1]
	conns := s.waitAuditEvents(t, auditor, url.Values{"type": {string(sandgate.EventPortConnection)}}, func(evs []sandgate.AuditRecord) bool {
		return len(evs) >= 2
	})
	for _, ev := range conns {
		if ev.Payload["session_id"] == session && ev.Actor != "alice" {
			t.Errorf("a connection to alice's session by %s", ev.Actor)
		}
	}
	s.waitAuditEvents(t, auditor, url.Values{"type": {string(sandgate.EventAdmissionAllowed)}}, func(evs []sandgate.AuditRecord) bool {
		for _, ev := range evs {
			if ev.Payload["link"] == true {
				return true
			}
		}
		return false
	})
	status, _, body := s.doAs(t, auditor, http.MethodGet, "/v1/audit/export", "")
	if status != http.StatusOK {
		t.Fatalf("export: %d", status)
	}
	if strings.Contains(string(body), sig) {
		t.Errorf("the trail holds a port link's signature")
	}
}
