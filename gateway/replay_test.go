package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// query answers a replay's query from the recorded events, as the audit
// store would: payloads through JSON, oldest first, paged by index.
func (r *fakeRecorder) query(f sandgate.AuditFilter) ([]sandgate.AuditRecord, string, error) {
	var out []sandgate.AuditRecord
	start := 0
	if f.Cursor != "" {
		n, err := strconv.Atoi(f.Cursor)
		if err != nil {
			return nil, "", sandgate.FieldError("cursor", "malformed cursor")
		}
		start = n
	}
	events := r.all()
	for i := start; i < len(events); i++ {
		ev := events[i]
		if !slices.Contains(f.Types, ev.Type) || (f.Team != "" && ev.Team != f.Team) {
			continue
		}
		if len(out) == f.Limit {
			return out, strconv.Itoa(i), nil
		}
		raw, err := json.Marshal(ev.Payload)
		if err != nil {
			return nil, "", err
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		ev.Payload = nil
		if err := dec.Decode(&ev.Payload); err != nil {
			return nil, "", err
		}
		out = append(out, sandgate.AuditRecord{Event: ev, ChainID: "chain-1", Seq: int64(i + 1), RecordedAt: ev.Time})
	}
	return out, "", nil
}

// LoadCandidate makes fakePolicies a CandidateLoader: the candidate's
// data.json says what it denies (fakeCandidate); a file broken.rego
// makes it refused.
func (p *fakePolicies) LoadCandidate(_ context.Context, files map[string][]byte) (sandgate.PolicyCandidate, error) {
	if _, ok := files["broken.rego"]; ok {
		return nil, &sandgate.Error{Code: sandgate.CodePolicyInvalid, Message: "policy bundle candidate was refused",
			Details: map[string]any{"errors": []string{"broken.rego:1: rego_parse_error: unexpected eof"}}}
	}
	c := &fakeCandidate{}
	if raw, ok := files["data.json"]; ok {
		if err := json.Unmarshal(raw, c); err != nil {
			return nil, &sandgate.Error{Code: sandgate.CodePolicyInvalid, Message: "bad data",
				Details: map[string]any{"errors": []string{err.Error()}}}
		}
	}
	return c, nil
}

// fakeCandidate decides like fakeAdmitter, but denies the commands it
// names, may allow privileged runs, and may deny any env value that is
// not empty (a rule that reads masked values).
type fakeCandidate struct {
	DenyCommands    []string `json:"deny_commands"`
	AllowPrivileged bool     `json:"allow_privileged"`
	DenyEnvValues   bool     `json:"deny_env_values"`
	// SlowMS makes each decision take this long, or until ctx ends.
	SlowMS int `json:"slow_ms"`
}

func (c *fakeCandidate) Revision() string { return "sha256:candidate" }
func (c *fakeCandidate) Mask() []string   { return nil }

func (c *fakeCandidate) Decide(ctx context.Context, in sandgate.AdmissionInput) (sandgate.Decision, error) {
	if c.SlowMS > 0 {
		select {
		case <-time.After(time.Duration(c.SlowMS) * time.Millisecond):
		case <-ctx.Done():
			return sandgate.Decision{}, ctx.Err()
		}
	}
	d := sandgate.Decision{Allow: true, PolicyRevision: c.Revision(), DecisionID: "cand", Spec: in.Request}
	deny := func(rule string) {
		d.Allow = false
		d.Violations = append(d.Violations, sandgate.Violation{Rule: rule, Message: rule, Action: "deny"})
	}
	if in.Request.Privileged && !c.AllowPrivileged {
		deny("no_privileged")
	}
	if len(in.Request.Command) > 0 && slices.Contains(c.DenyCommands, in.Request.Command[0]) {
		deny("denied_command")
	}
	if c.DenyEnvValues {
		for _, v := range in.Request.Env {
			if v != "" {
				deny("no_env_values")
				break
			}
		}
	}
	return d, nil
}

// replayBody is a replay request with data.json as given.
func replayBody(data string, extra ...string) string {
	files := map[string]string{"data.json": data}
	for _, name := range extra {
		files[name] = "package x"
	}
	b, _ := json.Marshal(api.ReplayRequest{Files: files})
	return string(b)
}

func (r response) replay(t *testing.T) api.ReplayReport {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	var rep api.ReplayReport
	if err := json.Unmarshal(r.body, &rep); err != nil {
		t.Fatalf("decode replay report: %v in %s", err, r.body)
	}
	return rep
}

// groupRules lists a change's groups as "rule change count".
func groupRules(c api.ReplayChanges) []string {
	out := []string{}
	for _, g := range c.Rules {
		out = append(out, g.Rule+" "+g.Change+" "+strconv.Itoa(g.Count))
	}
	return out
}

// recordHistory submits and reviews a few requests, allowed and denied.
func recordHistory(t *testing.T, e *testEnv) (allowedLs api.RunView) {
	t.Helper()
	done := e.submit(tokAlice, "echo", "hi")
	e.waitFinished(done.ID)
	allowedLs = e.submit(tokAlice, "ls", "/")
	e.waitFinished(allowedLs.ID)
	if r := e.do(http.MethodPost, "/v1/runs", tokBob, `{"command":["sh"],"privileged":true}`); r.status != http.StatusForbidden {
		t.Fatalf("privileged run: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodPost, "/v1/admission/review", tokSec, `{"command":["ls"],"privileged":true}`); r.status != http.StatusOK {
		t.Fatalf("review: %d %s", r.status, r.body)
	}
	envRun := e.do(http.MethodPost, "/v1/runs", tokBob, `{"command":["env"],"env":{"TOKEN":"s3cret"}}`)
	if envRun.status != http.StatusAccepted {
		t.Fatalf("env run: %d %s", envRun.status, envRun.body)
	}
	e.waitFinished(envRun.run(t).ID)
	return allowedLs
}

// TestReplayReportsChangedDecisions: a candidate that denies a command and
// allows privileged runs reports exactly the recorded decisions that flip,
// grouped by rule with examples, and the replay is in the trail.
func TestReplayReportsChangedDecisions(t *testing.T) {
	e := newEnv(t)
	ls := recordHistory(t, e)
	before := len(e.recorder.all())

	rep := e.do(http.MethodPost, "/v1/policies/replay", tokSec,
		replayBody(`{"deny_commands":["ls"],"allow_privileged":true}`)).replay(t)
	if rep.Replayed != 5 || rep.Unchanged != 2 || rep.Skipped != 0 || rep.Approximate != 0 || rep.Truncated {
		t.Errorf("replayed %d unchanged %d skipped %d approximate %d truncated %v, want 5 2 0 0 false",
			rep.Replayed, rep.Unchanged, rep.Skipped, rep.Approximate, rep.Truncated)
	}
	if rep.CandidateRevision != "sha256:candidate" || rep.CurrentRevision != "sha256:test" {
		t.Errorf("revisions %s %s", rep.CandidateRevision, rep.CurrentRevision)
	}
	if diff := cmp.Diff([]string{"denied_command added 1"}, groupRules(rep.NewlyDenied)); diff != "" {
		t.Errorf("newly denied (-want +got):\n%s", diff)
	}
	if rep.NewlyDenied.Count != 1 {
		t.Fatalf("newly denied %d, want 1", rep.NewlyDenied.Count)
	}
	ex := rep.NewlyDenied.Rules[0].Examples[0]
	want := api.ReplayExample{
		DecisionID: ls.DecisionID, RunID: ls.ID, CorrelationID: ls.CorrelationID, Principal: "alice", Team: "payments",
		Operation: "run", RecordedAt: ex.RecordedAt, RecordedRevision: "sha256:test", RecordedAllow: true,
		RecordedRules: []string{}, CandidateRules: []string{"denied_command"},
	}
	if diff := cmp.Diff(want, ex); diff != "" {
		t.Errorf("example (-want +got):\n%s", diff)
	}
	// Bob's privileged run would be allowed; sec's privileged review of
	// ls stays denied, by the command rule instead.
	if diff := cmp.Diff([]string{"no_privileged removed 1"}, groupRules(rep.NewlyAllowed)); diff != "" {
		t.Errorf("newly allowed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"denied_command added 1", "no_privileged removed 1"}, groupRules(rep.Changed)); diff != "" {
		t.Errorf("changed (-want +got):\n%s", diff)
	}
	if got := rep.NewlyAllowed.Rules[0].Examples[0]; got.Principal != "bob" || got.Operation != "run" || got.RunID != "" {
		t.Errorf("newly allowed example %+v, want bob's denied run", got)
	}
	if got := rep.Changed.Rules[0].Examples[0]; got.Principal != "sec" || got.Operation != "review" {
		t.Errorf("changed example %+v, want sec's review", got)
	}

	// Nothing ran and nothing was decided: one event, the replay's.
	after := e.recorder.all()[before:]
	if len(after) != 1 || after[0].Type != sandgate.EventPolicyReplayed {
		t.Fatalf("events after the replay: %v", after)
	}
	ev := after[0]
	if ev.Outcome != "success" || ev.Actor != "sec" || ev.PolicyRevision != "sha256:test" || ev.Payload["candidate_revision"] != "sha256:candidate" {
		t.Errorf("policy.replayed %+v", ev)
	}
	counts, _ := ev.Payload["counts"].(map[string]any)
	if counts["replayed"] != 5 || counts["newly_denied"] != 1 || counts["newly_allowed"] != 1 || counts["changed"] != 1 {
		t.Errorf("recorded counts %v", counts)
	}
}

// TestReplayRecordsInputs: runs and reviews record their decision's
// input in the one shape (the operation, the principal with its roles and
// how it signed in, the spec, the settings), so that a replay is exact;
// records written before are replayed approximately, with the submitter
// role for a run.
func TestReplayRecordsInputs(t *testing.T) {
	e := newEnv(t)
	recordHistory(t, e)
	for _, ev := range e.recorder.all() {
		if ev.Type != sandgate.EventRunRequested && ev.Type != sandgate.EventAdmissionReviewed {
			continue
		}
		rec, ok := sandgate.ReadDecisionRecord(generic(ev.Payload).(map[string]any))
		in := rec.Input
		if !ok || len(in.Principal.Roles) != 1 || in.Principal.Name != ev.Actor || rec.SignIn != sandgate.SignInToken ||
			!slices.Equal(in.Settings.MountRoots, []string{"/srv/work"}) || len(in.Request.Command) == 0 {
			t.Errorf("%s by %s: record %+v (read %v)", ev.Type, ev.Actor, rec, ok)
		}
	}
	// An older record: no roles, no settings.
	e.recorder.Emit(sandgate.Event{Type: sandgate.EventRunRequested, DecisionID: "old-1", Actor: "carol", Team: "payments",
		Payload: map[string]any{"spec": map[string]any{"image": "sandgate/sandbox:latest", "command": []string{"ls"}}}})
	e.recorder.Emit(sandgate.Event{Type: sandgate.EventAdmissionAllowed, Outcome: "allowed", DecisionID: "old-1", Actor: "carol",
		Team: "payments", PolicyRevision: "sha256:old", Payload: map[string]any{"allow": true, "violations": []any{}}})
	rep := e.do(http.MethodPost, "/v1/policies/replay?team=payments", tokAdmin, replayBody(`{"deny_commands":["ls"]}`)).replay(t)
	if rep.Replayed != 3 || rep.Approximate != 1 || rep.NewlyDenied.Count != 2 {
		t.Fatalf("replayed %d approximate %d newly denied %d, want 3 1 2", rep.Replayed, rep.Approximate, rep.NewlyDenied.Count)
	}
	var old *api.ReplayExample
	for _, ex := range rep.NewlyDenied.Rules[0].Examples {
		if ex.DecisionID == "old-1" {
			old = &ex
		}
	}
	if old == nil || !old.Approximate || old.RecordedRevision != "sha256:old" {
		t.Errorf("the old record's example: %+v", old)
	}
	if rep.Filter.Team != "payments" {
		t.Errorf("filter %+v", rep.Filter)
	}
}

// TestReplayMaskedValues: a candidate rule that reads env values sees
// their keyed hashes; the decision is flagged as depending on them.
func TestReplayMaskedValues(t *testing.T) {
	e := newEnv(t)
	recordHistory(t, e)
	rep := e.do(http.MethodPost, "/v1/policies/replay", tokSec, replayBody(`{"deny_env_values":true}`)).replay(t)
	if rep.MaskedInputs != 1 || rep.MaskDependent != 1 || rep.NewlyDenied.Count != 1 {
		t.Fatalf("masked %d dependent %d newly denied %d, want 1 1 1", rep.MaskedInputs, rep.MaskDependent, rep.NewlyDenied.Count)
	}
	if ex := rep.NewlyDenied.Rules[0].Examples[0]; !ex.MaskDependent || ex.Principal != "bob" {
		t.Errorf("example %+v, want bob's env run flagged", ex)
	}
	// A candidate that does not read them: the env run is unchanged and
	// not flagged.
	rep = e.do(http.MethodPost, "/v1/policies/replay", tokSec, replayBody(`{}`)).replay(t)
	if rep.MaskedInputs != 1 || rep.MaskDependent != 0 || rep.NewlyAllowed.Count != 0 || rep.NewlyDenied.Count != 0 {
		t.Errorf("masked %d dependent %d newly %d/%d, want 1 0 0/0", rep.MaskedInputs, rep.MaskDependent, rep.NewlyAllowed.Count, rep.NewlyDenied.Count)
	}
}

// TestReplayBounds: the limit and the examples are honoured, and bad
// requests are refused naming the field, a refused candidate with 422
// and a refused replay in the trail.
func TestReplayBounds(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) { c.ReplayMaxDecisions = 3 })
	recordHistory(t, e)
	rep := e.do(http.MethodPost, "/v1/policies/replay?limit=2&examples=0", tokSec, replayBody(`{"deny_commands":["echo","ls"]}`)).replay(t)
	if rep.Replayed != 2 || !rep.Truncated || rep.Through == nil || rep.Filter.Limit != 2 {
		t.Errorf("replayed %d truncated %v through %v limit %d, want 2 true set 2", rep.Replayed, rep.Truncated, rep.Through, rep.Filter.Limit)
	}
	if rep.NewlyDenied.Count != 2 || len(rep.NewlyDenied.Rules[0].Examples) != 0 {
		t.Errorf("newly denied %+v, want 2 without examples", rep.NewlyDenied)
	}
	rep = e.do(http.MethodPost, "/v1/policies/replay", tokSec, replayBody(`{}`)).replay(t)
	if rep.Replayed != 3 || !rep.Truncated || rep.Filter.Limit != 3 {
		t.Errorf("default limit: replayed %d truncated %v limit %d, want the maximum 3", rep.Replayed, rep.Truncated, rep.Filter.Limit)
	}

	tests := []struct {
		name, query, body string
		status            int
		code, field       string
	}{
		{"limit over the maximum", "?limit=4", replayBody(`{}`), 400, "SANDGATE-INVALID-REQUEST", "limit"},
		{"limit zero", "?limit=0", replayBody(`{}`), 400, "SANDGATE-INVALID-REQUEST", "limit"},
		{"too many examples", "?examples=21", replayBody(`{}`), 400, "SANDGATE-INVALID-REQUEST", "examples"},
		{"unknown parameter", "?actor=bob", replayBody(`{}`), 400, "SANDGATE-INVALID-REQUEST", "actor"},
		{"bad time", "?since=yesterday", replayBody(`{}`), 400, "SANDGATE-INVALID-REQUEST", "since"},
		{"unknown field", "", `{"files":{},"modules":{}}`, 400, "SANDGATE-INVALID-REQUEST", "modules"},
		{"too large", "", `{"files":{"a.rego":"` + strings.Repeat("x", api.MaxReplayBodyBytes) + `"}}`, 413, "SANDGATE-TOO-LARGE", ""},
		{"broken candidate", "", replayBody(`{}`, "broken.rego"), 422, "SANDGATE-POLICY-INVALID", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(http.MethodPost, "/v1/policies/replay"+tc.query, tokSec, tc.body)
			if r.status != tc.status || r.errorCode() != tc.code {
				t.Fatalf("%d %s, want %d %s: %.300s", r.status, r.errorCode(), tc.status, tc.code, r.body)
			}
			if tc.field != "" && !strings.Contains(string(r.body), tc.field) {
				t.Errorf("the error does not name %s: %s", tc.field, r.body)
			}
		})
	}
	refused := e.recorder.ofType(sandgate.EventPolicyReplayed)
	last := refused[len(refused)-1]
	if last.Outcome != "refused" || !slices.Equal(last.Payload["errors"].([]string), []string{"broken.rego:1: rego_parse_error: unexpected eof"}) {
		t.Errorf("the refused replay's event: %+v", last)
	}
	e.srv.replays.replaying.Lock()
	if r := e.do(http.MethodPost, "/v1/policies/replay", tokAdmin, replayBody(`{}`)); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Errorf("a second replay at once: %d %s", r.status, r.body)
	}
	e.srv.replays.replaying.Unlock()
	for _, tok := range []string{tokAlice, tokAuditor} {
		if r := e.do(http.MethodPost, "/v1/policies/replay", tok, replayBody(`{}`)); r.status != http.StatusForbidden {
			t.Errorf("replay by %s: %d, want 403", tok, r.status)
		}
	}
}

// TestReplayDrift: with drift=true the records are also compared with
// the policy in force; a record its own revision cannot reproduce counts.
func TestReplayDrift(t *testing.T) {
	e := newEnv(t)
	recordHistory(t, e)
	rep := e.do(http.MethodPost, "/v1/policies/replay", tokSec, replayBody(`{}`)).replay(t)
	if rep.Drift != nil {
		t.Errorf("drift without drift=true: %+v", rep.Drift)
	}
	rep = e.do(http.MethodPost, "/v1/policies/replay?drift=true", tokSec, replayBody(`{}`)).replay(t)
	if rep.Drift == nil || rep.Drift.Count != 0 {
		t.Fatalf("drift of an exact history: %+v", rep.Drift)
	}
	// A denial the policy in force (same revision) would not repeat.
	e.recorder.Emit(sandgate.Event{Type: sandgate.EventAdmissionReviewed, Outcome: "denied", DecisionID: "odd-1", Actor: "carol",
		Team: "payments", PolicyRevision: "sha256:test", Payload: map[string]any{
			"allow": false, "violations": []any{map[string]any{"rule": "time_of_day", "action": "deny"}},
			"spec": map[string]any{"image": "sandgate/sandbox:latest", "command": []string{"ls"}},
		}})
	rep = e.do(http.MethodPost, "/v1/policies/replay?drift=true", tokSec, replayBody(`{}`)).replay(t)
	if rep.Drift == nil || rep.Drift.Count != 1 || rep.Drift.SameRevision != 1 || len(rep.Drift.Examples) != 1 {
		t.Fatalf("drift: %+v", rep.Drift)
	}
	ex := rep.Drift.Examples[0]
	if ex.DecisionID != "odd-1" || !ex.CandidateAllow || !slices.Equal(ex.RecordedRules, []string{"time_of_day"}) {
		t.Errorf("drift example %+v", ex)
	}
	if r := e.do(http.MethodPost, "/v1/policies/replay?drift=yes", tokSec, replayBody(`{}`)); r.status != http.StatusBadRequest {
		t.Errorf("drift=yes: %d", r.status)
	}
}

// TestReplayTimeout: a replay out of time answers what it replayed so
// far, marked timed out, and is recorded so.
func TestReplayTimeout(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) { c.ReplayTimeout = 150 * time.Millisecond })
	recordHistory(t, e)
	rep := e.do(http.MethodPost, "/v1/policies/replay", tokSec, replayBody(`{"slow_ms":100}`)).replay(t)
	if !rep.TimedOut || !rep.Truncated || rep.Replayed < 1 || rep.Replayed >= 5 {
		t.Errorf("timed out %v truncated %v replayed %d, want a partial replay", rep.TimedOut, rep.Truncated, rep.Replayed)
	}
	evs := e.recorder.ofType(sandgate.EventPolicyReplayed)
	if len(evs) != 1 || evs[0].Payload["timed_out"] != true || evs[0].Payload["file_count"] != 1 {
		t.Errorf("policy.replayed: %+v", evs)
	}
}
