package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// TestTeamLimits: a team at its limit of runs (running plus queued), or of
// its memory or CPU budget, is answered 429 RATE-LIMITED with Retry-After
// naming the limit, while another team's runs are admitted; a run that
// ends gives its place back.
func TestTeamLimits(t *testing.T) {
	e := newEnv(t, func(_ *Config, e *testEnv) {
		e.admitter.limits = map[string]sandgate.TeamLimits{
			"payments": {Concurrent: 1, Queued: 1},
			"search":   {MemoryMB: 1024, CPUs: 1.5},
		}
	})
	a1 := e.submit(tokAlice, "block")
	a2 := e.submit(tokAlice, "block")
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, `{"command":["echo","third"]}`)
	if r.status != http.StatusTooManyRequests || r.errorCode() != string(sandgate.CodeRateLimited) || r.header.Get("Retry-After") == "" {
		t.Fatalf("a third run of payments = %d %s, want 429 RATE-LIMITED with Retry-After", r.status, r.body)
	}
	if d := r.errorBody().Error.Details; d["team"] != "payments" || d["limit"] != "runs" {
		t.Errorf("details = %v, want the team and the limit", d)
	}
	// Another team goes on, until its own memory budget.
	b1 := e.submit(tokBob, "block")
	r = e.do(http.MethodPost, "/v1/runs", tokBob, `{"command":["echo","x"],"resources":{"memory_mb":600}}`)
	if r.status != http.StatusTooManyRequests || r.errorBody().Error.Details["limit"] != "memory_mb" {
		t.Errorf("search past its memory budget = %d %s, want 429 naming memory_mb", r.status, r.body)
	}
	r = e.do(http.MethodPost, "/v1/runs", tokBob, `{"command":["echo","x"],"resources":{"memory_mb":256,"cpus":1}}`)
	if r.status != http.StatusTooManyRequests || r.errorBody().Error.Details["limit"] != "cpus" {
		t.Errorf("search past its CPU budget = %d %s, want 429 naming cpus", r.status, r.body)
	}
	// The admitted runs start in the background.
	deadline := time.Now().Add(10 * time.Second)
	for e.exec.calls.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := e.exec.calls.Load(); got != 3 {
		t.Errorf("%d runs reached the executor, want 3", got)
	}
	if n := len(e.recorder.ofType(sandgate.EventAdmissionAllowed)); n != 3 {
		t.Errorf("%d admissions recorded, want 3: a refusal for a team's limits is decided before policy", n)
	}
	// A run that ends gives its place back.
	e.exec.release(a1.ID)
	e.waitFinished(a1.ID)
	e.submit(tokAlice, "echo", "again")
	e.exec.release(a2.ID)
	e.exec.release(b1.ID)
}
