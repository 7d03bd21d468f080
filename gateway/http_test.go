package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// TestCorrelationID checks which X-Correlation-ID values are taken and
// that every answer, errors included, carries one.
func TestCorrelationID(t *testing.T) {
	tests := []struct {
		name  string
		given string
		keep  bool
	}{
		{"simple", "abc-123", true},
		{"all allowed characters", "A-Za.z0_9:x", true},
		{"128 characters", strings.Repeat("a", 128), true},
		{"129 characters", strings.Repeat("a", 129), false},
		{"empty", "", false},
		{"space", "abc def", false},
		{"slash", "a/b", false},
		{"unicode", "héllo", false},
		{"newline attempt", "abc%0d%0aX-Evil: 1", false},
	}
	e := newEnv(t)
	for _, tc := range tests {
		for _, path := range []string{"/healthz", "/v1/config", "/v1/nope"} {
			t.Run(tc.name+" "+path, func(t *testing.T) {
				var headers []string
				if tc.given != "" {
					headers = append(headers, "X-Correlation-ID: "+tc.given)
				}
				r := e.do(http.MethodGet, path, tokAlice, "", headers...)
				got := r.header.Get("X-Correlation-ID")
				if tc.keep {
					if got != tc.given {
						t.Errorf("X-Correlation-ID = %q, want %q", got, tc.given)
					}
					return
				}
				id, err := uuid.Parse(got)
				if err != nil || id.Version() != 7 {
					t.Errorf("X-Correlation-ID = %q, want a new UUIDv7", got)
				}
				if r.status >= 400 && r.errorBody().Error.CorrelationID != got {
					t.Errorf("body correlation_id = %q, header %q", r.errorBody().Error.CorrelationID, got)
				}
			})
		}
	}
}

// TestCorrelationOnEvents checks that a refused request's auth.denied
// event carries the correlation ID.
func TestCorrelationOnEvents(t *testing.T) {
	e := newEnv(t)
	e.do(http.MethodGet, "/v1/audit/events", tokAlice, "", "X-Correlation-ID: corr-denied")
	evs := e.recorder.ofType(sandgate.EventAuthDenied)
	if len(evs) != 1 || evs[0].CorrelationID != "corr-denied" || evs[0].Actor != "alice" || evs[0].Outcome != "forbidden" {
		t.Errorf("auth.denied events = %+v", evs)
	}
}

// TestBodyLimit checks the 1 MiB limit by Content-Length and by reading.
func TestBodyLimit(t *testing.T) {
	e := newEnv(t)
	pad := func(n int) string {
		base := `{"command":["echo"],"stdin":"`
		return base + strings.Repeat("x", n-len(base)-2) + `"}`
	}
	tests := []struct {
		name    string
		body    string
		chunked bool
		want    int
	}{
		{"exactly 1 MiB", pad(sandgate.MaxSpecBytes), false, http.StatusAccepted},
		{"1 MiB + 1", pad(sandgate.MaxSpecBytes + 1), false, http.StatusRequestEntityTooLarge},
		{"1 MiB + 1 chunked", pad(sandgate.MaxSpecBytes + 1), true, http.StatusRequestEntityTooLarge},
		{"10 MiB chunked", pad(10 << 20), true, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/v1/runs", strings.NewReader(tc.body))
			if tc.chunked {
				req.ContentLength = -1
				req.Body = io.NopCloser(struct{ io.Reader }{strings.NewReader(tc.body)})
				req.GetBody = nil
			}
			req.Header.Set("Authorization", "Bearer "+tokAlice)
			resp, err := e.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := readResponse(t, resp)
			if r.status != tc.want {
				t.Fatalf("status = %d, want %d: %.200s", r.status, tc.want, r.body)
			}
			if tc.want == http.StatusRequestEntityTooLarge && r.errorCode() != string(sandgate.CodeTooLarge) {
				t.Errorf("code = %q", r.errorCode())
			}
		})
	}
}

// TestRoutingErrors checks echo's own 404 and 405 answers.
func TestRoutingErrors(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		method, path string
		status       int
		code         sandgate.ErrorCode
	}{
		{http.MethodGet, "/nope", http.StatusNotFound, sandgate.CodeNotFound},
		{http.MethodGet, "/v1/nope", http.StatusNotFound, sandgate.CodeNotFound},
		{http.MethodPut, "/v1/runs", http.StatusMethodNotAllowed, sandgate.CodeMethodNotAllowed},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, sandgate.CodeMethodNotAllowed},
		{http.MethodGet, "/v1/runs/not-a-uuid", http.StatusNotFound, sandgate.CodeNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tokAdmin, "")
			if r.status != tc.status || r.errorCode() != string(tc.code) {
				t.Errorf("got %d %q, want %d %q: %s", r.status, r.errorCode(), tc.status, tc.code, r.body)
			}
		})
	}
}

// TestToError checks how foreign errors are classified.
func TestToError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want sandgate.ErrorCode
	}{
		{"sandgate error wrapped", fmt.Errorf("ctx: %w", sandgate.Errorf(sandgate.CodeConflict, "x")), sandgate.CodeConflict},
		{"echo 404", echo.ErrNotFound, sandgate.CodeNotFound},
		{"echo 405", echo.ErrMethodNotAllowed, sandgate.CodeMethodNotAllowed},
		{"echo 413", echo.ErrStatusRequestEntityTooLarge, sandgate.CodeTooLarge},
		{"echo 415", echo.ErrUnsupportedMediaType, sandgate.CodeInvalidRequest},
		{"echo 401", echo.ErrUnauthorized, sandgate.CodeUnauthenticated},
		{"echo 429", echo.ErrTooManyRequests, sandgate.CodeRateLimited},
		{"max bytes", &http.MaxBytesError{Limit: 10}, sandgate.CodeTooLarge},
		{"deadline", context.DeadlineExceeded, sandgate.CodeUnavailable},
		{"plain", errors.New("boom"), sandgate.CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := toError(tc.err).Code; got != tc.want {
				t.Errorf("code = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestPanicIsCleanInternal checks that a panic answers a clean 500 with no
// stack and the server keeps serving.
func TestPanicIsCleanInternal(t *testing.T) {
	e := newEnv(t)
	e.admitter.panics = true
	r := e.do(http.MethodPost, "/v1/admission/review", tokAlice, echoBody)
	if r.status != http.StatusInternalServerError || r.errorCode() != string(sandgate.CodeInternal) {
		t.Fatalf("got %d %q", r.status, r.errorCode())
	}
	if strings.Contains(string(r.body), "goroutine") || strings.Contains(string(r.body), "exploded") {
		t.Errorf("body leaks the panic: %s", r.body)
	}
	if got := e.do(http.MethodGet, "/healthz", "", ""); got.status != http.StatusOK {
		t.Errorf("healthz after panic: %d", got.status)
	}
}

// TestAuthFailureRateLimit checks that a source that failed too often is
// answered 429 with Retry-After for bad tokens until it refills, while a
// valid token from the same address (behind a proxy: everyone's) still
// authenticates; and that a principal's own refusals limit that principal
// alone.
func TestAuthFailureRateLimit(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) { c.AuthFailureBurst = 3; c.AuthFailureRate = 0.001 })
	for i := range 3 {
		if r := e.do(http.MethodGet, "/v1/config", "bad", ""); r.status != http.StatusUnauthorized {
			t.Fatalf("attempt %d: status %d", i, r.status)
		}
	}
	r := e.do(http.MethodGet, "/v1/config", "bad", "")
	if r.status != http.StatusTooManyRequests || r.errorCode() != string(sandgate.CodeRateLimited) {
		t.Fatalf("a bad token after the burst: %d %q", r.status, r.errorCode())
	}
	if r.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	if r := e.do(http.MethodGet, "/v1/config", "", ""); r.status != http.StatusTooManyRequests {
		t.Errorf("no token after the burst: %d", r.status)
	}
	for _, tok := range []string{tokAdmin, tokAlice} {
		if r := e.do(http.MethodGet, "/v1/config", tok, ""); r.status != http.StatusOK {
			t.Errorf("a valid token from the limited address: %d %s, want 200", r.status, r.body)
		}
	}
	if got := e.do(http.MethodGet, "/healthz", "", ""); got.status != http.StatusOK {
		t.Errorf("healthz is not rate-limited, got %d", got.status)
	}
	// Forbidden answers count against the principal, not the address.
	e2 := newEnv(t, func(c *Config, _ *testEnv) { c.AuthFailureBurst = 2; c.AuthFailureRate = 0.001 })
	e2.do(http.MethodGet, "/v1/sandboxes", tokAlice, "")
	e2.do(http.MethodGet, "/v1/sandboxes", tokAlice, "")
	if r := e2.do(http.MethodGet, "/v1/config", tokAlice, ""); r.status != http.StatusTooManyRequests {
		t.Errorf("alice after two 403s: status %d", r.status)
	}
	if r := e2.do(http.MethodGet, "/v1/sandboxes", tokAdmin, ""); r.status != http.StatusOK {
		t.Errorf("the admin from the same address after alice's 403s: status %d", r.status)
	}
}

// TestRequestRateLimit checks the optional per-address limit.
func TestRequestRateLimit(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) { c.RateLimit = 0.001; c.RateBurst = 2 })
	for i := range 2 {
		if r := e.do(http.MethodGet, "/v1/config", tokAlice, ""); r.status != http.StatusOK {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	if r := e.do(http.MethodGet, "/v1/config", tokAlice, ""); r.status != http.StatusTooManyRequests {
		t.Errorf("third request: %d", r.status)
	}
}

// TestReadiness checks /readyz's reasons.
func TestReadiness(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(*testEnv)
		wantReasons []string
	}{
		{"ready", func(*testEnv) {}, []string{}},
		{"docker down", func(e *testEnv) {
			e.exec.pingErr = sandgate.Errorf(sandgate.CodeDockerUnavailable, "cannot connect to the Docker daemon")
		}, []string{"docker: cannot connect to the Docker daemon"}},
		{"audit down and no policy", func(e *testEnv) {
			e.audit.readyErr = sandgate.Errorf(sandgate.CodeAuditUnavailable, "spool full")
			e.policies.status = sandgate.PolicyStatus{LastError: "compile error"}
		}, []string{"audit: spool full", "policy: no policy loaded: compile error"}},
		{"uncoded error", func(e *testEnv) { e.audit.readyErr = errors.New("dial tcp: refused") }, []string{"audit: dial tcp: refused"}},
		{"no writable primary", func(e *testEnv) {
			e.audit.readyErr = sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit database unreachable")
			e.audit.dbErr = sandgate.Errorf(sandgate.CodeAuditUnavailable, "no writable Postgres among 127.0.0.1:5432, 127.0.0.1:5433")
		}, []string{"audit: audit database unreachable", "database: no writable Postgres among 127.0.0.1:5432, 127.0.0.1:5433"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.setup(e)
			r := e.do(http.MethodGet, "/readyz", "", "")
			if len(tc.wantReasons) == 0 {
				if r.status != http.StatusOK {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				var rd api.Readiness
				_ = json.Unmarshal(r.body, &rd)
				if !rd.Ready || len(rd.Checks) != 5 {
					t.Errorf("readiness = %+v", rd)
				}
				if db := rd.Checks[4]; db.Name != "database" || !db.OK || db.Detail != "primary 127.0.0.1:5433 of 127.0.0.1:5432, 127.0.0.1:5433" {
					t.Errorf("database check = %+v", db)
				}
				return
			}
			if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
				t.Fatalf("status %d, Retry-After %q", r.status, r.header.Get("Retry-After"))
			}
			raw, _ := json.Marshal(r.errorBody().Error.Details["reasons"])
			var got []string
			_ = json.Unmarshal(raw, &got)
			if diff := cmp.Diff(tc.wantReasons, got); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("shutting down", func(t *testing.T) {
		e := newEnv(t)
		e.srv.beginStop()
		if r := e.do(http.MethodGet, "/readyz", "", ""); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "gateway: shutting down") {
			t.Errorf("status %d: %s", r.status, r.body)
		}
		if r := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody); r.status != http.StatusServiceUnavailable {
			t.Errorf("submit while stopping: %d", r.status)
		}
	})
}

// sinkReport is a fixed SinkReporter.
type sinkReport []sandgate.SinkStatus

func (r sinkReport) SinkStatus() []sandgate.SinkStatus { return r }

// TestReadinessSinkWarnings: a failing audit sink is a warning in
// /readyz, not unreadiness, and its lag and failures are metrics.
func TestReadinessSinkWarnings(t *testing.T) {
	e := newEnv(t, func(_ *Config, e *testEnv) {
		e.sinks = sinkReport{
			{Name: "siem", Delivering: true, EventsBehind: 1234, SecondsBehind: 56.5, Delivered: 10, Failures: 7,
				LastError: "connection refused", Warning: "sink siem is failing (1234 events, 56 s behind): connection refused"},
			{Name: "archive", EventsBehind: 0},
		}
	})
	r := e.do(http.MethodGet, "/readyz", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var rd api.Readiness
	if err := json.Unmarshal(r.body, &rd); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"sink siem is failing (1234 events, 56 s behind): connection refused"}, rd.Warnings); !rd.Ready || diff != "" {
		t.Errorf("ready %v, warnings (-want +got):\n%s", rd.Ready, diff)
	}
	m := e.do(http.MethodGet, "/metrics", "", "")
	for _, want := range []string{
		`sandgate_audit_sink_lag_events{sink="siem"} 1234`,
		`sandgate_audit_sink_lag_seconds{sink="siem"} 56.5`,
		`sandgate_audit_sink_failures_total{sink="siem"} 7`,
		`sandgate_audit_sink_delivered_total{sink="siem"} 10`,
		`sandgate_audit_sink_delivering{sink="siem"} 1`,
		`sandgate_audit_sink_delivering{sink="archive"} 0`,
	} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestHealthz checks liveness needs no token.
func TestHealthz(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodGet, "/healthz", "", "")
	if r.status != http.StatusOK || jsonMap(r.body)["status"] != "ok" {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
}
