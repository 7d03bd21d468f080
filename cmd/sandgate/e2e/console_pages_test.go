package e2e

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// pagesPrincipals: ada administers (every page, the nodes page among
// them), casey submits and audits.
var pagesPrincipals = []authPrincipal{
	{"ada", "alpha", []sandgate.Role{sandgate.RoleAdmin}},
	{"casey", "alpha", []sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleSecurity, sandgate.RoleAuditor}},
}

// consolePage is a page of the console and what shows it has loaded.
type consolePage struct {
	name, hash, ready string
}

// TestConsolePages opens every page of the console against a real
// gateway (Docker, Postgres) as an admin, in a window 800 px wide: each
// loads, has no serious or critical accessibility violation (axe-core),
// and needs no sideways scrolling. The audit page shows the trail newest
// first as one line a person reads per event, the rule of a denial in its
// column, the filters as chips that remove themselves, the raw JSON behind
// a toggle, and each chain verified with its checkpoint; run IDs show
// their random tail and copy whole; usage is in words; the sessions page
// lists a session whose page shows its command as a run.
func TestConsolePages(t *testing.T) {
	requireChromium(t)
	tokensFile, tok := writeTokensFile(t, pagesPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile))
	shots := screenshotDir(t)

	exited := s.submitWait(t, tok["casey"], `{"command":["sh","-c","exit 3"]}`)
	if status, _, body := s.doAs(t, tok["casey"], http.MethodPost, "/v1/runs", `{"command":["true"],"privileged":true}`); status != http.StatusForbidden {
		t.Fatalf("privileged run = %d %s, want 403", status, body)
	}
	status, _, body := s.doAs(t, tok["casey"], http.MethodPost, "/v1/sessions", `{"idle_timeout_seconds":300}`)
	var sess api.SessionView
	if status != http.StatusCreated || json.Unmarshal(body, &sess) != nil {
		t.Fatalf("session = %d %s", status, body)
	}
	t.Cleanup(func() { s.doAs(t, tok["casey"], http.MethodDelete, "/v1/sessions/"+sess.ID, "") })
	// A review the default bundle allows and the candidate replayed on
	// the policies page denies (no_telnet).
	if status, _, body := s.doAs(t, tok["casey"], http.MethodPost, "/v1/admission/review", `{"command":["telnet","example.org"]}`); status != http.StatusOK {
		t.Fatalf("review = %d %s", status, body)
	}
	if status, _, body := s.doAs(t, tok["casey"], http.MethodPost, "/v1/sessions/"+sess.ID+"/runs?wait=60s", `{"command":["echo","in a session"]}`); status != http.StatusOK {
		t.Fatalf("session command = %d %s", status, body)
	}

	b := newBrowser(t, t.TempDir())
	b.do("a window 800 px wide", chromedp.EmulateViewport(800, 900))
	b.do("open the console", chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.checkAxe("sign in")
	b.signIn(tok["ada"])

	tail := exited.ID[len(exited.ID)-8:]
	pages := []consolePage{
		{"overview", "#/overview", `!!document.querySelector('[data-chart="outcomes"] svg')`},
		{"runs", "#/runs", fmt.Sprintf(`!!document.querySelector('tr[data-run=%q]')`, exited.ID)},
		{"run", "#/runs/" + exited.ID, `document.getElementById('run-state')?.dataset.state === 'finished' && !!document.getElementById('sec-lifecycle')`},
		{"sessions", "#/sessions", fmt.Sprintf(`!!document.querySelector('a[data-key="session-%s"]')`, sess.ID)},
		{"session", "#/sessions/" + sess.ID, `!!document.getElementById('sec-commands')`},
		{"approvals", "#/approvals", `!!document.querySelector('#approvals-body p, #approvals-body article')`},
		{"policies", "#/policies", `document.getElementById('policy-revision')?.textContent.startsWith('sha256:') && !!document.querySelector('table.loads tbody tr')`},
		{"audit", "#/audit", `!!document.querySelector('table.events tbody tr[data-type]') && document.getElementById('verify-result').textContent.includes('events checked')`},
		{"nodes", "#/nodes", `!!document.querySelector('table.nodes tbody tr')`},
	}
	for _, p := range pages {
		b.goTo(p.hash)
		b.waitJS(p.name+" loads", p.ready, 60*time.Second)
		b.checkAxe(p.name)
		if wide := evalIn[bool](b, `document.documentElement.scrollWidth > document.documentElement.clientWidth`); wide {
			t.Errorf("%s scrolls sideways at 800 px: %s", p.name, b.text(`JSON.stringify([...document.querySelectorAll('#view *')].filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth).slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + e.textContent.slice(0, 40)))`))
		}
		// TestConsoleEndToEnd pictures the other pages at a laptop's width.
		switch p.name {
		case "sessions", "session", "nodes":
			b.screenshot(shots, p.name)
		case "audit":
			b.screenshot(shots, "audit-800")
		}
		switch p.name {
		case "runs":
			if got := b.text(fmt.Sprintf(`document.querySelector('tr[data-run=%q] a').textContent`, exited.ID)); got != "…"+tail {
				t.Errorf("the runs list shows the run as %q, want its random tail …%s", got, tail)
			}
		case "run":
			if got := b.text(`document.getElementById('run-id').textContent`); got != exited.ID {
				t.Errorf("the run page's whole ID = %q, want %q", got, exited.ID)
			}
			if !evalIn[bool](b, `!!document.querySelector('.runid button.copy')`) {
				t.Errorf("the run page has no button copying its ID")
			}
			if evalIn[bool](b, `!!document.getElementById('sec-resource-usage')`) && !strings.Contains(b.text(`document.getElementById('sec-resource-usage').parentElement.textContent`), "wall-clock time") {
				t.Errorf("usage is not labelled in words: %s", b.text(`document.getElementById('sec-resource-usage').parentElement.textContent`))
			}
		case "session":
			if !evalIn[bool](b, `[...document.querySelectorAll('#view table a')].some(a => a.getAttribute('href').startsWith('#/runs/'))`) {
				t.Errorf("the session's command is not listed as a run: %s", b.text(`document.getElementById('view').innerText`))
			}
		case "audit":
			checkAuditPage(t, b, exited)
		case "policies":
			checkPoliciesPage(t, b)
		}
	}
	if got := b.consoleProblems(); len(got) > 0 {
		t.Errorf("the browser reported errors or dialogs: %q", got)
	}
}

// checkAuditPage: newest first, human lines, the rule column, the chips,
// the raw JSON toggle and the chains.
func checkAuditPage(t *testing.T, b *browserSession, exited api.RunView) {
	t.Helper()
	// The trail's order is the order events were recorded in.
	seqOrder := b.text(`JSON.stringify([...document.querySelectorAll('table.events tbody tr')].map(tr => new Date(tr.dataset.recorded).getTime()))`)
	var times []int64
	_ = json.Unmarshal([]byte(seqOrder), &times)
	for i := 1; i < len(times); i++ {
		if times[i] > times[i-1] {
			t.Errorf("events are not newest first: %d after %d", times[i], times[i-1])
			break
		}
	}
	line := func(typ string) string {
		return b.text(fmt.Sprintf(`document.querySelector('table.events tr[data-type=%q] td.what')?.textContent || ''`, typ))
	}
	if got := line("admission.denied"); !strings.HasPrefix(got, "casey denied: no_privileged") {
		t.Errorf("the denial reads %q, want casey denied: no_privileged, …", got)
	}
	if got := b.text(`document.querySelector('table.events tr[data-type="admission.denied"] td:nth-child(3)').textContent`); !strings.Contains(got, "no_privileged") {
		t.Errorf("the rule column of the denial = %q", got)
	}
	if got := line("container.exited"); got != "run …"+exited.ID[len(exited.ID)-8:]+" exited → exit 3" {
		if !strings.Contains(got, "exited → exit") {
			t.Errorf("an exit reads %q", got)
		}
	}
	if got := line("admission.allowed"); !strings.HasPrefix(got, "casey ran ") {
		t.Errorf("an admission reads %q, want casey ran `…` in …", got)
	}
	if !strings.Contains(b.text(`document.getElementById('chains').textContent`), "verified") ||
		!strings.Contains(b.text(`document.getElementById('chains').textContent`), "events · root") {
		t.Errorf("the chains do not show verified with their checkpoint: %s", b.text(`document.getElementById('chains').innerText`))
	}
	// The raw JSON toggle opens every record.
	b.do("show raw JSON", chromedp.Click(chromedp.CSS("#a-raw")))
	if !evalIn[bool](b, `[...document.querySelectorAll('table.events details')].every(d => d.open)`) {
		t.Errorf("the raw JSON toggle left records closed")
	}
	// A filter is a chip; removing it shows every event again.
	b.goTo("#/audit?type=admission.denied")
	b.waitJS("the filter's chip", `!!document.querySelector('#a-chips button[data-filter="type"]')`, 20*time.Second)
	b.waitJS("only denials", `[...document.querySelectorAll('table.events tbody tr')].every(tr => tr.dataset.type === 'admission.denied')`, 20*time.Second)
	b.do("remove the chip", chromedp.Click(chromedp.CSS(`#a-chips button[data-filter="type"]`)))
	b.waitJS("the filter is gone", `!location.hash.includes('type=') && [...document.querySelectorAll('table.events tbody tr')].some(tr => tr.dataset.type === 'container.exited')`, 20*time.Second)
}

// TestConsoleKeyboard uses the console with the keyboard alone: the skip
// link comes first and moves the focus to the content, Tab reaches the
// navigation in order, Enter on a link opens its page, and a filter chip
// is removed with Enter.
func TestConsoleKeyboard(t *testing.T) {
	requireChromium(t)
	tokensFile, tok := writeTokensFile(t, pagesPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile))
	s.submitWait(t, tok["casey"], `{"command":["true"]}`)
	b := newBrowser(t, "")
	b.do("open the console", chromedp.Navigate(s.URL+"/console/#/overview"), chromedp.WaitVisible(chromedp.CSS("#token")))

	active := `(document.activeElement.id || document.activeElement.textContent.trim())`
	tab := func(step string, back bool) string {
		t.Helper()
		if back {
			b.do(step, chromedp.KeyEvent(kb.Tab, chromedp.KeyModifiers(chromedp.ModifierShift)))
		} else {
			b.do(step, chromedp.KeyEvent(kb.Tab))
		}
		return b.text(active)
	}
	// The sign-in page: the focus is in the token field; before it is
	// only the skip link, and Enter on it moves to the content.
	if got := b.text(active); got != "token" {
		t.Fatalf("the sign-in page's focus is on %q, want the token field", got)
	}
	if got := tab("shift-tab from the token", true); got != "skip" {
		t.Fatalf("the stop before the token is %q, want the skip link", got)
	}
	b.do("follow the skip link", chromedp.KeyEvent(kb.Enter))
	if got := b.text(active); got != "main" {
		t.Errorf("the skip link moved the focus to %q, want main", got)
	}
	if got := tab("tab to the token", false); got != "token" {
		t.Fatalf("Tab from the content reached %q, want the token field", got)
	}
	b.do("type the token", chromedp.KeyEvent(tok["ada"]), chromedp.KeyEvent(kb.Enter))
	b.waitJS("signed in, the overview", `document.title.startsWith('Overview') && document.activeElement.id === 'main'`, 20*time.Second)

	// From the content back through the header, in order.
	var order []string
	for range 9 {
		order = append(order, tab("shift-tab", true))
	}
	want := []string{"signout", "Nodes", "Audit", "Policies", "Approvals", "Sessions", "Runs", "Overview", "skip"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("Shift-Tab order from the content = %v, want %v", order, want)
	}
	for range 6 {
		tab("tab to Audit", false)
	}
	if got := b.text(active); got != "Audit" {
		t.Fatalf("focus is on %q, want Audit", got)
	}
	b.do("open Audit", chromedp.KeyEvent(kb.Enter))
	b.waitJS("the audit page", `document.title.startsWith('Audit') && !!document.querySelector('table.events tbody tr[data-type]')`, 30*time.Second)

	// A filter typed and submitted with Enter, then its chip removed
	// with Enter.
	b.do("filter by actor", chromedp.Focus(chromedp.CSS("#a-actor")), chromedp.SendKeys(chromedp.CSS("#a-actor"), "casey"+kb.Enter))
	b.waitJS("the actor chip", `!!document.querySelector('#a-chips button[data-filter="actor"]')`, 20*time.Second)
	b.do("focus the chip", chromedp.Focus(chromedp.CSS(`#a-chips button[data-filter="actor"]`)), chromedp.KeyEvent(kb.Enter))
	b.waitJS("the chip is removed", `!location.hash.includes('actor=') && !document.querySelector('#a-chips button')`, 20*time.Second)

	// The focus ring is visible on a focused link.
	b.do("tab onto the page", chromedp.Focus(chromedp.CSS(`#nav a[data-page="runs"]`)))
	if style := b.text(`getComputedStyle(document.activeElement).outlineStyle`); style == "none" {
		t.Errorf("a focused link shows no focus ring")
	}
	if got := b.consoleProblems(); len(got) > 0 {
		t.Errorf("the browser reported errors or dialogs: %q", got)
	}
}

// checkPoliciesPage: the rules with severity, controls, tests and place;
// the load history; a candidate uploaded as a .tar.gz is replayed and
// its newly denied decision shown by rule.
func checkPoliciesPage(t *testing.T, b *browserSession) {
	t.Helper()
	row := b.text(`[...document.querySelectorAll('table.rules tbody tr')].find(tr => tr.querySelector('code')?.textContent === 'no_privileged')?.innerText || ''`)
	if !strings.Contains(row, "CIS-5.5") || !strings.Contains(row, "critical") || !strings.Contains(row, ".rego:") {
		t.Errorf("the no_privileged rule reads %q, want its severity, controls and place", row)
	}
	tests := b.text(`[...document.querySelectorAll('table.rules tbody tr')].find(tr => tr.querySelector('code')?.textContent === 'no_privileged')?.querySelector('td.num')?.textContent || ''`)
	if tests == "" || tests == "0" {
		t.Errorf("no_privileged is named by %q tests", tests)
	}
	if got := b.text(`document.querySelector('table.loads tbody tr').innerText`); !strings.Contains(got, "loaded") {
		t.Errorf("the load history's newest row = %q", got)
	}
	strict := bundleWith(t, func(map[string]any) {})
	if err := os.WriteFile(filepath.Join(strict, "no_telnet.rego"), []byte(noTelnetRule), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "candidate.tar.gz")
	writeTarGz(t, archive, strict, "candidate")
	b.do("upload the candidate", chromedp.SetUploadFiles(chromedp.CSS("#replay-archive"), []string{archive}))
	b.waitJS("the replay answers", `!!document.getElementById('replay-denied') || !!document.querySelector('#sec-replay-a-candidate-bundle ~ div .error')`, 60*time.Second)
	if got := b.text(`document.getElementById('replay-denied').textContent`); got != "Newly denied: 1" {
		t.Errorf("the replay's heading = %q, want Newly denied: 1", got)
	}
	if got := b.text(`document.querySelector('table.replay tbody tr').innerText`); !strings.Contains(got, "no_telnet") || !strings.Contains(got, "review by casey") {
		t.Errorf("the newly denied example = %q", got)
	}
}

// writeTarGz writes the regular files of dir into a .tar.gz under top/,
// as tar -czf of a bundle directory makes it.
func writeTarGz(t *testing.T, path, dir, top string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: top + "/" + e.Name(), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}
