package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

var testCallbackKey = []byte("callback-key-0123456789abcdef")

// verifyCallback is the reference receiver check docs/workspaces.md
// shows: the signature is v1= and the hex HMAC-SHA256 of the timestamp,
// a dot and the body, compared in constant time, and the timestamp is
// within tolerance of now (a replayed request is refused).
func verifyCallback(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	ts := h.Get("X-Sandgate-Timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("no timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("timestamp out of tolerance")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(ts + "." + string(body)))
	want := "v1=" + hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(h.Get("X-Sandgate-Signature")), []byte(want)) {
		return errors.New("bad signature")
	}
	return nil
}

// receiver is a loopback callback receiver: it answers each request with
// the next of its statuses (the last one for ever after), after wait.
type receiver struct {
	t        *testing.T
	srv      *httptest.Server
	statuses []int
	wait     time.Duration

	mu       sync.Mutex
	requests []receivedCallback
	hits     atomic.Int64
}

type receivedCallback struct {
	header http.Header
	body   []byte
	err    error // of verifyCallback
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{t: t, statuses: statuses}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := int(r.hits.Add(1))
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.requests = append(r.requests, receivedCallback{header: req.Header.Clone(), body: body,
			err: verifyCallback(testCallbackKey, req.Header, body, time.Now(), 5*time.Minute)})
		wait := r.wait
		r.mu.Unlock()
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-req.Context().Done():
				return
			}
		}
		status := http.StatusOK
		if len(r.statuses) > 0 {
			status = r.statuses[min(n, len(r.statuses))-1]
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() []receivedCallback {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedCallback(nil), r.requests...)
}

// callbackHarness is a callbacks owner whose events land in a recorder.
type callbackHarness struct {
	c       *callbacks
	rec     *fakeRecorder
	results sync.Map
}

func newCallbackHarness(t *testing.T, edit func(*callbackOptions)) *callbackHarness {
	h := &callbackHarness{rec: &fakeRecorder{}}
	opt := callbackOptions{
		key: testCallbackKey, attempts: 5, timeout: 2 * time.Second, backoff: time.Nanosecond,
		workers: 2, queue: 16, events: h.rec, now: time.Now, node: "test-node",
		log: slog.New(slog.DiscardHandler),
		delivered: func(result string) {
			n, _ := h.results.LoadOrStore(result, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		},
	}
	if edit != nil {
		edit(&opt)
	}
	h.c = newCallbacks(opt)
	t.Cleanup(func() { h.c.shutdown(context.Background(), time.Second) })
	return h
}

func finishedRun() sandgate.Run {
	code := 3
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	return sandgate.Run{
		ID: "0193a4b2-0000-7000-8000-000000000001", CorrelationID: "corr-cb-1", DecisionID: "dec-1",
		PolicyRevision: "sha256:test", Principal: "alice", Team: "payments", Node: "test-node",
		State: sandgate.StateFinished, Outcome: sandgate.OutcomeFailed, ExitCode: &code,
		CreatedAt: at, FinishedAt: &at, DurationMS: 1500,
		Stdout: sandgate.Output{Raw: []byte("secret output\n"), Encoding: "utf-8", Bytes: 14, SHA256: "abc"},
		Stderr: sandgate.Output{Data: "warn\n", Encoding: "utf-8", Bytes: 5, SHA256: "def"},
		Spec:   sandgate.RunSpec{Image: "sandgate/sandbox:latest", Command: []string{"sh"}},
	}
}

// send enqueues a callback of finishedRun to url and waits for its event.
func (h *callbackHarness) send(t *testing.T, url string) sandgate.Event {
	t.Helper()
	run := finishedRun()
	run.Spec.CallbackURL = url
	body, err := callbackBody(run)
	if err != nil {
		t.Fatal(err)
	}
	seen := len(h.events())
	h.c.enqueue(callback{url: url, shown: url, run: run, body: body})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if evs := h.events(); len(evs) > seen {
			return evs[seen]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no callback event")
	return sandgate.Event{}
}

// events are the callback events recorded so far.
func (h *callbackHarness) events() []sandgate.Event {
	var out []sandgate.Event
	for _, ev := range h.rec.all() {
		if ev.Type == sandgate.EventCallbackDelivered || ev.Type == sandgate.EventCallbackFailed {
			out = append(out, ev)
		}
	}
	return out
}

func TestCallbackDeliveredSigned(t *testing.T) {
	r := newReceiver(t)
	h := newCallbackHarness(t, nil)
	url := r.srv.URL + "/hooks/done?team=payments"
	ev := h.send(t, url)
	if ev.Type != sandgate.EventCallbackDelivered || ev.Outcome != "delivered" {
		t.Fatalf("event %s %s: %v", ev.Type, ev.Outcome, ev.Payload)
	}
	if ev.CorrelationID != "corr-cb-1" || ev.RunID != finishedRun().ID || ev.Actor != "alice" || ev.Team != "payments" || ev.Node != "test-node" {
		t.Errorf("event is not tied to its run: %+v", ev)
	}
	if ev.Payload["url"] != url || ev.Payload["attempts"] != 1 || ev.Payload["status"] != 200 {
		t.Errorf("payload %v", ev.Payload)
	}
	if _, ok := ev.Payload["error"]; ok {
		t.Errorf("a delivered callback has an error: %v", ev.Payload)
	}
	got := r.got()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests", len(got))
	}
	req := got[0]
	if req.err != nil {
		t.Errorf("signature does not verify: %v", req.err)
	}
	for k, want := range map[string]string{
		"Content-Type": "application/json", "X-Sandgate-Run-ID": finishedRun().ID, "User-Agent": "sandgate/" + sandgate.Version,
	} {
		if v := req.header.Get(k); v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
	// A changed body or another key does not verify.
	if verifyCallback(testCallbackKey, req.header, append(req.body, ' '), time.Now(), time.Minute) == nil {
		t.Error("a changed body verifies")
	}
	if verifyCallback([]byte("another-key-0123456789"), req.header, req.body, time.Now(), time.Minute) == nil {
		t.Error("another key verifies")
	}
	if verifyCallback(testCallbackKey, req.header, req.body, time.Now().Add(time.Hour), time.Minute) == nil {
		t.Error("an old timestamp verifies")
	}
	var view api.RunView
	if err := json.Unmarshal(req.body, &view); err != nil {
		t.Fatalf("body is not a run: %v\n%s", err, req.body)
	}
	if view.ID != finishedRun().ID || view.Outcome == nil || *view.Outcome != sandgate.OutcomeFailed || *view.ExitCode != 3 || view.Spec.CallbackURL != url {
		t.Errorf("body %s", req.body)
	}
	if view.Stdout.Data != "" || view.Stderr.Data != "" || view.Stdout.Bytes != 14 || view.Stdout.SHA256 != "abc" || view.Stderr.SHA256 != "def" {
		t.Errorf("output in the body: stdout %+v stderr %+v", view.Stdout, view.Stderr)
	}
	if strings.Contains(string(req.body), "secret output") {
		t.Errorf("the body carries the output: %s", req.body)
	}
}

func TestCallbackRetries(t *testing.T) {
	for _, status := range []int{500, 503, 408, 429} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			r := newReceiver(t, status, status, 200)
			h := newCallbackHarness(t, nil)
			ev := h.send(t, r.srv.URL)
			if ev.Type != sandgate.EventCallbackDelivered || ev.Payload["attempts"] != 3 || ev.Payload["status"] != 200 {
				t.Fatalf("event %s %v", ev.Type, ev.Payload)
			}
			// Each attempt is signed afresh, and each verifies.
			for i, req := range r.got() {
				if req.err != nil {
					t.Errorf("attempt %d: %v", i+1, req.err)
				}
			}
		})
	}
}

func TestCallbackExhausted(t *testing.T) {
	r := newReceiver(t, 503)
	h := newCallbackHarness(t, func(o *callbackOptions) { o.attempts = 3 })
	ev := h.send(t, r.srv.URL)
	if ev.Type != sandgate.EventCallbackFailed || ev.Payload["reason"] != callbackExhausted || ev.Payload["attempts"] != 3 || ev.Payload["status"] != 503 {
		t.Fatalf("event %s %v", ev.Type, ev.Payload)
	}
	if n := r.hits.Load(); n != 3 {
		t.Errorf("receiver hit %d times, want 3", n)
	}
}

func TestCallbackPermanentFailureNotRetried(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 410, 422} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			r := newReceiver(t, status)
			h := newCallbackHarness(t, nil)
			ev := h.send(t, r.srv.URL)
			if ev.Type != sandgate.EventCallbackFailed || ev.Payload["reason"] != callbackRefused || ev.Payload["attempts"] != 1 || ev.Payload["status"] != status {
				t.Fatalf("event %s %v", ev.Type, ev.Payload)
			}
			if !strings.Contains(fmt.Sprint(ev.Payload["error"]), strconv.Itoa(status)) {
				t.Errorf("error %v does not name the status", ev.Payload["error"])
			}
		})
	}
}

func TestCallbackTimeout(t *testing.T) {
	r := newReceiver(t)
	r.wait = 5 * time.Second
	h := newCallbackHarness(t, func(o *callbackOptions) { o.attempts, o.timeout = 2, 100*time.Millisecond })
	ev := h.send(t, r.srv.URL)
	if ev.Type != sandgate.EventCallbackFailed || ev.Payload["reason"] != callbackExhausted || ev.Payload["attempts"] != 2 || ev.Payload["status"] != 0 {
		t.Fatalf("event %s %v", ev.Type, ev.Payload)
	}
	if !strings.Contains(fmt.Sprint(ev.Payload["error"]), "no answer within 100ms") {
		t.Errorf("error %v", ev.Payload["error"])
	}
}

func TestCallbackRedirectRefused(t *testing.T) {
	elsewhere := newReceiver(t)
	redirect := httptest.NewServer(http.RedirectHandler(elsewhere.srv.URL, http.StatusFound))
	t.Cleanup(redirect.Close)
	h := newCallbackHarness(t, nil)
	ev := h.send(t, redirect.URL)
	if ev.Type != sandgate.EventCallbackFailed || ev.Payload["reason"] != callbackRefused || ev.Payload["status"] != 302 || ev.Payload["attempts"] != 1 {
		t.Fatalf("event %s %v", ev.Type, ev.Payload)
	}
	if !strings.Contains(fmt.Sprint(ev.Payload["error"]), "redirects are not followed") {
		t.Errorf("error %v", ev.Payload["error"])
	}
	if n := elsewhere.hits.Load(); n != 0 {
		t.Errorf("the redirect was followed (%d requests)", n)
	}
}

// TestCallbackAddressesRefused: link-local (cloud metadata), unspecified
// and multicast addresses are refused whatever the policy allowed, named
// by address or by a host name that resolves to them, and so is a name
// that resolves to loopback; nothing is retried.
func TestCallbackAddressesRefused(t *testing.T) {
	names := map[string][]netip.Addr{
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		"v6ll.test":     {netip.MustParseAddr("fe80::1")},
		"mapped.test":   {netip.MustParseAddr("::ffff:169.254.169.254")},
		"zero.test":     {netip.MustParseAddr("0.0.0.0")},
		"sneaky.test":   {netip.MustParseAddr("127.0.0.1")},
	}
	h := newCallbackHarness(t, func(o *callbackOptions) {
		o.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
			if a, ok := names[host]; ok {
				return a, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		}
	})
	for _, tt := range []struct{ url, want string }{
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://[fe80::1]:8080/", "link-local"},
		{"http://0.0.0.0:8080/", "unspecified"},
		{"http://239.1.2.3/", "multicast"},
		{"http://metadata.test/", "link-local"},
		{"http://v6ll.test/", "link-local"},
		{"http://mapped.test/", "link-local"},
		{"http://zero.test/", "unspecified"},
		{"http://sneaky.test:8080/", "resolves to the loopback address"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			ev := h.send(t, tt.url)
			if ev.Type != sandgate.EventCallbackFailed || ev.Payload["reason"] != callbackRefused || ev.Payload["attempts"] != 1 {
				t.Fatalf("event %s %v", ev.Type, ev.Payload)
			}
			if !strings.Contains(fmt.Sprint(ev.Payload["error"]), tt.want) {
				t.Errorf("error %v, want it to say %q", ev.Payload["error"], tt.want)
			}
		})
	}
}

// TestCallbackConnectsToTheAddressItChecked: of a name's addresses, the
// refused ones are skipped and the connection goes to one that was
// checked, from a single lookup per attempt.
func TestCallbackConnectsToTheAddressItChecked(t *testing.T) {
	r := newReceiver(t)
	port := r.srv.Listener.Addr().(interface{ AddrPort() netip.AddrPort }).AddrPort().Port()
	var lookups atomic.Int64
	h := newCallbackHarness(t, func(o *callbackOptions) {
		o.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
			lookups.Add(1)
			return []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("127.0.0.1")}, nil
		}
	})
	ev := h.send(t, fmt.Sprintf("http://localhost:%d/cb", port))
	if ev.Type != sandgate.EventCallbackDelivered {
		t.Fatalf("event %s %v", ev.Type, ev.Payload)
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d lookups for one attempt", n)
	}
}

func TestCallbackShutdown(t *testing.T) {
	r := newReceiver(t)
	r.wait = time.Minute
	h := newCallbackHarness(t, func(o *callbackOptions) { o.workers = 1 })
	run := finishedRun()
	body, _ := callbackBody(run)
	for range 3 {
		h.c.enqueue(callback{url: r.srv.URL, shown: r.srv.URL, run: run, body: body})
	}
	for r.hits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	h.c.shutdown(context.Background(), 50*time.Millisecond)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("shutdown took %s", took)
	}
	h.c.enqueue(callback{url: r.srv.URL, shown: r.srv.URL, run: run, body: body})
	failed := h.rec.ofType(sandgate.EventCallbackFailed)
	if len(failed) != 4 {
		t.Fatalf("%d callback.failed events, want 4: %v", len(failed), h.rec.all())
	}
	for _, ev := range failed {
		if ev.Payload["reason"] != callbackShutdown || ev.CorrelationID != run.CorrelationID {
			t.Errorf("event %+v", ev)
		}
	}
	if n, _ := h.results.Load(callbackShutdown); n == nil || n.(*atomic.Int64).Load() != 4 {
		t.Errorf("shutdown results counted: %v", n)
	}
}

// TestRunCallbackThroughGateway: a run with a callback_url ends, the
// receiver gets the run signed, the trail gets callback.delivered with
// the run's correlation ID, and the metric counts it; without a callback
// key the gateway refuses such a run.
func TestRunCallbackThroughGateway(t *testing.T) {
	r := newReceiver(t)
	e := newEnv(t, func(c *Config, _ *testEnv) { c.CallbackKey = testCallbackKey; c.CallbackBackoff = time.Nanosecond })
	body := fmt.Sprintf(`{"command": ["echo", "hi"], "callback_url": %q}`, r.srv.URL+"/done")
	resp := e.do("POST", "/v1/runs?wait=5s", tokAlice, body, "X-Correlation-ID: corr-callback-e2e")
	if resp.status != http.StatusOK {
		t.Fatalf("submit: %d %s", resp.status, resp.body)
	}
	run := resp.run(t)
	deadline := time.Now().Add(10 * time.Second)
	var ev []sandgate.Event
	for time.Now().Before(deadline) {
		if ev = e.recorder.ofType(sandgate.EventCallbackDelivered); len(ev) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(ev) != 1 || ev[0].CorrelationID != "corr-callback-e2e" || ev[0].RunID != run.ID {
		t.Fatalf("callback.delivered events: %+v", ev)
	}
	got := r.got()
	if len(got) != 1 || got[0].err != nil {
		t.Fatalf("receiver: %+v", got)
	}
	var view api.RunView
	if err := json.Unmarshal(got[0].body, &view); err != nil || view.ID != run.ID || !view.Finished() || view.Stdout.Data != "" || view.Stdout.Bytes != 3 {
		t.Errorf("callback body %s (%v)", got[0].body, err)
	}
	metrics := e.do("GET", "/metrics", "", "")
	if !strings.Contains(string(metrics.body), `sandgate_callbacks_total{result="delivered"} 1`) {
		t.Errorf("metrics do not count the delivery")
	}

	plain := newEnv(t)
	resp = plain.do("POST", "/v1/runs", tokAlice, body)
	if resp.status != http.StatusBadRequest || !strings.Contains(string(resp.body), "callback_url") {
		t.Errorf("without a callback key: %d %s", resp.status, resp.body)
	}
}

// TestRunCallbackMaskedURL: when the bundle's mask names callback_url, the
// callback still goes to the real URL, and the trail and the run show only
// its keyed hash.
func TestRunCallbackMaskedURL(t *testing.T) {
	r := newReceiver(t)
	e := newEnv(t, func(c *Config, e *testEnv) {
		c.CallbackKey = testCallbackKey
		e.admitter.mask = []string{"callback_url"}
	})
	target := r.srv.URL + "/done?token=s3cret"
	resp := e.do("POST", "/v1/runs?wait=5s", tokAlice, fmt.Sprintf(`{"command": ["echo", "hi"], "callback_url": %q}`, target))
	if resp.status != http.StatusOK {
		t.Fatalf("submit: %d %s", resp.status, resp.body)
	}
	run := resp.run(t)
	if !strings.HasPrefix(run.Spec.CallbackURL, sandgate.MaskPrefix) {
		t.Errorf("the run shows callback_url %q", run.Spec.CallbackURL)
	}
	deadline := time.Now().Add(10 * time.Second)
	var ev []sandgate.Event
	for time.Now().Before(deadline) {
		if ev = e.recorder.ofType(sandgate.EventCallbackDelivered); len(ev) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(ev) != 1 {
		t.Fatalf("no callback.delivered: %v", e.recorder.all())
	}
	if u := fmt.Sprint(ev[0].Payload["url"]); !strings.HasPrefix(u, sandgate.MaskPrefix) || strings.Contains(u, "s3cret") {
		t.Errorf("the trail shows url %q", u)
	}
	if got := r.got(); len(got) != 1 || strings.Contains(string(got[0].body), "s3cret") {
		t.Errorf("receiver got %d callbacks; the body must show the URL masked", len(got))
	}
}
