package e2e

import (
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// eventWait bounds how long a test waits for asynchronously emitted audit
// events (auth.denied, admission.reviewed, container.removed) to be
// committed. It is a deadline for a condition, not a measure of speed.
const eventWait = 30 * time.Second

// countContainers returns how many containers, running or not, carry the
// label key=value.
func countContainers(t testing.TB, key, value string) int {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+key+"="+value).CombinedOutput()
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return len(strings.Fields(string(out)))
}

// nodeContainers returns how many containers of the server's node exist.
func (s *testServer) nodeContainers(t *testing.T) int {
	t.Helper()
	return countContainers(t, sandgate.LabelNode, s.Node)
}

// auditEvents returns the audit events matching query (url-encoded filter
// parameters), read with token.
func (s *testServer) auditEvents(t *testing.T, token string, query url.Values) []sandgate.AuditRecord {
	t.Helper()
	if query.Get("limit") == "" {
		query.Set("limit", "1000")
	}
	status, _, body := s.doAs(t, token, http.MethodGet, "/v1/audit/events?"+query.Encode(), "")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/audit/events?%s = %d %s", query.Encode(), status, body)
	}
	var page api.AuditEventList
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("decode audit events: %v", err)
	}
	return page.Events
}

// waitAuditEvents polls the audit trail until done accepts the events that
// match query, and returns them. Events emitted asynchronously are
// committed by the writer's next batch; the test fails when they do not
// arrive within eventWait.
func (s *testServer) waitAuditEvents(t *testing.T, token string, query url.Values, done func([]sandgate.AuditRecord) bool) []sandgate.AuditRecord {
	t.Helper()
	deadline := time.Now().Add(eventWait)
	for {
		events := s.auditEvents(t, token, query)
		if done(events) {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit events for %s never matched; last: %s", query.Encode(), eventTypes(events))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventTypes lists the types of events, for messages.
func eventTypes(events []sandgate.AuditRecord) string {
	var b strings.Builder
	for i, ev := range events {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(ev.Type))
		if ev.Outcome != "" {
			b.WriteString("(" + ev.Outcome + ")")
		}
	}
	return "[" + b.String() + "]"
}

// hasEvent reports whether events hold one of type typ.
func hasEvent(events []sandgate.AuditRecord, typ sandgate.EventType) bool {
	for _, ev := range events {
		if ev.Type == typ {
			return true
		}
	}
	return false
}

// countEvents counts the events of type typ.
func countEvents(events []sandgate.AuditRecord, typ sandgate.EventType) int {
	n := 0
	for _, ev := range events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// apiError decodes an error answer; a body that is not the error shape
// gives a zero ErrorBody.
func apiError(body []byte) api.ErrorBody {
	var e api.ErrorBody
	_ = json.Unmarshal(body, &e)
	return e
}

// sourceClient returns an HTTP client whose connections come from the
// loopback address src (such as 127.0.0.7), so that a test can act as
// several source addresses against the per-source rate limits.
func sourceClient(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext:       d.DialContext,
		DisableKeepAlives: true,
	}}
}

// request is one HTTP request of a table test.
type request struct {
	method, path, body string
	token              string
	header             map[string]string
}

// send sends r with client and returns the status, headers and body.
func (s *testServer) send(t *testing.T, client *http.Client, r request) (int, http.Header, []byte) {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.method, s.URL+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := s.checked(client).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", r.method, r.path, err)
	}
	return resp.StatusCode, resp.Header, data
}

// submitWait posts a run spec with ?wait=60s as token and returns the
// finished run.
func (s *testServer) submitWait(t *testing.T, token, spec string) api.RunView {
	t.Helper()
	status, _, body := s.doAs(t, token, http.MethodPost, "/v1/runs?wait=60s", spec)
	if status != http.StatusOK {
		t.Fatalf("POST /v1/runs?wait=60s %s = %d %s", spec, status, body)
	}
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil {
		t.Fatal(err)
	}
	return run
}

// The exit statuses the command line's help promises, which the tests
// hold it to.
const (
	exitPlatform      = 125 // sandgate run: sandgate could not run it
	exitDenied        = 126 // sandgate run: policy denied the run
	exitReplayChanged = 3   // policy replay --fail-on-change: a decision would change
	exitWitnessAlarm  = 2   // audit witness: an alarm
)

// defaultMaxConcurrent is SANDGATE_MAX_CONCURRENT's default, which the
// benchmarks give `docker run` too.
const defaultMaxConcurrent = 4

// cliResult is what a command line run ended with.
type cliResult struct {
	stdout, stderr string
	code           int
	message        string
}

// static reports whether path is an ELF executable with no interpreter.
func static(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return f.Type == elf.ET_EXEC || f.Type == elf.ET_DYN
}
