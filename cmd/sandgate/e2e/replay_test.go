package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/policies"
)

// noTelnetRule is a rule a candidate bundle adds: telnet is denied (a
// program no test of the bundle itself runs, so the candidate passes them).
const noTelnetRule = `package sandgate.admission

# METADATA
# title: No telnet
# description: telnet is not to be run.
# custom:
#   severity: low
#   controls: []
finding contains {
	"rule": "no_telnet",
	"message": "telnet is forbidden",
	"action": "deny",
} if {
	input.request.command[0] == "telnet"
}
`

// TestPolicyReplay records runs and reviews through the real stack with
// the default bundle (real policy engine, real Postgres trail), then
// replays them with candidates: a stricter one (lower memory maximum and
// a new rule) reports exactly the decisions that would be denied, by
// rule, with examples; a looser one the decision that would be allowed;
// a broken one is refused with 422; each replay is in the trail, and the
// CLI prints the same report.
func TestPolicyReplay(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	since := time.Now().Add(-time.Second)

	// The history: three runs (two allowed, one denied) and four reviews.
	run := func(spec string) api.RunView {
		t.Helper()
		status, _, body := s.do(t, http.MethodPost, "/v1/runs?wait=60s", spec)
		var v api.RunView
		if status == http.StatusOK {
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
		} else if status != http.StatusForbidden {
			t.Fatalf("POST /v1/runs %s: %d %s", spec, status, body)
		}
		return v
	}
	bigRun := run(`{"command":["true"],"resources":{"memory_mb":2048}}`)
	run(`{"command":["true"],"env":{"TOKEN":"s3cret"}}`)
	run(`{"command":["true"],"privileged":true}`)
	review := func(spec string) api.DecisionView {
		t.Helper()
		status, _, body := s.do(t, http.MethodPost, "/v1/admission/review", spec)
		var d api.DecisionView
		if err := json.Unmarshal(body, &d); status != http.StatusOK || err != nil {
			t.Fatalf("review %s: %d %s", spec, status, body)
		}
		return d
	}
	telnet := review(`{"command":["telnet","example.com","23"]}`)
	review(`{"command":["true"],"resources":{"memory_mb":512}}`)
	privBig := review(`{"command":["true"],"privileged":true,"resources":{"memory_mb":3000}}`)
	huge := review(`{"command":["true"],"resources":{"memory_mb":5000}}`)
	if bigRun.ID == "" || !telnet.Allow || privBig.Allow || huge.Allow {
		t.Fatalf("the default bundle decided otherwise than this test expects: %+v %+v %+v %+v", bigRun, telnet, privBig, huge)
	}
	s.waitEvents(t, "type=admission.reviewed", 4)

	// A stricter candidate.
	strict := bundleWith(t, func(cfg map[string]any) {
		cfg["maxima"].(map[string]any)["memory_mb"] = 1024
	})
	if err := os.WriteFile(filepath.Join(strict, "no_telnet.rego"), []byte(noTelnetRule), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := policies.BundleFiles(strict)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Client.ReplayPolicy(ctx, files, client.ReplayOptions{Since: since, Drift: true})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	// The records are exact: the policy in force decides every one as
	// it was recorded.
	if rep.Drift == nil || rep.Drift.Count != 0 {
		t.Errorf("drift %+v, want none", rep.Drift)
	}
	sum, err := policies.Check(ctx, strict)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CandidateRevision != sum.Revision || rep.Replayed != 7 || rep.Unchanged != 4 || rep.Skipped != 0 ||
		rep.Approximate != 0 || rep.Truncated {
		t.Errorf("report %s replayed %d unchanged %d skipped %d approximate %d truncated %v; want %s 7 4 0 0 false",
			rep.CandidateRevision, rep.Replayed, rep.Unchanged, rep.Skipped, rep.Approximate, rep.Truncated, sum.Revision)
	}
	if diff := cmp.Diff([]string{"memory_limit added 1", "no_telnet added 1"}, replayGroups(rep.NewlyDenied)); diff != "" {
		t.Errorf("newly denied (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"memory_limit added 1"}, replayGroups(rep.Changed)); diff != "" {
		t.Errorf("denied by other rules (-want +got):\n%s", diff)
	}
	if rep.NewlyAllowed.Count != 0 || rep.NewlyDenied.Count != 2 {
		t.Errorf("newly allowed %d, newly denied %d; want 0, 2", rep.NewlyAllowed.Count, rep.NewlyDenied.Count)
	}
	examples := map[string]api.ReplayExample{}
	for _, g := range append(rep.NewlyDenied.Rules, rep.Changed.Rules...) {
		for _, ex := range g.Examples {
			examples[ex.DecisionID] = ex
		}
	}
	want := map[string]api.ReplayExample{
		bigRun.DecisionID: {DecisionID: bigRun.DecisionID, RunID: bigRun.ID, CorrelationID: bigRun.CorrelationID,
			Principal: "dev", Team: "dev", Operation: "run", RecordedRevision: bigRun.PolicyRevision, RecordedAllow: true,
			RecordedRules: []string{}, CandidateRules: []string{"memory_limit"},
			RecordedOutcome: "allowed", CandidateOutcome: "denied"},
		telnet.DecisionID: {DecisionID: telnet.DecisionID, Principal: "dev", Team: "dev", Operation: "review",
			RecordedRevision: telnet.PolicyRevision, RecordedAllow: true, RecordedRules: []string{}, CandidateRules: []string{"no_telnet"},
			RecordedOutcome: "allowed", CandidateOutcome: "denied"},
		privBig.DecisionID: {DecisionID: privBig.DecisionID, Principal: "dev", Team: "dev", Operation: "review",
			RecordedRevision: privBig.PolicyRevision, RecordedRules: []string{"no_privileged"},
			CandidateRules: []string{"memory_limit", "no_privileged"}, RecordedOutcome: "denied", CandidateOutcome: "denied"},
	}
	ignore := cmp.FilterPath(func(p cmp.Path) bool {
		name := p.Last().String()
		return name == ".RecordedAt" || name == ".CorrelationID"
	}, cmp.Ignore())
	if diff := cmp.Diff(want, examples, ignore); diff != "" {
		t.Errorf("examples (-want +got):\n%s", diff)
	}
	if rep.MaskedInputs < 1 {
		t.Errorf("masked inputs %d: the run with an env value was not seen as masked", rep.MaskedInputs)
	}

	// A looser candidate: the review of 5000 MB would be allowed.
	loose := bundleWith(t, func(cfg map[string]any) {
		cfg["maxima"].(map[string]any)["memory_mb"] = 8192
	})
	files, err = policies.BundleFiles(loose)
	if err != nil {
		t.Fatal(err)
	}
	rep, err = s.Client.ReplayPolicy(ctx, files, client.ReplayOptions{Since: since})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if diff := cmp.Diff([]string{"memory_limit removed 1"}, replayGroups(rep.NewlyAllowed)); diff != "" {
		t.Errorf("newly allowed (-want +got):\n%s", diff)
	}
	if rep.NewlyAllowed.Count != 1 || rep.NewlyAllowed.Rules[0].Examples[0].DecisionID != huge.DecisionID ||
		rep.NewlyDenied.Count != 0 || rep.Changed.Count != 0 || rep.Unchanged != 6 {
		t.Errorf("loose replay: %+v", rep)
	}
	// Another team's decisions: none.
	rep, err = s.Client.ReplayPolicy(ctx, files, client.ReplayOptions{Team: "payments"})
	if err != nil || rep.Replayed != 0 {
		t.Errorf("team payments: replayed %d, %v", rep.Replayed, err)
	}

	// A broken candidate.
	files["broken.rego"] = []byte("package sandgate.admission\n\nbroken := {")
	_, err = s.Client.ReplayPolicy(ctx, files, client.ReplayOptions{})
	if code := sandgate.ErrorCodeOf(err); code != sandgate.CodePolicyInvalid {
		t.Errorf("broken candidate: %v, want POLICY-INVALID", err)
	}

	// Each replay is in the trail.
	events := s.waitEvents(t, "type=policy.replayed", 4)
	outcomes := []string{}
	for _, ev := range events {
		outcomes = append(outcomes, ev.Outcome)
	}
	if diff := cmp.Diff([]string{"success", "success", "success", "refused"}, outcomes); diff != "" {
		t.Errorf("policy.replayed outcomes (-want +got):\n%s", diff)
	}
	if first := events[0]; first.Payload["candidate_revision"] != sum.Revision || first.Actor != "dev" {
		t.Errorf("first policy.replayed: %+v", first)
	}

	// The CLI prints the same report.
	out := &syncBuffer{}
	err = runApp(ctx, []string{"policy", "replay", "--bundle", strict, "--since", since.Format(time.RFC3339Nano)},
		map[string]string{"SANDGATE_URL": s.URL, "SANDGATE_TOKEN": s.Token}, out, nil)
	if err != nil {
		t.Fatalf("sandgate policy replay: %v\n%s", err, out)
	}
	for _, want := range []string{"replayed 7 decisions", "NEWLY DENIED (2)", "memory_limit added", "no_telnet added", "DENIED BY OTHER RULES (1)", "run " + bigRun.ID} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the CLI's report lacks %q:\n%s", want, out)
		}
	}
	t.Logf("sandgate policy replay:\n%s", out)
	err = runApp(ctx, []string{"policy", "replay", "--bundle", strict, "--json", "--fail-on-change"},
		map[string]string{"SANDGATE_URL": s.URL, "SANDGATE_TOKEN": s.Token}, &syncBuffer{}, nil)
	var exit *cli.ExitError
	if !errors.As(err, &exit) || exit.Code != exitReplayChanged {
		t.Errorf("--fail-on-change: %v, want exit %d", err, exitReplayChanged)
	}
}

// waitEvents polls the trail until the query finds n events, and returns
// them.
func (s *testServer) waitEvents(t *testing.T, query string, n int) []sandgate.AuditRecord {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, _, body := s.do(t, http.MethodGet, "/v1/audit/events?limit=1000&"+query, "")
		var list api.AuditEventList
		if err := json.Unmarshal(body, &list); status != http.StatusOK || err != nil {
			t.Fatalf("audit events: %d %s", status, body)
		}
		if len(list.Events) >= n {
			return list.Events
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events of %s, want %d", len(list.Events), query, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replayGroups lists a change's groups as "rule change count".
func replayGroups(c api.ReplayChanges) []string {
	out := []string{}
	for _, g := range c.Rules {
		out = append(out, g.Rule+" "+g.Change+" "+strconv.Itoa(g.Count))
	}
	return out
}
