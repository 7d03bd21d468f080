package e2e

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/gateway/api"
)

// The principals of the console tests: casey may do everything the
// console shows (submit, review and read the policy, read the trail); sam
// is security staff alone.
var consolePrincipals = []authPrincipal{
	{"casey", "alpha", []sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleSecurity, sandgate.RoleAuditor}},
	{"sam", "alpha", []sandgate.Role{sandgate.RoleSecurity}},
}

// browserSession is a headless Chromium driven by chromedp, with every
// console error, uncaught exception and dialog it saw.
type browserSession struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string
	dialogs  []string
}

// requireChromium returns Debian's chromium, skipping the test when it is
// missing, except under CI=true, where a missing browser fails it.
func requireChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is required (CI=true): deploy/bootstrap.sh installs it")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// newBrowser starts Chromium with nothing that reaches the network on
// its own, a fresh profile and a laptop's window, and downloads into dir.
func newBrowser(t *testing.T, downloads string) *browserSession {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(requireChromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,InterestFeedContentSuggestions"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1366, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browserSession{t: t, ctx: ctx}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			// A refused request (the bad token, a role's 403) is logged
			// by the browser as a failed load: expected, and the page
			// shows it. Anything else of level error is a defect: a
			// script error, a CSP or Trusted Types violation.
			if (m.Type == "error" && m.Source != "network") || m.IsException() {
				b.mu.Lock()
				b.problems = append(b.problems, m.String())
				b.mu.Unlock()
			}
		}
	}()
	_ = chromedp.Listen(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			b.mu.Lock()
			b.dialogs = append(b.dialogs, d.Message)
			b.mu.Unlock()
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			}()
		}
	})
	if downloads != "" {
		_, err := chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads,
		})
		if err != nil {
			t.Fatalf("set download behaviour: %v", err)
		}
	}
	return b
}

// do runs actions, failing the test with what the page said.
func (b *browserSession) do(step string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s\nconsole: %v", step, err, b.text("document.body.innerText"), b.consoleProblems())
	}
}

// eval evaluates a JavaScript expression in the page.
func evalIn[T any](b *browserSession, expr string, opts ...chromedp.EvaluateOption) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (b *browserSession) text(expr string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	v, _ := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	return v
}

// waitJS polls expr until it is true.
func (b *browserSession) waitJS(step, expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: %s is still not true after %v (last error %v)\npage: %s\nconsole: %v", step, expr, timeout, err,
				b.text("document.body.innerText"), b.consoleProblems())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *browserSession) consoleProblems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append(append([]string(nil), b.problems...), b.dialogs...)
}

// screenshot saves the page as name.png in SANDGATE_CONSOLE_SCREENSHOTS
// (docs/console when set by make console-screenshots), else in a
// temporary directory: each page is rendered and captured either way.
func (b *browserSession) screenshot(dir, name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn types token into the sign-in form and submits it with the
// keyboard.
func (b *browserSession) signIn(token string) {
	b.t.Helper()
	b.do("sign in",
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.SendKeys(chromedp.CSS("#token"), kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#nav")))
}

// goTo changes the console's page as a click on a link would.
func (b *browserSession) goTo(hash string) {
	b.t.Helper()
	evalIn[bool](b, fmt.Sprintf("(location.hash = %q, true)", hash))
}

func screenshotDir(t *testing.T) string {
	if d := os.Getenv("SANDGATE_CONSOLE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// hostileCommand prints what a hostile run would to attack a page that
// shows its output: a script element, an event handler in markup, ANSI
// colour and cursor escapes, and a bidirectional override; it then keeps
// running long enough for the page to see it live.
const hostileCommand = `printf '<script>alert("out")</script>\n<img src=x onerror=alert("img")>\n\033[31mred\033[0m \033[2J\342\200\256txt.exe\n'; sleep 6; echo done`

// TestConsoleEndToEnd drives the console in Debian's headless Chromium
// against a real gateway (Docker, Postgres): a bad token is refused and a
// good one signs in by keyboard; a hostile run's page shows its state
// change live from running to finished, and its output, labels and
// command, full of markup and escapes, only as text; a review of a
// privileged spec is denied with its rules and controls; the run's
// correlation ID lists its lifecycle in the trail, which exports as JSONL
// and verifies; the overview draws its charts. No page raises a script
// error, a CSP violation or a dialog, and a reload forgets the token.
func TestConsoleEndToEnd(t *testing.T) {
	requireChromium(t)
	tokensFile, tok := writeTokensFile(t, consolePrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile))
	downloads := t.TempDir()
	shots := screenshotDir(t)
	b := newBrowser(t, downloads)

	// Some history for the overview: a success, a failure, a denial.
	s.submitWait(t, tok["casey"], `{"command":["true"],"labels":{"ticket":"ENG-1"}}`)
	s.submitWait(t, tok["casey"], `{"command":["sh","-c","echo failing >&2; exit 3"]}`)
	if status, _, body := s.doAs(t, tok["casey"], http.MethodPost, "/v1/runs", `{"command":["true"],"privileged":true}`); status != http.StatusForbidden {
		t.Fatalf("privileged run = %d %s, want 403", status, body)
	}

	// Sign in: a bad token is refused, the good one is typed and
	// submitted with the keyboard and never lands in the URL.
	b.do("open the console", chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.screenshot(shots, "signin")
	b.do("bad token", chromedp.SendKeys(chromedp.CSS("#token"), "sgtest_wrong"), chromedp.SendKeys(chromedp.CSS("#token"), kb.Enter))
	b.waitJS("bad token refused", `document.getElementById('signin-error').textContent.includes('not valid')`, 10*time.Second)
	b.signIn(tok["casey"])
	if loc := b.text("location.href"); strings.Contains(loc, tok["casey"]) {
		t.Fatalf("the token is in the URL: %s", loc)
	}
	if v := b.text("document.getElementById('token').value"); v != "" {
		t.Errorf("the sign-in field kept the token")
	}

	// A hostile run, started just before its page is opened.
	spec, _ := json.Marshal(map[string]any{
		"command": []string{"sh", "-c", hostileCommand},
		"labels":  map[string]string{"note": `<img src=x onerror=alert("label")>`, "ansi": "\x1b[1mbold"},
	})
	status, _, body := s.doAs(t, tok["casey"], http.MethodPost, "/v1/runs", string(spec))
	if status != http.StatusAccepted {
		t.Fatalf("hostile run = %d %s", status, body)
	}
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil {
		t.Fatal(err)
	}

	// The runs list shows it, live.
	b.goTo("#/runs")
	b.waitJS("the run is listed", fmt.Sprintf(`!!document.querySelector('tr[data-run=%q]')`, run.ID), 20*time.Second)
	b.screenshot(shots, "runs")

	// Its page: the state changes to finished as it happens, with no
	// reload; the output arrives live.
	b.do("open the run", chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="#/runs/%s"]`, run.ID))))
	b.waitJS("the run page shows it unfinished",
		`['pending','creating','running'].includes(document.getElementById('run-state')?.dataset.state)`, 20*time.Second)
	b.waitJS("live output while running",
		`document.getElementById('out-stdout')?.textContent.includes('alert("out")') && document.getElementById('run-state').dataset.state !== 'finished'`, 20*time.Second)
	b.waitJS("the state changes to finished", `document.getElementById('run-state').dataset.state === 'finished'`, 60*time.Second)
	b.waitJS("the lifecycle from the trail", `[...document.querySelectorAll('table.timeline code')].some(c => c.textContent === 'container.removed')`, 20*time.Second)
	if got := b.text(`document.getElementById('run-state').dataset.outcome`); got != "succeeded" {
		t.Errorf("outcome on the page = %q, want succeeded", got)
	}
	b.screenshot(shots, "run")

	// Hostile strings are text: the markup is shown, no element was made
	// of it, the escapes are visible escapes.
	checks := []struct{ name, expr string }{
		{"output shows the script tag as text", `document.getElementById('out-stdout').textContent.includes('<script>alert("out")</script>')`},
		{"output shows the img markup as text", `document.getElementById('out-stdout').textContent.includes('<img src=x onerror=alert("img")>')`},
		{"the ANSI escape is shown escaped", `[...document.querySelectorAll('#out-stdout .esc')].some(e => e.textContent.includes('\\x1b'))`},
		{"the bidi override is shown escaped", `[...document.querySelectorAll('#out-stdout .esc')].some(e => e.textContent.includes('\\u202e'))`},
		{"no raw ESC character on the page", `!document.body.textContent.includes('\x1b')`},
		{"the label shows its markup as text", `document.getElementById('view').textContent.includes('<img src=x onerror=alert("label")>')`},
		{"no element came from the run", `document.querySelectorAll('#view script, #view img, #view [onerror]').length === 0`},
		{"the page has no inline script", `[...document.scripts].every(s => s.src !== '')`},
		{"the finished output is in the done line", `document.getElementById('out-stdout').textContent.includes('done')`},
	}
	for _, c := range checks {
		if !evalIn[bool](b, c.expr) {
			t.Errorf("%s: %s is false", c.name, c.expr)
		}
	}

	// The receipt button downloads the run's receipt from
	// GET /v1/runs/{id}/receipt (once every event of the run is under a
	// checkpoint note), which verifies offline.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if status, _, _ := s.doAs(t, tok["casey"], http.MethodGet, "/v1/runs/"+run.ID+"/receipt", ""); status == http.StatusOK {
			break
		}
	}
	b.do("download the receipt", chromedp.Click(chromedp.CSS("#receipt")))
	var rec sandgate.Receipt
	if err := json.Unmarshal([]byte(waitFile(t, filepath.Join(downloads, "receipt-"+run.ID+".json"))), &rec); err != nil {
		t.Fatalf("the downloaded receipt: %v", err)
	}
	gwKey, err := proof.LoadSigningKey(filepath.Join(filepath.Dir(s.Env["SANDGATE_SPOOL_DIR"]), "checkpoint.key"), false)
	if err != nil {
		t.Fatal(err)
	}
	pinned := proof.ReceiptOptions{Anchors: proof.Anchors{Pinned: []ed25519.PublicKey{gwKey.Public().(ed25519.PublicKey)}}}
	if rep := proof.VerifyReceipt(rec, pinned); !rep.OK || !slices.Contains(rep.Types, "container.exited") {
		t.Errorf("the downloaded receipt does not verify: %+v", rep)
	}

	// The decoder behind every output view, on the bytes a hostile run
	// can print: escapes are marked ⟦…⟧.
	decoded := evalIn[string](b, `(async () => {
		const f = await import('/console/assets/js/format.js');
		const cases = [[0x61,0x1b,0x5b,0x33,0x31,0x6d,0x62], [0xff,0x61], [0xc2,0x85], [0xc0,0xaf], [0xed,0xa0,0x80],
			[0x61,0x0d,0x0a,0x62,0x0d,0x63], [0xc3,0xa9,0x09,0x3c,0x62,0x3e], [0xe2,0x80,0xae,0x61], [0xf0,0x9f,0x98,0x80], [0xe2,0x82]];
		return JSON.stringify(cases.map(c => f.escapeOutput(new Uint8Array(c)).map(s => s.esc ? '⟦' + s.text + '⟧' : s.text).join('')));
	})()`, chromedp.EvalAwaitPromise)
	wantDecoded := `["a⟦\\x1b⟧[31mb","⟦\\xff⟧a","⟦\\u0085⟧","⟦\\xc0\\xaf⟧","⟦\\xed\\xa0\\x80⟧","a\nb⟦\\r⟧c","é\t<b>","⟦\\u202e⟧a","😀","⟦\\xe2\\x82⟧"]`
	if decoded != wantDecoded {
		t.Errorf("escapeOutput:\n got %s\nwant %s", decoded, wantDecoded)
	}

	// The correlation ID leads to the run's events in the trail.
	b.do("follow the correlation ID", chromedp.Click(chromedp.CSS(`dl.facts a[href^="#/audit?correlation_id="]`)))
	b.waitJS("the run's events are listed", `!!document.querySelector('table.events tr[data-type="container.exited"]')`, 20*time.Second)
	if got := b.text(`document.getElementById('a-correlation_id').value`); got != run.CorrelationID {
		t.Errorf("audit filter correlation_id = %q, want %q", got, run.CorrelationID)
	}

	// Export them: a JSONL file of exactly this correlation ID's events.
	b.do("export JSONL", chromedp.Click(chromedp.CSS("#export-jsonl")))
	exported := waitFile(t, filepath.Join(downloads, "sandgate-audit.jsonl"))
	types := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(exported))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var ev sandgate.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		if ev.CorrelationID != run.CorrelationID {
			t.Errorf("exported an event of correlation ID %q", ev.CorrelationID)
		}
		types[string(ev.Type)] = true
	}
	for _, want := range []string{"run.requested", "admission.allowed", "container.started", "container.exited", "container.removed"} {
		if !types[want] {
			t.Errorf("the export has no %s event: %v", want, types)
		}
	}
	b.waitJS("the export is confirmed", `document.getElementById('export-result').textContent.includes('Downloaded')`, 10*time.Second)

	// Verify the trail from the page.
	b.do("verify", chromedp.Click(chromedp.CSS("#verify")))
	b.waitJS("verify answers", `document.getElementById('verify-result').textContent.includes('events checked')`, 60*time.Second)
	b.screenshot(shots, "audit")

	// A denied review, with each violation's rule, controls and reason.
	b.goTo("#/policies")
	b.waitJS("the policy in force", `document.getElementById('policy-revision')?.textContent.startsWith('sha256:')`, 20*time.Second)
	b.do("submit a review", chromedp.Click(chromedp.CSS("#review-submit")))
	b.waitJS("the review is denied", `!!document.querySelector('#review-result.bad')`, 20*time.Second)
	for _, c := range []struct{ name, expr string }{
		{"no_privileged is named", `[...document.querySelectorAll('#review-result table.violations code')].some(c => c.textContent === 'no_privileged')`},
		{"its controls are listed", `document.getElementById('review-result').textContent.includes('CIS-5.5')`},
		{"the host network is denied too", `document.getElementById('review-result').textContent.includes('host')`},
	} {
		if !evalIn[bool](b, c.expr) {
			t.Errorf("%s: %s is false\n%s", c.name, c.expr, b.text(`document.getElementById('review-result').innerText`))
		}
	}
	b.screenshot(shots, "policies")

	// The overview's charts, from the runs and the denials.
	b.goTo("#/overview")
	b.waitJS("the charts are drawn", `['volume','rules','outcomes','latency'].every(c => document.querySelector('[data-chart="'+c+'"] svg'))`, 30*time.Second)
	if !evalIn[bool](b, `[...document.querySelectorAll('[data-chart="rules"] td')].some(td => td.textContent === 'no_privileged')`) {
		t.Errorf("denials by rule does not count no_privileged:\n%s", b.text(`document.querySelector('[data-chart="rules"]').innerText`))
	}
	b.screenshot(shots, "overview")

	// Every form control has a label and every button a name.
	unlabelled := b.text(`JSON.stringify([...document.querySelectorAll('input, select, textarea')].filter(e => !e.labels?.length && !e.getAttribute('aria-label')).map(e => e.id || e.name))`)
	if unlabelled != "[]" {
		t.Errorf("form controls without a label: %s", unlabelled)
	}

	// Reloading forgets the token: it was only in the page's memory.
	b.do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#token")))
	if evalIn[bool](b, `!document.getElementById('nav').hidden`) {
		t.Errorf("the console is still signed in after a reload")
	}
	if got := b.consoleProblems(); len(got) > 0 {
		t.Errorf("the browser reported errors or dialogs: %q", got)
	}
}

// TestConsoleRoles signs in as security staff, who may not read runs or
// the trail: the navigation offers only the pages their role can use,
// the audit page says which role it needs (and the API refused the
// request behind it), and the overview shows denials by rule from the
// gateway's metrics instead of the trail.
func TestConsoleRoles(t *testing.T) {
	requireChromium(t)
	tokensFile, tok := writeTokensFile(t, consolePrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile))
	if status, _, body := s.doAs(t, tok["casey"], http.MethodPost, "/v1/runs", `{"command":["true"],"cap_add":["SYS_ADMIN"]}`); status != http.StatusForbidden {
		t.Fatalf("run with SYS_ADMIN = %d %s, want 403", status, body)
	}
	b := newBrowser(t, "")
	b.do("open the console", chromedp.Navigate(s.URL+"/console/#/audit"))
	b.signIn(tok["sam"])
	nav := b.text(`JSON.stringify([...document.querySelectorAll('#nav li')].filter(li => !li.hidden).map(li => li.textContent.trim()))`)
	if nav != `["Overview","Policies"]` {
		t.Errorf("navigation for security staff = %s, want Overview and Policies", nav)
	}
	b.waitJS("the audit page names its role", `document.getElementById('view').textContent.includes('needs the role auditor or admin')`, 10*time.Second)
	b.goTo("#/overview")
	b.waitJS("denials by rule from the metrics", `[...document.querySelectorAll('[data-chart="rules"] td')].some(td => td.textContent === 'capabilities')`, 20*time.Second)
	// The API, not the page, is what refuses: the same token cannot read
	// the trail.
	if status, _, _ := s.doAs(t, tok["sam"], http.MethodGet, "/v1/audit/events", ""); status != http.StatusForbidden {
		t.Errorf("GET /v1/audit/events as security = %d, want 403", status)
	}
	if got := b.consoleProblems(); len(got) > 0 {
		t.Errorf("the browser reported errors or dialogs: %q", got)
	}
}

// waitFile waits for a download to complete and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			entries, _ := os.ReadDir(filepath.Dir(path))
			names := []string{}
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("no download %s after 30s (the directory holds %v)", path, names)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
