package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// TestLoadPrincipals reads YAML and JSON tokens files and refuses bad ones.
func TestLoadPrincipals(t *testing.T) {
	hash := HashToken("s3cret")
	tests := []struct {
		name    string
		file    string
		wantErr string
	}{
		{"yaml", "principals:\n  - name: alice\n    team: payments\n    roles: [submitter]\n    token_sha256: " + hash + "\n", ""},
		{"json", `{"principals":[{"name":"alice","team":"payments","roles":["submitter"],"token_sha256":"` + strings.ToUpper(hash) + `"}]}`, ""},
		{"unknown field", "principals:\n  - name: alice\n    team: p\n    roles: [submitter]\n    token: s3cret\n    token_sha256: " + hash + "\n", "unknown field"},
		{"no principals", "principals: []\n", "no principals"},
		{"unknown role", "principals:\n  - name: a\n    team: p\n    roles: [root]\n    token_sha256: " + hash + "\n", "unknown role"},
		{"submitter without team", "principals:\n  - name: a\n    roles: [submitter]\n    token_sha256: " + hash + "\n", "needs a team"},
		{"short hash", "principals:\n  - name: a\n    team: p\n    roles: [admin]\n    token_sha256: abc\n", "64 hex digits"},
		{"duplicate name", "principals:\n  - {name: a, team: p, roles: [admin], token_sha256: " + hash + "}\n  - {name: a, team: p, roles: [admin], token_sha256: " + HashToken("x") + "}\n", "used twice"},
		{"duplicate hash", "principals:\n  - {name: a, team: p, roles: [admin], token_sha256: " + hash + "}\n  - {name: b, team: p, roles: [admin], token_sha256: " + hash + "}\n", "another principal"},
		{"no name", "principals:\n  - {team: p, roles: [admin], token_sha256: " + hash + "}\n", "name is required"},
		{"not yaml", "principals: [", "parse tokens file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := LoadPrincipals(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok := p.Authenticate("s3cret")
			want := sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}}
			if diff := cmp.Diff(want, got); !ok || diff != "" {
				t.Errorf("Authenticate (-want +got):\n%s", diff)
			}
			for _, bad := range []string{"", "s3cret ", "S3CRET", hash} {
				if _, ok := p.Authenticate(bad); ok {
					t.Errorf("token %q authenticated", bad)
				}
			}
		})
	}
	if _, err := LoadPrincipals(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Errorf("a missing file loaded")
	}
}

// TestDevPrincipals checks the development token.
func TestDevPrincipals(t *testing.T) {
	p, token, err := DevPrincipals()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := p.Authenticate(token)
	if !ok || got.Name != "dev" || !got.Has(sandgate.RoleSubmitter) || !got.Has(sandgate.RoleAdmin) {
		t.Errorf("dev principal = %+v, %v", got, ok)
	}
	_, token2, _ := DevPrincipals()
	if token == token2 || len(token) < 40 {
		t.Errorf("dev tokens %q and %q", token, token2)
	}
}

// TestBearerToken checks the Authorization header parser.
func TestBearerToken(t *testing.T) {
	tests := []struct {
		header, token string
		ok            bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"Bearer  abc ", "abc", true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"", "", false},
		{"Bearer " + strings.Repeat("a", 5000), "", false},
	}
	for _, tc := range tests {
		t.Run(tc.header[:min(len(tc.header), 20)], func(t *testing.T) {
			got, ok := bearerToken(tc.header)
			if got != tc.token || ok != tc.ok {
				t.Errorf("bearerToken(%q) = %q, %v", tc.header, got, ok)
			}
		})
	}
}

// TestMaskedAuditPayload checks masking on the recorded events.
func TestMaskedAuditPayload(t *testing.T) {
	e := newEnv(t)
	e.admitter.mask = []string{"labels.ticket"}
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, `{"command":["echo"],"env":{"API_KEY":"k-123"},"labels":{"ticket":"ENG-9"}}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("status %d", r.status)
	}
	if n := len(e.recorder.all()); n < 2 {
		t.Fatalf("%d events recorded", n)
	}
	for _, ev := range e.recorder.all() {
		raw, _ := json.Marshal(ev.Payload)
		if strings.Contains(string(raw), "k-123") || strings.Contains(string(raw), "ENG-9") {
			t.Errorf("%s payload leaks a secret: %s", ev.Type, raw)
		}
	}
}

// TestMetrics checks that /metrics serves every family the gateway
// promises, fed by requests, decisions, runs and lifecycle events.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	v := e.submit(tokAlice, "echo")
	e.waitFinished(v.ID)
	e.do(http.MethodPost, "/v1/runs", tokAlice, `{"command":["x"],"privileged":true}`)
	e.do(http.MethodGet, "/v1/config", "bad", "")
	sink := e.srv.metrics.Sink(sandgate.EventSinkFunc(func(sandgate.Event) {}))
	sink.Emit(sandgate.Event{Type: sandgate.EventContainerCreated, Payload: map[string]any{"duration_ms": 120.0}})
	sink.Emit(sandgate.Event{Type: sandgate.EventContainerStarted, Payload: map[string]any{"duration_ms": int64(30)}})
	sink.Emit(sandgate.Event{Type: sandgate.EventContainerCreated})
	sink.Emit(sandgate.Event{Type: sandgate.EventContainerRemoved, Payload: map[string]any{"duration_ms": json.Number("15")}})
	sink.Emit(sandgate.Event{Type: sandgate.EventOrphanRemoved})

	r := e.do(http.MethodGet, "/metrics", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("metrics: %d", r.status)
	}
	body := string(r.body)
	for _, want := range []string{
		`sandgate_admission_decisions_total{operation="run",result="allowed"} 1`,
		`sandgate_admission_decisions_total{operation="run",result="denied"} 1`,
		`sandgate_admission_rule_hits_total{action="deny",result="denied",rule="no_privileged"} 1`,
		`sandgate_runs_finished_total{outcome="succeeded"} 1`,
		`sandgate_run_cpu_seconds_sum{outcome="succeeded"} 0.25`,
		`sandgate_run_cpu_seconds_count{outcome="succeeded"} 1`,
		`sandgate_run_memory_peak_bytes_bucket{outcome="succeeded",le="1.6777216e+07"} 1`,
		`sandgate_run_memory_peak_bytes_bucket{outcome="succeeded",le="4.194304e+06"} 0`,
		`sandgate_run_wall_seconds_sum{outcome="succeeded"} 1.5`,
		`sandgate_auth_denied_total{reason="unauthenticated"} 1`,
		`sandgate_container_create_seconds_count 1`,
		`sandgate_container_start_seconds_sum 0.03`,
		`sandgate_container_cleanup_seconds_count 1`,
		`sandgate_containers_active 1`,
		`sandgate_orphans_removed_total 1`,
		`sandgate_audit_queue_depth 7`,
		`sandgate_audit_spool_bytes 0`,
		`sandgate_runs_active 0`,
		`sandgate_http_request_duration_seconds_count{method="POST",route="/v1/runs",status="202"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestNewMetricsTwice checks that two servers may share a registry.
func TestNewMetricsTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("second NewMetrics: %v", err)
	}
	m.Observe(sandgate.Event{Type: sandgate.EventOrphanRemoved})
	var got dto.Metric
	if err := m.orphansRemoved.Write(&got); err != nil {
		t.Fatal(err)
	}
	if got.GetCounter().GetValue() != 1 {
		t.Errorf("orphans = %v", got.GetCounter().GetValue())
	}
}

// TestNewValidates checks New's refusals.
func TestNewValidates(t *testing.T) {
	e := newEnv(t)
	full := e.srv.d
	tests := []struct {
		name string
		cfg  Config
		deps func(Deps) Deps
		want string
	}{
		{"short mask key", Config{MaskKey: []byte("short")}, func(d Deps) Deps { return d }, "MaskKey"},
		{"relative mount root", Config{MaskKey: make([]byte, 16), MountRoots: []string{"srv"}}, func(d Deps) Deps { return d }, "absolute"},
		{"no executor", Config{MaskKey: make([]byte, 16)}, func(d Deps) Deps { d.Executor = nil; return d }, "Executor"},
		{"no principals", Config{MaskKey: make([]byte, 16)}, func(d Deps) Deps { d.Principals = nil; return d }, "Principals"},
		{"no recorder", Config{MaskKey: make([]byte, 16)}, func(d Deps) Deps { d.Recorder = nil; return d }, "Recorder"},
		{"no mask key, recorder no redactor", Config{}, func(d Deps) Deps { return d }, "MaskKey"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.deps(full)
			d.Registry = prometheus.NewRegistry()
			d.Metrics = nil
			if _, err := New(tc.cfg, d); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestServeGracefulShutdown serves on a loopback port, starts a run, and
// ends Serve: the run is cancelled (CancelOnShutdown), stored, and Serve
// returns.
func TestServeGracefulShutdown(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) { c.CancelOnShutdown = true })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()
	c, err := client.New("http://"+ln.Addr().String(), tokAlice)
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Submit(context.Background(), sandgate.RunSpec{Command: []string{"block"}}, client.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitRunning(run.ID)
	// A follower is released by the shutdown too.
	followed := make(chan error, 1)
	go func() {
		followed <- c.Logs(context.Background(), run.ID, true, func(api.LogEvent) error { return nil })
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	select {
	case <-followed:
	case <-time.After(5 * time.Second):
		t.Fatal("the log follower was not released")
	}
	final, _ := e.store.GetRun(context.Background(), run.ID)
	if final.State != sandgate.StateFinished || final.Outcome != sandgate.OutcomeCancelled {
		t.Errorf("run after shutdown = %s %s", final.State, final.Outcome)
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Errorf("still accepting after Serve returned")
	}
}

// TestShutdownLetsRunsFinish checks the default: runs get the grace period
// to finish on their own.
func TestShutdownLetsRunsFinish(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) { c.ShutdownGrace = 5 * time.Second })
	v := e.submit(tokAlice, "block")
	e.waitRunning(v.ID)
	go func() {
		time.Sleep(100 * time.Millisecond)
		e.exec.release(v.ID)
	}()
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	final, _ := e.store.GetRun(context.Background(), v.ID)
	if final.Outcome != sandgate.OutcomeSucceeded {
		t.Errorf("outcome = %q, want succeeded", final.Outcome)
	}
}

// TestClient drives the API through the typed client.
func TestClient(t *testing.T) {
	e := newEnv(t)
	c, err := client.New(e.ts.URL+"/", tokAlice)
	if err != nil {
		t.Fatal(err)
	}
	c.HTTP = e.ts.Client()
	ctx := context.Background()
	run, err := c.Submit(ctx, sandgate.RunSpec{Command: []string{"echo", "hi"}}, client.SubmitOptions{Wait: time.Second, IdempotencyKey: "k", CorrelationID: "corr-client"})
	if err != nil {
		t.Fatal(err)
	}
	if !run.Finished() || run.Stdout.Data != "hi\n" || run.CorrelationID != "corr-client" {
		t.Errorf("run = %+v", run)
	}
	got, err := c.Run(ctx, run.ID)
	if err != nil || got.ID != run.ID {
		t.Errorf("Run = %+v, %v", got, err)
	}
	list, err := c.Runs(ctx, client.ListOptions{State: sandgate.StateFinished, Limit: 10, Since: time.Unix(0, 0)})
	if err != nil || len(list.Runs) != 1 {
		t.Errorf("Runs = %+v, %v", list, err)
	}
	var out strings.Builder
	err = c.Logs(ctx, run.ID, true, func(ev api.LogEvent) error {
		if ev.Event == api.EventStdout {
			b, _ := ev.Chunk()
			out.Write(b)
		}
		return nil
	})
	if err != nil || out.String() != "hi\n" {
		t.Errorf("Logs = %q, %v", out.String(), err)
	}
	var resumed []string
	err = c.LogsFrom(ctx, run.ID, true, "1.3.0", func(ev api.LogEvent) error {
		resumed = append(resumed, ev.ID+" "+ev.Event+" "+string(ev.Data[:min(len(ev.Data), 20)]))
		return nil
	})
	// Everything of stdout was sent already: only the exit follows.
	if diff := cmp.Diff([]string{`1.3.0 exit {"state":"finished",`}, resumed); err != nil || diff != "" {
		t.Errorf("LogsFrom (-want +got):\n%s%v", diff, err)
	}
	d, err := c.Review(ctx, sandgate.RunSpec{Command: []string{"echo"}})
	if err != nil || !d.Allow {
		t.Errorf("Review = %+v, %v", d, err)
	}
	_, err = c.Submit(ctx, sandgate.RunSpec{Command: []string{"echo"}, Privileged: true}, client.SubmitOptions{CorrelationID: "corr-denied"})
	var se *sandgate.Error
	if !errors.As(err, &se) || se.Code != sandgate.CodePolicyDenied || api.StatusOf(se.Code) != 403 {
		t.Fatalf("denied submit err = %v", err)
	}
	if got := client.CorrelationID(err); got != "corr-denied" {
		t.Errorf("CorrelationID = %q, want corr-denied", got)
	}
	dec, err := api.DecisionFromDetails(se.Details)
	if err != nil || len(dec.Violations) != 1 || dec.Violations[0].Rule != "no_privileged" {
		t.Errorf("decision = %+v, %v", dec, err)
	}
	_, err = c.Cancel(ctx, run.ID)
	if !errors.As(err, &se) || se.Code != sandgate.CodeConflict {
		t.Errorf("cancel finished run err = %v", err)
	}
	err = c.Logs(ctx, "01900000-0000-7000-8000-000000000000", false, func(api.LogEvent) error { return nil })
	if !errors.As(err, &se) || se.Code != sandgate.CodeNotFound {
		t.Errorf("logs of missing run err = %v", err)
	}
	// A field error names its field once, as the server's error does.
	_, err = c.Submit(ctx, sandgate.RunSpec{Command: []string{"echo"}, SessionID: strings.Repeat("s", sandgate.MaxIDBytes+1)}, client.SubmitOptions{})
	if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest || se.Field != "session_id" ||
		strings.Count(se.Error(), "session_id") != 1 || strings.HasPrefix(se.Message, "session_id") {
		t.Errorf("field error = %#v (%v)", se, err)
	}
	if _, err := client.New("ftp://x", ""); err == nil {
		t.Errorf("ftp URL accepted")
	}
	// A non-JSON error answer (a proxy's) still becomes a *sandgate.Error,
	// with the code of its status.
	proxy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>bad gateway</html>")
	})}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = proxy.Serve(ln) }()
	defer proxy.Close()
	pc, _ := client.New("http://"+ln.Addr().String(), "t")
	_, err = pc.Run(ctx, "x")
	if !errors.As(err, &se) || se.Code != sandgate.CodeUnavailable || !strings.Contains(se.Message, "bad gateway") {
		t.Errorf("proxy error = %v", err)
	}
	// A transport error is not one.
	ln.Close()
	proxy.Close()
	if _, err = pc.Run(ctx, "x"); err == nil || errors.As(err, &se) {
		t.Errorf("transport error = %v", err)
	}
}

// maskingRecorder is a Recorder that masks with its own key, as the
// audit store does.
type maskingRecorder struct {
	*fakeRecorder
	m sandgate.Masker
}

func (r maskingRecorder) Masker() sandgate.Masker { return r.m }

// TestRecorderMasker checks that without a MaskKey the gateway hashes
// with the Recorder's masker, so that its hashes are the trail's.
func TestRecorderMasker(t *testing.T) {
	m := sandgate.NewMasker([]byte("audit-store-key-0123"))
	e := newEnv(t)
	rec := maskingRecorder{fakeRecorder: e.recorder, m: m}
	// Build a second server over the same fakes with the masking
	// recorder and no MaskKey.
	d := e.srv.d
	d.Recorder = rec
	d.Registry = prometheus.NewRegistry()
	d.Metrics = nil
	cfg := e.srv.cfg
	cfg.MaskKey = nil
	srv, err := New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	who := admission.Caller{Principal: sandgate.Principal{Name: "alice", Team: "payments"}, CorrelationID: "c"}
	body := admission.Body{R: strings.NewReader(`{"command":["echo"],"stdin":"in","env":{"K":"v"}}`), Size: -1}
	if _, err := srv.gate.Admit(context.Background(), who, admission.Review{Body: body}); err != nil {
		t.Fatal(err)
	}
	evs := rec.ofType(sandgate.EventAdmissionReviewed)
	if len(evs) != 1 {
		t.Fatalf("events = %+v", evs)
	}
	got := generic(evs[0].Payload["spec"]).(map[string]any)
	if got["env"].(map[string]any)["K"] != m.Hash("v") || got["stdin"] != m.Hash("in") {
		t.Errorf("spec = %v", got)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A recorder with no masker of its own needs a MaskKey.
	d.Recorder = e.recorder
	d.Registry = prometheus.NewRegistry()
	if _, err := New(cfg, d); err == nil {
		t.Errorf("New without a MaskKey or a masking recorder succeeded")
	}
}

// TestMetricsFromEventTimes checks durations derived from the times of a
// run's events, and the active container count through a lost run.
func TestMetricsFromEventTimes(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(typ sandgate.EventType, run string, ms int) sandgate.Event {
		return sandgate.Event{Type: typ, RunID: run, Time: t0.Add(time.Duration(ms) * time.Millisecond)}
	}
	for _, ev := range []sandgate.Event{
		at(sandgate.EventImageResolved, "a", 0),
		at(sandgate.EventContainerCreated, "a", 200),
		at(sandgate.EventContainerStarted, "a", 250),
		at(sandgate.EventImageResolved, "b", 0),
		at(sandgate.EventContainerCreated, "b", 100),
		at(sandgate.EventContainerExited, "a", 1000),
		at(sandgate.EventContainerRemoved, "a", 1400),
		at(sandgate.EventImageUnavailable, "c", 10),
	} {
		m.Observe(ev)
	}
	sum := func(h prometheus.Histogram) (uint64, float64) {
		var d dto.Metric
		if err := h.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
	}
	type obs struct {
		Count uint64
		Sum   float64
	}
	got := map[string]obs{}
	for name, h := range map[string]prometheus.Histogram{"create": m.containerCreate, "start": m.containerStart, "cleanup": m.containerCleanup} {
		c, s := sum(h)
		got[name] = obs{c, float64(int(s*1000+0.5)) / 1000}
	}
	want := map[string]obs{"create": {2, 0.3}, "start": {1, 0.05}, "cleanup": {1, 0.4}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("durations (-want +got):\n%s", diff)
	}
	if n := m.containers.Load(); n != 1 {
		t.Errorf("active = %d, want 1 (b)", n)
	}
	m.Observe(at(sandgate.EventRunLost, "b", 5000))
	if n := m.containers.Load(); n != 0 {
		t.Errorf("active after lost = %d, want 0", n)
	}
	// Removing a container created before this process counts nothing.
	m.Observe(at(sandgate.EventContainerRemoved, "old", 6000))
	if n := m.containers.Load(); n != 0 {
		t.Errorf("active after an unknown removal = %d, want 0", n)
	}
}

// TestLimitersCleanSource checks that asking about a source that never
// failed finds no bucket and makes none, and that a source's failures
// exhaust it until its bucket refills.
func TestLimitersCleanSource(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newLimiters(1, 2, func() time.Time { return now })
	tests := []struct {
		name    string
		spend   int
		advance time.Duration
		want    bool
	}{
		{"never failed", 0, 0, false},
		{"one failure", 1, 0, false},
		{"burst spent", 1, 0, true},
		{"refilled", 0, time.Second, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.spend {
				l.spend("10.0.0.1")
			}
			now = now.Add(tc.advance)
			if got := l.exhausted("10.0.0.1"); got != tc.want {
				t.Errorf("exhausted = %v, want %v", got, tc.want)
			}
		})
	}
	for range 100 {
		if l.exhausted("10.0.0.2") {
			t.Fatal("a clean source is exhausted")
		}
	}
	if n := len(l.byAddr); n != 1 {
		t.Errorf("%d buckets, want 1 (only the source that failed)", n)
	}
}

// TestMetricsMethodLabel checks that methods a client makes up share one
// series instead of adding one each.
func TestMetricsMethodLabel(t *testing.T) {
	e := newEnv(t)
	for _, m := range []string{"FOO1", "FOO2", http.MethodPatch} {
		if r := e.do(m, "/v1/runs", tokAlice, ""); r.status != http.StatusMethodNotAllowed {
			t.Fatalf("%s /v1/runs: %d", m, r.status)
		}
	}
	body := string(e.do(http.MethodGet, "/metrics", "", "").body)
	for _, want := range []string{
		`sandgate_http_request_duration_seconds_count{method="other",route="/v1/runs",status="405"} 2`,
		`sandgate_http_request_duration_seconds_count{method="PATCH",route="/v1/runs",status="405"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(body, "FOO") {
		t.Errorf("metrics keep a made-up method")
	}
}
