package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/policies"
)

// The attacks of #28 item 4: a candidate bundle whose Rego asks for more
// memory than the gateway has. numbers.range(1, 4000000) took the
// gateway to 688 MiB in one builtin call, which no deadline stops.

// memoryBombTest is a Rego unit test that builds a 4-million-element
// array: about 600 MiB in OPA's terms.
const memoryBombTest = `package sandgate.bomb_test

test_bomb if {
	count(numbers.range(1, 4000000)) > 1
}
`

// memoryBombRule is a rule that builds the same array, but only for a
// request whose command is "bomb": the bundle's own tests pass, and the
// replay of such a request's recorded decision is what evaluates it.
const memoryBombRule = `package sandgate.admission

# METADATA
# title: Bomb
# description: builds a huge array for one command.
# custom:
#   severity: low
#   controls: []
finding contains {
	"rule": "bomb",
	"message": "boom",
	"action": "deny",
} if {
	input.request.command[0] == "bomb"
	count(numbers.range(1, 4000000)) > 1
}
`

// cpuBombTest spins without memory: 400 million iterations over two
// small ranges.
const cpuBombTest = `package sandgate.spin_test

test_spin if {
	n := count([1 | some i in numbers.range(1, 20000); some j in numbers.range(1, 20000); i == j + 30000])
	n == 0
}
`

// peakRSS is the high-water mark of this process's resident memory
// (VmHWM), in bytes: the in-process gateway's, and the test's own.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// resetPeakRSS sets the high-water mark back to the current resident
// size (clear_refs 5, Linux 4.0), so that peakRSS then measures what
// follows alone.
func resetPeakRSS(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS: %v", err)
	}
}

// flatGrowth is how much the gateway's peak RSS may grow while it refuses
// a bomb: what a replay or a reload holds of its own (the candidate's
// files, a page of records, the compiled bundle), nowhere near the
// bomb's 600 MiB.
const flatGrowth = 96 << 20

// bombFiles are the default bundle with extra files added.
func bombFiles(t *testing.T, extra map[string]string) map[string][]byte {
	t.Helper()
	dir := bundleWith(t, func(map[string]any) {})
	for name, src := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := policies.BundleFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// wantLimitRefusal checks that err is the refusal of a candidate over the
// evaluator's limit named limit ("memory" or "cpu").
func wantLimitRefusal(t *testing.T, err error, limit string) {
	t.Helper()
	var se *sandgate.Error
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a refusal for the evaluator's %s limit", err, limit)
	}
	if se.Code != sandgate.CodePolicyInvalid || se.Details["limit"] != limit {
		t.Fatalf("got %s %q details %v, want %s with limit %q", se.Code, se.Message, se.Details, sandgate.CodePolicyInvalid, limit)
	}
	if !strings.Contains(se.Message, limit) {
		t.Errorf("message %q does not name the %s limit", se.Message, limit)
	}
}

// TestCandidateTestsCannotTakeTheGatewaysMemory: a candidate whose own
// unit tests build a 600 MiB array is refused, naming the evaluator's
// memory limit, and the gateway's peak memory does not grow with it.
func TestCandidateTestsCannotTakeTheGatewaysMemory(t *testing.T) {
	s := startServer(t)
	files := bombFiles(t, map[string]string{"bomb_test.rego": memoryBombTest})
	resetPeakRSS(t)
	before := peakRSS(t)
	_, err := s.Client.ReplayPolicy(context.Background(), files, client.ReplayOptions{})
	grew := peakRSS(t) - before
	t.Logf("gateway peak RSS grew %d MiB during the replay", grew>>20)
	wantLimitRefusal(t, err, "memory")
	if grew > flatGrowth {
		t.Errorf("the gateway's peak RSS grew %d MiB refusing the candidate; want at most %d MiB", grew>>20, flatGrowth>>20)
	}
	// The refusal is in the trail, like any refused candidate's.
	recs := s.waitEvents(t, "type=policy.replayed", 1)
	if recs[0].Outcome != "refused" {
		t.Errorf("policy.replayed outcome %q, want refused", recs[0].Outcome)
	}
}

// TestCandidateDecisionCannotTakeTheGatewaysMemory: a candidate whose
// tests pass but whose rule builds the array for one recorded request is
// refused when the replay reaches that request, and the gateway's peak
// memory stays flat.
func TestCandidateDecisionCannotTakeTheGatewaysMemory(t *testing.T) {
	s := startServer(t)
	status, _, body := s.do(t, http.MethodPost, "/v1/admission/review", `{"command":["bomb"]}`)
	if status != http.StatusOK {
		t.Fatalf("review: %d %s", status, body)
	}
	s.waitEvents(t, "type=admission.reviewed", 1)
	files := bombFiles(t, map[string]string{"bomb.rego": memoryBombRule})
	resetPeakRSS(t)
	before := peakRSS(t)
	_, err := s.Client.ReplayPolicy(context.Background(), files, client.ReplayOptions{})
	grew := peakRSS(t) - before
	t.Logf("gateway peak RSS grew %d MiB during the replay", grew>>20)
	wantLimitRefusal(t, err, "memory")
	if grew > flatGrowth {
		t.Errorf("the gateway's peak RSS grew %d MiB refusing the candidate; want at most %d MiB", grew>>20, flatGrowth>>20)
	}
}

// TestReloadTestsCannotTakeTheGatewaysMemory: the same bomb written into
// the policy directory is refused by the reload's tests, naming the
// limit; the policy in force stays, and the gateway's peak memory with it.
func TestReloadTestsCannotTakeTheGatewaysMemory(t *testing.T) {
	dir := bundleWith(t, func(map[string]any) {})
	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", dir))
	rev0 := policyRevision(t, s)
	resetPeakRSS(t)
	before := peakRSS(t)
	if err := os.WriteFile(filepath.Join(dir, "bomb_test.rego"), []byte(memoryBombTest), 0o644); err != nil {
		t.Fatal(err)
	}
	status, _, body := s.do(t, http.MethodPost, "/v1/policies/reload", "")
	grew := peakRSS(t) - before
	t.Logf("gateway peak RSS grew %d MiB during the reload", grew>>20)
	if status != http.StatusUnprocessableEntity {
		t.Fatalf("reload: %d %s, want 422", status, body)
	}
	var e struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	if e.Error.Code != string(sandgate.CodePolicyInvalid) || e.Error.Details["limit"] != "memory" {
		t.Errorf("reload refused with %s %q %v; want %s naming the memory limit", e.Error.Code, e.Error.Message, e.Error.Details, sandgate.CodePolicyInvalid)
	}
	if grew > flatGrowth {
		t.Errorf("the gateway's peak RSS grew %d MiB refusing the bundle; want at most %d MiB", grew>>20, flatGrowth>>20)
	}
	if rev := policyRevision(t, s); rev != rev0 {
		t.Errorf("revision %s after a refused reload, want %s kept", rev, rev0)
	}
}

// TestCandidateCPULimit: a candidate whose tests spin is refused when it
// has used the evaluator's CPU limit, naming it. The limit, 15 s, leaves
// room for the default bundle's own tests at start under -race.
func TestCandidateCPULimit(t *testing.T) {
	s := startServer(t, withEnv("SANDGATE_POLICY_EVAL_CPU_SECONDS", "15"))
	files := bombFiles(t, map[string]string{"spin_test.rego": cpuBombTest})
	_, err := s.Client.ReplayPolicy(context.Background(), files, client.ReplayOptions{})
	wantLimitRefusal(t, err, "cpu")
}

// policyRevision is the revision of the policy in force.
func policyRevision(t *testing.T, s *testServer) string {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, "/v1/policies", "")
	var st sandgate.PolicyStatus
	if err := json.Unmarshal(body, &st); status != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/policies = %d %s", status, body)
	}
	return st.Revision
}
