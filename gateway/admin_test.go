package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// TestReview checks POST /v1/admission/review: the decision, the audit
// event, and that nothing runs.
func TestReview(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantAllow bool
		outcome   string
	}{
		{"allowed", `{"command":["echo"],"env":{"TOKEN":"abc"}}`, true, "allowed"},
		{"denied", `{"command":["echo"],"privileged":true}`, false, "denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.do(http.MethodPost, "/v1/admission/review", tokBob, tc.body, "X-Correlation-ID: corr-review")
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			var d api.DecisionView
			if err := json.Unmarshal(r.body, &d); err != nil {
				t.Fatal(err)
			}
			if d.Allow != tc.wantAllow || d.DecisionID == "" || d.Spec == nil || d.Spec.Image != "sandgate/sandbox:latest" {
				t.Errorf("decision = %+v", d)
			}
			evs := e.recorder.ofType(sandgate.EventAdmissionReviewed)
			if len(evs) != 1 || evs[0].Outcome != tc.outcome || evs[0].CorrelationID != "corr-review" || evs[0].Actor != "bob" {
				t.Fatalf("admission.reviewed events = %+v", evs)
			}
			if raw, _ := json.Marshal(evs[0].Payload); strings.Contains(string(raw), `"abc"`) {
				t.Errorf("review payload leaks an env value: %s", raw)
			}
			if strings.Contains(string(r.body), `"abc"`) {
				t.Errorf("review answer echoes an env value: %s", r.body)
			}
			if e.exec.calls.Load() != 0 {
				t.Errorf("a review reached the executor")
			}
		})
	}
}

// TestPolicies checks the policy status and reload endpoints.
func TestPolicies(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodGet, "/v1/policies", tokSec, "")
	var st sandgate.PolicyStatus
	_ = json.Unmarshal(r.body, &st)
	if r.status != http.StatusOK || st.Revision != "sha256:test" {
		t.Errorf("status: %d %s", r.status, r.body)
	}
	r = e.do(http.MethodPost, "/v1/policies/reload", tokSec, "")
	_ = json.Unmarshal(r.body, &st)
	if r.status != http.StatusOK || st.Revision != "sha256:reloaded" {
		t.Errorf("reload: %d %s", r.status, r.body)
	}
	e.policies.reloadErr = &sandgate.Error{Code: sandgate.CodePolicyInvalid, Message: "policy does not compile",
		Details: map[string]any{"errors": []string{"admission.rego:3: rego_parse_error"}}}
	r = e.do(http.MethodPost, "/v1/policies/reload", tokAdmin, "")
	if r.status != http.StatusUnprocessableEntity || r.errorCode() != string(sandgate.CodePolicyInvalid) {
		t.Fatalf("failed reload: %d %s", r.status, r.body)
	}
	want := map[string]any{"errors": []any{"admission.rego:3: rego_parse_error"}}
	if diff := cmp.Diff(want, r.errorBody().Error.Details); diff != "" {
		t.Errorf("details (-want +got):\n%s", diff)
	}
	e.policies.reloadErr = errors.New("disk gone")
	if r := e.do(http.MethodPost, "/v1/policies/reload", tokAdmin, ""); r.status != http.StatusServiceUnavailable {
		t.Errorf("uncoded reload error: %d", r.status)
	}
}

// TestAuditEndpoints checks query, export and verify.
func TestAuditEndpoints(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodGet, "/v1/audit/events?correlation_id=c1&type=run.requested&since=2026-01-01T00:00:00Z&limit=5", tokAuditor, "")
	var list api.AuditEventList
	_ = json.Unmarshal(r.body, &list)
	if r.status != http.StatusOK || len(list.Events) != 1 || list.NextCursor == nil || *list.NextCursor != "next-1" {
		t.Errorf("events: %d %s", r.status, r.body)
	}
	if e.audit.lastQuery.CorrelationID != "c1" || e.audit.lastQuery.Limit != 5 || e.audit.lastQuery.Type != sandgate.EventRunRequested {
		t.Errorf("filter passed = %+v", e.audit.lastQuery)
	}
	if e.audit.lastQuery.Newest {
		t.Errorf("newest first without order=newest")
	}
	if r := e.do(http.MethodGet, "/v1/audit/events?order=newest", tokAuditor, ""); r.status != http.StatusOK || !e.audit.lastQuery.Newest {
		t.Errorf("order=newest: %d %s, newest passed %v", r.status, r.body, e.audit.lastQuery.Newest)
	}
	bad := []string{"?order=random", "?type=run.nope", "?since=yesterday", "?limit=0", "?limit=5000", "?color=red", "?cursor=bad",
		"?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z", "?run_id=a&run_id=b"}
	for _, q := range bad {
		t.Run("bad "+q, func(t *testing.T) {
			if r := e.do(http.MethodGet, "/v1/audit/events"+q, tokAuditor, ""); r.status != http.StatusBadRequest {
				t.Errorf("status %d: %s", r.status, r.body)
			}
		})
	}
	tests := []struct {
		query, contentType, body string
	}{
		{"", "application/x-ndjson", fakeExportLine},
		{"?format=csv", "text/csv; charset=utf-8", "event_id,type\nev-1,run.requested\n"},
	}
	for _, tc := range tests {
		t.Run("export"+tc.query, func(t *testing.T) {
			before := len(e.recorder.ofType(sandgate.EventAuditExported))
			r := e.do(http.MethodGet, "/v1/audit/export"+tc.query, tokAuditor, "")
			if r.status != http.StatusOK || r.header.Get("Content-Type") != tc.contentType || string(r.body) != tc.body {
				t.Errorf("export: %d %q %q", r.status, r.header.Get("Content-Type"), r.body)
			}
			if n := len(e.recorder.ofType(sandgate.EventAuditExported)) - before; n != 1 {
				t.Errorf("audit.exported events = %d", n)
			}
		})
	}
	if r := e.do(http.MethodGet, "/v1/audit/export?format=xml", tokAuditor, ""); r.status != http.StatusBadRequest {
		t.Errorf("bad format: %d", r.status)
	}
	e.recorder.failing.Store(true)
	if r := e.do(http.MethodGet, "/v1/audit/export", tokAuditor, ""); r.status != http.StatusServiceUnavailable {
		t.Errorf("unaudited export: %d", r.status)
	}
	e.recorder.failing.Store(false)

	r = e.do(http.MethodGet, "/v1/audit/verify?from_seq=1&to_seq=10", tokAdmin, "")
	if r.status != http.StatusOK || string(r.body) != `{"ok":true,"checked":3,"problems":[]}`+"\n" {
		t.Errorf("verify: %d %s", r.status, r.body)
	}
	for _, q := range []string{"?from_seq=-1", "?from_seq=5&to_seq=2", "?to_seq=x"} {
		if r := e.do(http.MethodGet, "/v1/audit/verify"+q, tokAdmin, ""); r.status != http.StatusBadRequest {
			t.Errorf("verify %s: %d", q, r.status)
		}
	}
}

// TestListRunsFilters checks filter validation and passing.
func TestListRunsFilters(t *testing.T) {
	e := newEnv(t)
	v := e.submit(tokAlice, "echo", "x")
	e.waitFinished(v.ID)
	tests := []struct {
		query  string
		status int
		count  int
	}{
		{"", 200, 1},
		{"?state=finished&outcome=succeeded&limit=10", 200, 1},
		{"?state=running", 200, 0},
		{"?state=sleeping", 400, 0},
		{"?outcome=great", 400, 0},
		{"?limit=-1", 400, 0},
		{"?since=2026-13-01", 400, 0},
		{"?bogus=1", 400, 0},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			r := e.do(http.MethodGet, "/v1/runs"+tc.query, tokAlice, "")
			if r.status != tc.status {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if tc.status != 200 {
				return
			}
			var l api.RunList
			_ = json.Unmarshal(r.body, &l)
			if len(l.Runs) != tc.count || l.NextCursor != nil {
				t.Errorf("list = %s", r.body)
			}
		})
	}
}

// TestSandboxes checks the sandbox admin endpoints, and Docker being away.
func TestSandboxes(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodGet, "/v1/sandboxes", tokAdmin, "")
	var l api.SandboxList
	_ = json.Unmarshal(r.body, &l)
	if r.status != http.StatusOK || len(l.Sandboxes) != 1 || l.Sandboxes[0].ContainerID != "c1" {
		t.Errorf("list: %d %s", r.status, r.body)
	}
	r = e.do(http.MethodPost, "/v1/sandboxes/cleanup", tokAdmin, "")
	var c api.CleanupResult
	_ = json.Unmarshal(r.body, &c)
	if r.status != http.StatusOK || c.Count != 1 {
		t.Errorf("cleanup: %d %s", r.status, r.body)
	}
	e.boxes.err = errors.New("dial unix /var/run/docker.sock: connect: no such file")
	for _, m := range []string{http.MethodGet + " /v1/sandboxes", http.MethodPost + " /v1/sandboxes/cleanup"} {
		method, path, _ := strings.Cut(m, " ")
		r := e.do(method, path, tokAdmin, "")
		if r.status != http.StatusServiceUnavailable || r.errorCode() != string(sandgate.CodeDockerUnavailable) || r.header.Get("Retry-After") == "" {
			t.Errorf("%s with Docker away: %d %s", m, r.status, r.body)
		}
		if strings.Contains(string(r.body), "docker.sock") {
			t.Errorf("%s leaks the cause: %s", m, r.body)
		}
	}
}

// TestConfigEndpoint checks GET /v1/config.
func TestConfigEndpoint(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) {
		c.AirGapped = true
		c.AllowedImages = []string{"sandgate/"}
		c.Limits = api.Limits{MemoryMB: 4096, TimeoutSeconds: 3600}
	})
	r := e.do(http.MethodGet, "/v1/config", tokBob, "")
	var got api.ConfigView
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	want := api.ConfigView{
		Version: sandgate.Version, Node: "test-node", AirGapped: true, MountRoots: []string{"/srv/work"},
		Defaults: sandgate.BuiltinDefaults, Maxima: api.Limits{MemoryMB: 4096, TimeoutSeconds: 3600},
		AllowedImages: []string{"sandgate/"}, Images: []sandgate.BuiltImage{}, MaxWaitSeconds: 2, BodyLimitBytes: sandgate.MaxSpecBytes,
		PolicyRevision: "sha256:test",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

// fakeImages is an ImageCatalog.
type fakeImages struct {
	list []sandgate.BuiltImage
	err  error
}

func (f *fakeImages) BuiltImages(context.Context) ([]sandgate.BuiltImage, error) {
	return f.list, f.err
}

// TestConfigListsBuiltImages checks that GET /v1/config lists the images
// sandgate built with their IDs, and still answers when Docker does not.
func TestConfigListsBuiltImages(t *testing.T) {
	py := sandgate.BuiltImage{
		ID: "sha256:" + strings.Repeat("ab", 32), RepoTags: []string{"sandgate/python:3"}, RepoDigests: []string{},
		Pins: []string{"sandgate/python@sha256:" + strings.Repeat("ab", 32)}, Recipe: "python",
		Packages: []string{"python3=3.11.2-1+b1"}, Size: 48 << 20,
	}
	tests := []struct {
		name      string
		images    *fakeImages
		want      []sandgate.BuiltImage
		wantError bool
	}{
		{"listed", &fakeImages{list: []sandgate.BuiltImage{py}}, []sandgate.BuiltImage{py}, false},
		{"docker away", &fakeImages{err: sandgate.Errorf(sandgate.CodeDockerUnavailable, "dial unix /var/run/docker.sock")}, []sandgate.BuiltImage{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(_ *Config, e *testEnv) { e.images = tt.images })
			r := e.do(http.MethodGet, "/v1/config", tokBob, "")
			var got api.ConfigView
			if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusOK {
				t.Fatalf("GET /v1/config: %d %s", r.status, r.body)
			}
			if diff := cmp.Diff(tt.want, got.Images); diff != "" {
				t.Errorf("images (-want +got):\n%s", diff)
			}
			if (got.ImagesError != "") != tt.wantError || strings.Contains(got.ImagesError, "docker.sock") {
				t.Errorf("images_error = %q", got.ImagesError)
			}
		})
	}
}

// reportingAdmitter reports the policy's configuration as the engine does.
type reportingAdmitter struct {
	*fakeAdmitter
	config map[string]any
}

func (r reportingAdmitter) PolicyConfig() map[string]any { return r.config }

// TestConfigFromPolicy checks that maxima and allowed images come from
// the policy in force when the Admitter reports them.
func TestConfigFromPolicy(t *testing.T) {
	e := newEnv(t)
	d := e.srv.d
	d.Admitter = reportingAdmitter{fakeAdmitter: e.admitter, config: map[string]any{
		"maxima":         map[string]any{"memory_mb": 2048, "cpus": 2.5, "timeout_seconds": 600, "output_limit_bytes": 1 << 20},
		"allowed_images": []string{"sandgate/sandbox"},
		"mask":           []string{"env"},
	}}
	d.Registry, d.Metrics = nil, nil
	srv, err := New(e.srv.cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	maxima, images := opsRoutes{srv.web}.policyLimits()
	if diff := cmp.Diff(api.Limits{MemoryMB: 2048, CPUs: 2.5, TimeoutSeconds: 600, OutputLimitBytes: 1 << 20}, maxima); diff != "" {
		t.Errorf("maxima (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"sandgate/sandbox"}, images); diff != "" {
		t.Errorf("images (-want +got):\n%s", diff)
	}
}

// TestExecutorFailure checks that a run the executor could not start ends
// as an error with its code, not a crash.
func TestExecutorFailure(t *testing.T) {
	e := newEnv(t)
	v := e.submit(tokAlice, "unavailable")
	final := e.waitFinished(v.ID)
	if final.Outcome != sandgate.OutcomeError || final.Error == nil || final.Error.Code != sandgate.CodeImageUnavailable {
		t.Errorf("final = outcome %q error %+v", final.Outcome, final.Error)
	}
}

// TestExecutorPanic checks that an executor panic ends the run as an
// internal error instead of killing the gateway.
func TestExecutorPanic(t *testing.T) {
	e := newEnv(t)
	v := e.submit(tokAlice, "panic")
	final := e.waitFinished(v.ID)
	if final.Outcome != sandgate.OutcomeError || final.Error == nil || final.Error.Code != sandgate.CodeInternal {
		t.Errorf("final = outcome %q error %+v", final.Outcome, final.Error)
	}
	if r := e.do(http.MethodGet, "/healthz", "", ""); r.status != http.StatusOK {
		t.Errorf("healthz after executor panic: %d", r.status)
	}
}

// TestFinalStoreRetried checks that a run's final state is saved even when
// the store fails at first.
func TestFinalStoreRetried(t *testing.T) {
	e := newEnv(t)
	v := e.submit(tokAlice, "block")
	e.waitRunning(v.ID)
	e.store.mu.Lock()
	e.store.updateFailures = 2
	e.store.mu.Unlock()
	e.exec.release(v.ID)
	final := e.waitFinished(v.ID)
	if final.Outcome != sandgate.OutcomeSucceeded {
		t.Errorf("outcome = %q", final.Outcome)
	}
}

// TestStoreCommitUnconfirmed: the store's commit of a new run landed but
// its answer was lost (a failover cut the connection). The request is a
// 503 and the trail says the run failed; the stored row must then say so
// too, not stay pending for a run that never runs.
func TestStoreCommitUnconfirmed(t *testing.T) {
	e := newEnv(t)
	e.store.mu.Lock()
	e.store.lostAnswer = errors.New("conn closed")
	e.store.mu.Unlock()
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody)
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if e.exec.calls.Load() != 0 {
		t.Errorf("a run whose store was not confirmed was executed")
	}
	failed := e.recorder.ofType(sandgate.EventRunFailed)
	if len(failed) != 1 {
		t.Fatalf("run.failed %+v", failed)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.store.mu.Lock()
		row, ok := e.store.runs[failed[0].RunID]
		e.store.mu.Unlock()
		if ok && row.State == sandgate.StateFinished {
			if row.Outcome != sandgate.OutcomeError || row.Error == nil {
				t.Errorf("stored run ended %s %+v, want error", row.Outcome, row.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stored run is still %s", row.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStoreUnavailable checks that a store failure is a 503, not a 500.
func TestStoreUnavailable(t *testing.T) {
	e := newEnv(t)
	e.store.err = errors.New("connection refused")
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody)
	if r.status != http.StatusServiceUnavailable || r.errorCode() != string(sandgate.CodeUnavailable) {
		t.Errorf("got %d %s", r.status, r.body)
	}
	if e.exec.calls.Load() != 0 {
		t.Errorf("an unstored run was executed")
	}
	allowed, failed := e.recorder.ofType(sandgate.EventAdmissionAllowed), e.recorder.ofType(sandgate.EventRunFailed)
	if len(allowed) != 1 || len(failed) != 1 || failed[0].RunID != allowed[0].RunID || failed[0].Outcome != "error" {
		t.Errorf("admission.allowed %+v, run.failed %+v", allowed, failed)
	}
}
