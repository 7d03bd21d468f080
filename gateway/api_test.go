package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

const echoBody = `{"command":["echo","hi"]}`

// endpoint is one route of the API with a request that succeeds for a
// principal allowed to call it.
type endpoint struct {
	method, path, body string
	// allowed are the tokens the role table lets through.
	allowed []string
	status  int
}

// endpoints lists every /v1 route; {run} is replaced by a finished run of
// alice's (team payments) and {live} by a blocked one.
func endpoints() []endpoint {
	all := []string{tokAlice, tokBob, tokSec, tokAuditor, tokAdmin}
	return []endpoint{
		{http.MethodPost, "/v1/runs", echoBody, []string{tokAlice, tokBob}, http.StatusAccepted},
		{http.MethodGet, "/v1/runs", "", []string{tokAlice, tokBob, tokAuditor, tokAdmin}, http.StatusOK},
		{http.MethodGet, "/v1/runs/{run}", "", []string{tokAlice, tokAuditor, tokAdmin}, http.StatusOK},
		{http.MethodGet, "/v1/runs/{run}/logs", "", []string{tokAlice, tokAuditor, tokAdmin}, http.StatusOK},
		{http.MethodDelete, "/v1/runs/{live}", "", []string{tokAlice, tokAdmin}, http.StatusOK},
		{http.MethodPost, "/v1/admission/review", echoBody, all, http.StatusOK},
		{http.MethodGet, "/v1/policies", "", []string{tokSec, tokAuditor, tokAdmin}, http.StatusOK},
		{http.MethodPost, "/v1/policies/reload", "", []string{tokSec, tokAdmin}, http.StatusOK},
		{http.MethodGet, "/v1/audit/events", "", []string{tokAuditor, tokAdmin}, http.StatusOK},
		{http.MethodGet, "/v1/audit/export", "", []string{tokAuditor, tokAdmin}, http.StatusOK},
		{http.MethodGet, "/v1/audit/verify", "", []string{tokAuditor, tokAdmin}, http.StatusOK},
		{http.MethodGet, "/v1/sandboxes", "", []string{tokAdmin}, http.StatusOK},
		{http.MethodPost, "/v1/sandboxes/cleanup", "", []string{tokAdmin}, http.StatusOK},
		{http.MethodGet, "/v1/config", "", all, http.StatusOK},
	}
}

// TestEndpointAuthorization calls every endpoint as every principal, with
// no token and with a wrong one: the role table and team isolation decide
// the status, refusals are audited as auth.denied, and no refused request
// reaches the executor.
func TestEndpointAuthorization(t *testing.T) {
	for _, ep := range endpoints() {
		for _, tok := range []string{"", "wrong-token", tokAlice, tokBob, tokSec, tokAuditor, tokAdmin} {
			name := ep.method + " " + ep.path + " as " + tok
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				done := e.submit(tokAlice, "echo", "hi")
				e.waitFinished(done.ID)
				live := e.submit(tokAlice, "block")
				e.waitRunning(live.ID)
				path := strings.NewReplacer("{run}", done.ID, "{live}", live.ID).Replace(ep.path)
				execBefore := e.exec.calls.Load()
				deniedBefore := len(e.recorder.ofType(sandgate.EventAuthDenied))

				r := e.do(ep.method, path, tok, ep.body)

				allowed := false
				for _, a := range ep.allowed {
					allowed = allowed || a == tok
				}
				wantStatus, wantCode := ep.status, ""
				switch {
				case tok == "" || tok == "wrong-token":
					wantStatus, wantCode = http.StatusUnauthorized, string(sandgate.CodeUnauthenticated)
				case allowed:
				case tok == tokBob && strings.Contains(ep.path, "{"):
					// bob is a submitter of another team: alice's runs
					// do not exist for him.
					wantStatus, wantCode = http.StatusNotFound, string(sandgate.CodeNotFound)
				default:
					wantStatus, wantCode = http.StatusForbidden, string(sandgate.CodeForbidden)
				}
				if r.status != wantStatus {
					t.Fatalf("status = %d, want %d; body %s", r.status, wantStatus, r.body)
				}
				if wantCode != "" {
					if got := r.errorCode(); got != wantCode {
						t.Errorf("code = %q, want %q", got, wantCode)
					}
					if ep.method == http.MethodPost && ep.path == "/v1/runs" && e.exec.calls.Load() != execBefore {
						t.Errorf("a refused submission reached the executor")
					}
				}
				denied := len(e.recorder.ofType(sandgate.EventAuthDenied)) - deniedBefore
				wantDenied := 0
				if wantStatus == http.StatusUnauthorized || wantStatus == http.StatusForbidden {
					wantDenied = 1
				}
				if denied != wantDenied {
					t.Errorf("auth.denied events = %d, want %d", denied, wantDenied)
				}
				if r.status == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
				e.exec.release(live.ID)
			})
		}
	}
}

// TestTeamIsolation checks that a submitter sees, streams and cancels only
// its own team's runs, while admins and auditors read every team's.
func TestTeamIsolation(t *testing.T) {
	e := newEnv(t)
	a := e.submit(tokAlice, "echo", "alice")
	b := e.submit(tokBob, "echo", "bob")
	e.waitFinished(a.ID)
	e.waitFinished(b.ID)
	list := func(tok string) []string {
		t.Helper()
		r := e.do(http.MethodGet, "/v1/runs", tok, "")
		var l api.RunList
		if err := json.Unmarshal(r.body, &l); err != nil {
			t.Fatalf("decode list: %v", err)
		}
		var ids []string
		for _, run := range l.Runs {
			ids = append(ids, run.Principal)
		}
		return ids
	}
	tests := []struct {
		token string
		want  []string
	}{
		{tokAlice, []string{"alice"}},
		{tokBob, []string{"bob"}},
		{tokAdmin, []string{"alice", "bob"}},
		{tokAuditor, []string{"alice", "bob"}},
	}
	for _, tc := range tests {
		t.Run("list as "+tc.token, func(t *testing.T) {
			got := list(tc.token)
			if diff := cmp.Diff(tc.want, sorted(got)); diff != "" {
				t.Errorf("visible runs (-want +got):\n%s", diff)
			}
		})
	}
	// The body of a 404 for another team's run equals that of a run that
	// does not exist, so nothing leaks.
	other := e.do(http.MethodGet, "/v1/runs/"+b.ID, tokAlice, "")
	missing := e.do(http.MethodGet, "/v1/runs/01900000-0000-7000-8000-000000000000", tokAlice, "")
	if other.status != http.StatusNotFound || missing.status != http.StatusNotFound {
		t.Fatalf("statuses = %d, %d; want 404, 404", other.status, missing.status)
	}
	if got, want := other.errorBody().Error.Message, strings.ReplaceAll(missing.errorBody().Error.Message, "01900000-0000-7000-8000-000000000000", b.ID); got != want {
		t.Errorf("messages differ: %q vs %q", got, want)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestSubmitHappyPath follows one run through the API and the audit trail.
func TestSubmitHappyPath(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, `{"command":["echo","hello"],"env":{"SECRET":"hunter2"},"network":"bridge","labels":{"token":"s3cret"}}`,
		"X-Correlation-ID: corr-happy-1")
	if r.status != http.StatusAccepted {
		t.Fatalf("status = %d: %s", r.status, r.body)
	}
	v := r.run(t)
	if got, want := r.header.Get("Location"), "/v1/runs/"+v.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if v.CorrelationID != "corr-happy-1" || v.Principal != "alice" || v.Team != "payments" || v.DecisionID == "" {
		t.Errorf("run identities = %+v", v)
	}
	if diff := cmp.Diff([]string{"network_bridge: bridge network"}, v.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	final := e.waitFinished(v.ID)
	if final.Outcome != sandgate.OutcomeSucceeded || final.ExitCode == nil || *final.ExitCode != 0 {
		t.Errorf("final run = outcome %q exit %v", final.Outcome, final.ExitCode)
	}
	g := e.do(http.MethodGet, "/v1/runs/"+v.ID, tokAlice, "")
	got := g.run(t)
	if got.Stdout.Data != "hello\n" || got.Outcome == nil || *got.Outcome != sandgate.OutcomeSucceeded || got.DurationMS != 1500 {
		t.Errorf("GET run = %+v", got)
	}
	// What it used, as the executor reported it (the answer is held to
	// the OpenAPI document's Usage).
	if diff := cmp.Diff(fakeUsage(got.FinishedAt.UTC()), got.Usage); diff != "" {
		t.Errorf("GET run usage (-want +got):\n%s", diff)
	}
	if v.Usage != nil {
		t.Errorf("a run just submitted has usage %+v, want null", v.Usage)
	}
	job := e.exec.lastJob()
	if job.CorrelationID != "corr-happy-1" || job.RunID != v.ID || job.Team != "payments" {
		t.Errorf("job identities = %+v", job)
	}
	// The executor runs the real secret; the store and the API keep only
	// its keyed hash.
	if job.Spec.Env["SECRET"] != "hunter2" {
		t.Errorf("job env SECRET = %q, want the real value", job.Spec.Env["SECRET"])
	}
	if env := got.Spec.Env["SECRET"]; env == "hunter2" || !strings.HasPrefix(env, "hmac-sha256:") {
		t.Errorf("GET run spec env SECRET = %q, want a keyed hash", env)
	}
	stored, err := e.store.GetRun(context.Background(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(stored.Spec); strings.Contains(string(raw), "hunter2") {
		t.Errorf("stored run spec holds the secret in clear: %s", raw)
	}
	// The decision was committed before the executor ran, in order, with
	// every identity.
	evs := e.recorder.all()
	if len(evs) < 2 || evs[0].Type != sandgate.EventRunRequested || evs[1].Type != sandgate.EventAdmissionAllowed {
		t.Fatalf("first events = %+v", evs)
	}
	for _, ev := range evs[:2] {
		want := sandgate.Event{CorrelationID: "corr-happy-1", RunID: v.ID, DecisionID: v.DecisionID, Actor: "alice",
			Team: "payments", Node: "test-node", PolicyRevision: "sha256:test"}
		gotIDs := sandgate.Event{CorrelationID: ev.CorrelationID, RunID: ev.RunID, DecisionID: ev.DecisionID,
			Actor: ev.Actor, Team: ev.Team, Node: ev.Node, PolicyRevision: ev.PolicyRevision}
		if diff := cmp.Diff(want, gotIDs); diff != "" {
			t.Errorf("%s identities (-want +got):\n%s", ev.Type, diff)
		}
		raw, _ := json.Marshal(ev.Payload)
		if strings.Contains(string(raw), "hunter2") {
			t.Errorf("%s payload leaks an env value: %s", ev.Type, raw)
		}
	}
}

// TestPolicyDenied checks the 403 answer, its decision details, the
// admission.denied event, and that nothing ran.
func TestPolicyDenied(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, `{"command":["sh"],"privileged":true}`)
	if r.status != http.StatusForbidden || r.errorCode() != string(sandgate.CodePolicyDenied) {
		t.Fatalf("status %d code %q: %s", r.status, r.errorCode(), r.body)
	}
	d, err := api.DecisionFromDetails(r.errorBody().Error.Details)
	if err != nil {
		t.Fatal(err)
	}
	want := api.DecisionView{
		Violations: []sandgate.Violation{{Rule: "no_privileged", Message: "privileged mode is forbidden", Controls: []string{"CIS-5.5"}, Action: "deny"}},
		Warnings:   []sandgate.Violation{}, Mutations: []sandgate.Mutation{},
		PolicyRevision: "sha256:test", DecisionID: "dec-1",
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
	if n := len(e.recorder.ofType(sandgate.EventAdmissionDenied)); n != 1 {
		t.Errorf("admission.denied events = %d, want 1", n)
	}
	if e.exec.calls.Load() != 0 {
		t.Errorf("a denied run reached the executor")
	}
}

// TestAuditUnavailable checks that a run whose decision cannot be
// committed is refused with 503 and Retry-After, and never executed.
func TestAuditUnavailable(t *testing.T) {
	e := newEnv(t)
	e.recorder.failing.Store(true)
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody)
	if r.status != http.StatusServiceUnavailable || r.errorCode() != string(sandgate.CodeAuditUnavailable) {
		t.Fatalf("status %d code %q", r.status, r.errorCode())
	}
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	if e.exec.calls.Load() != 0 {
		t.Errorf("Execute was called though the decision was not committed")
	}
	if len(e.store.runs) != 0 {
		t.Errorf("a run was stored")
	}
}

// TestAuditCommitUncertain: a decision whose commit was cut mid-flight
// (a failover) is refused like any other, and the trail is told that
// nothing ran, in case the admission lands after all; a plain refusal
// records nothing more.
func TestAuditCommitUncertain(t *testing.T) {
	e := newEnv(t)
	e.recorder.uncertain.Store(true)
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody)
	if r.status != http.StatusServiceUnavailable || r.errorCode() != string(sandgate.CodeAuditUnavailable) {
		t.Fatalf("status %d code %q", r.status, r.errorCode())
	}
	if e.exec.calls.Load() != 0 || len(e.store.runs) != 0 {
		t.Errorf("the run was executed or stored")
	}
	failed := e.recorder.ofType(sandgate.EventRunFailed)
	if len(failed) != 1 || failed[0].RunID == "" || failed[0].Outcome != string(sandgate.OutcomeError) {
		t.Fatalf("run.failed events = %+v, want one for the refused run", failed)
	}
	e.recorder.uncertain.Store(false)
	e.recorder.failing.Store(true)
	e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody)
	if n := len(e.recorder.ofType(sandgate.EventRunFailed)); n != 1 {
		t.Errorf("%d run.failed events after a refusal whose commit certainly failed, want still 1", n)
	}
}

// TestReviewAuditBehind checks that a review the trail cannot take (its
// backlog full past the wait) answers 503 with Retry-After and records
// nothing, rather than answering unaudited.
func TestReviewAuditBehind(t *testing.T) {
	e := newEnv(t)
	e.recorder.failing.Store(true)
	r := e.do(http.MethodPost, "/v1/admission/review", tokAlice, echoBody)
	if r.status != http.StatusServiceUnavailable || r.errorCode() != string(sandgate.CodeAuditUnavailable) {
		t.Fatalf("status %d code %q: %s", r.status, r.errorCode(), r.body)
	}
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	if evs := e.recorder.ofType(sandgate.EventAdmissionReviewed); len(evs) != 0 {
		t.Errorf("admission.reviewed events = %+v", evs)
	}
	e.recorder.failing.Store(false)
	if r := e.do(http.MethodPost, "/v1/admission/review", tokAlice, echoBody); r.status != http.StatusOK {
		t.Fatalf("once the trail caught up: status %d: %s", r.status, r.body)
	}
}

// TestWait checks ?wait= on POST /v1/runs.
func TestWait(t *testing.T) {
	tests := []struct {
		name       string
		cmd        string
		wait       string
		wantStatus int
		wantState  sandgate.State
	}{
		{"finishes within the wait", "echo", "5s", http.StatusOK, sandgate.StateFinished},
		{"integer seconds", "echo", "5", http.StatusOK, sandgate.StateFinished},
		{"still running, wait capped by MaxWait", "block", "1h", http.StatusAccepted, sandgate.StateRunning},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config, _ *testEnv) { c.MaxWait = 200e6 })
			r := e.do(http.MethodPost, "/v1/runs?wait="+tc.wait, tokAlice, `{"command":["`+tc.cmd+`"]}`)
			if r.status != tc.wantStatus {
				t.Fatalf("status = %d, want %d: %s", r.status, tc.wantStatus, r.body)
			}
			v := r.run(t)
			if v.State != tc.wantState {
				t.Errorf("state = %q, want %q", v.State, tc.wantState)
			}
			e.exec.release(v.ID)
		})
	}
}

// TestIdempotency checks that a key returns the same run for the same
// principal, once executed, and a new run for another principal.
func TestIdempotency(t *testing.T) {
	e := newEnv(t)
	first := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody, "Idempotency-Key: key-1")
	second := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody, "Idempotency-Key: key-1")
	other := e.do(http.MethodPost, "/v1/runs", tokBob, echoBody, "Idempotency-Key: key-1")
	a, b, c := first.run(t), second.run(t), other.run(t)
	if a.ID != b.ID {
		t.Errorf("same key gave runs %s and %s", a.ID, b.ID)
	}
	if second.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay not marked")
	}
	if c.ID == a.ID {
		t.Errorf("another principal's key returned alice's run")
	}
	e.waitFinished(a.ID)
	e.waitFinished(c.ID)
	if n := e.exec.calls.Load(); n != 2 {
		t.Errorf("executions = %d, want 2", n)
	}
	// A retry is answered from the key's claim in the store: no node
	// remembers keys of its own.
	third := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody, "Idempotency-Key: key-1")
	if third.status != http.StatusOK || third.run(t).ID != a.ID {
		t.Errorf("store-level replay: status %d id %s, want 200 %s", third.status, third.run(t).ID, a.ID)
	}
	if n := e.exec.calls.Load(); n != 2 {
		t.Errorf("executions after store replay = %d, want 2", n)
	}
	// The same key for another request is a conflict, found in the key's
	// claim.
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, `{"command":["echo","other"]}`, "Idempotency-Key: key-1")
	if r.status != http.StatusConflict || r.errorCode() != string(sandgate.CodeConflict) {
		t.Errorf("key reused for another request: %d %s", r.status, r.body)
	}
	if n := e.exec.calls.Load(); n != 2 {
		t.Errorf("executions after conflicts = %d, want 2", n)
	}
	bad := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody, "Idempotency-Key: "+strings.Repeat("k", 300))
	if bad.status != http.StatusBadRequest {
		t.Errorf("oversized key: status %d", bad.status)
	}
}

// TestCancel cancels a running run, then checks the refusals.
func TestCancel(t *testing.T) {
	e := newEnv(t)
	v := e.submit(tokAlice, "block")
	e.waitRunning(v.ID)
	if r := e.do(http.MethodDelete, "/v1/runs/"+v.ID, tokBob, ""); r.status != http.StatusNotFound {
		t.Errorf("other team's cancel: status %d", r.status)
	}
	r := e.do(http.MethodDelete, "/v1/runs/"+v.ID, tokAlice, "")
	if r.status != http.StatusOK {
		t.Fatalf("cancel: status %d: %s", r.status, r.body)
	}
	got := r.run(t)
	if got.Outcome == nil || *got.Outcome != sandgate.OutcomeCancelled || got.Stdout.Data != "first\n" {
		t.Errorf("cancelled run = outcome %v stdout %q", got.Outcome, got.Stdout.Data)
	}
	final := e.waitFinished(v.ID)
	if final.Outcome != sandgate.OutcomeCancelled {
		t.Errorf("stored outcome = %q", final.Outcome)
	}
	again := e.do(http.MethodDelete, "/v1/runs/"+v.ID, tokAlice, "")
	if again.status != http.StatusConflict || again.errorCode() != string(sandgate.CodeConflict) {
		t.Errorf("second cancel: status %d code %q", again.status, again.errorCode())
	}
	// An admin may cancel any team's run.
	w := e.submit(tokBob, "block")
	e.waitRunning(w.ID)
	if r := e.do(http.MethodDelete, "/v1/runs/"+w.ID, tokAdmin, ""); r.status != http.StatusOK {
		t.Errorf("admin cancel: status %d", r.status)
	}
}

// TestCancelBeforeExecutor cancels a run the executor does not hold: the
// job's context ends and the run is reported cancelled.
func TestCancelBeforeExecutor(t *testing.T) {
	e := newEnv(t)
	run := sandgate.Run{ID: "01900000-0000-7000-8000-0000000000aa", Team: "payments", Principal: "alice", State: sandgate.StatePending,
		Spec: sandgate.RunSpec{Command: []string{"block"}}}
	if err := e.store.CreateRun(t.Context(), &run); err != nil {
		t.Fatal(err)
	}
	lr := newLiveRun(run, sandgate.BuiltinDefaults.OutputLimitBytes)
	canceled := make(chan struct{})
	lr.cancel = func() { close(canceled) }
	e.srv.node.runs.live.add(run.ID, lr)
	go func() {
		<-canceled
		lr.finish(sandgate.Run{ID: run.ID, State: sandgate.StateFinished, Outcome: sandgate.OutcomeCancelled})
	}()
	r := e.do(http.MethodDelete, "/v1/runs/"+run.ID, tokAlice, "")
	if r.status != http.StatusOK || r.run(t).State != sandgate.StateFinished {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	e.srv.node.runs.live.remove(run.ID)
}

// TestAuthDeniedAuditBehind checks that a refusal whose auth.denied event
// the trail cannot take answers 503 with Retry-After instead of growing an
// unbounded queue, and that refusals are answered and audited as before
// once the trail has room.
func TestAuthDeniedAuditBehind(t *testing.T) {
	e := newEnv(t)
	e.recorder.failing.Store(true)
	for _, tc := range []struct{ name, token, path string }{
		{"unknown token", "not-a-token", "/v1/runs"},
		{"no token", "", "/v1/runs"},
		{"missing role", tokAlice, "/v1/policies/reload"},
	} {
		method := http.MethodGet
		if tc.path == "/v1/policies/reload" {
			method = http.MethodPost
		}
		r := e.do(method, tc.path, tc.token, "")
		if r.status != http.StatusServiceUnavailable || r.errorCode() != string(sandgate.CodeAuditUnavailable) {
			t.Errorf("%s: status %d code %q: %s", tc.name, r.status, r.errorCode(), r.body)
		}
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s: 503 without Retry-After", tc.name)
		}
	}
	if evs := e.recorder.ofType(sandgate.EventAuthDenied); len(evs) != 0 {
		t.Errorf("auth.denied events while the trail had no room = %+v", evs)
	}
	e.recorder.failing.Store(false)
	if r := e.do(http.MethodGet, "/v1/runs", "not-a-token", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("once the trail has room: status %d: %s", r.status, r.body)
	}
	if evs := e.recorder.ofType(sandgate.EventAuthDenied); len(evs) != 1 {
		t.Errorf("auth.denied events once the trail has room = %d, want 1", len(evs))
	}
}
