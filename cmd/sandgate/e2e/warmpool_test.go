package e2e

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/gateway/api"
)

// TestWarmPoolThroughServer runs through a real server with
// SANDGATE_WARM_POOL=2: warm runs give exact exit codes and output, each
// in a container of its own, and leave the same audit trail as a cold run
// (one the pool cannot serve, for its other memory limit). The harness
// checks at the end that the server's Shutdown left no container.
func TestWarmPoolThroughServer(t *testing.T) {
	s := startServer(t, withEnv("SANDGATE_WARM_POOL", "2"))
	waitWarm := func() {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for warmIdle(t, s.Node) != 2*servedProfiles {
			if time.Now().After(deadline) {
				t.Fatalf("the warm pool did not fill within 2 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	trail := func(run api.RunView) []sandgate.AuditRecord {
		t.Helper()
		return s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}}, func(ev []sandgate.AuditRecord) bool {
			return hasEvent(ev, sandgate.EventContainerRemoved)
		})
	}
	warmOf := func(events []sandgate.AuditRecord) bool {
		for _, ev := range events {
			if ev.Type == sandgate.EventContainerCreated {
				_, ok := ev.Payload["warm_pool"]
				return ok
			}
		}
		return false
	}
	types := func(events []sandgate.AuditRecord) []sandgate.EventType {
		var out []sandgate.EventType
		for _, ev := range events {
			out = append(out, ev.Type)
		}
		return out
	}

	seen := map[string]bool{}
	for _, tc := range []struct {
		spec   string
		exit   int
		stdout string
	}{
		{`{"command":["sh","-c","echo hi; echo oops >&2; exit 3"]}`, 3, "hi\n"},
		{`{"command":["true"]}`, 0, ""},
		{`{"command":["cat"],"stdin":"fed\n"}`, 0, "fed\n"},
	} {
		waitWarm()
		run := s.submitWait(t, s.Token, tc.spec)
		if run.ExitCode == nil || *run.ExitCode != tc.exit || run.Stdout.Data != tc.stdout {
			t.Errorf("%s: exit %v stdout %q, want %d %q", tc.spec, orNil(run.ExitCode), run.Stdout.Data, tc.exit, tc.stdout)
		}
		if seen[run.ContainerID] {
			t.Errorf("%s: container %s reused", tc.spec, run.ContainerID)
		}
		seen[run.ContainerID] = true
		if !warmOf(trail(run)) {
			t.Errorf("%s: not served from the warm pool", tc.spec)
		}
	}

	spec := `{"command":["sh","-c","echo hi; exit 3"]%s}`
	waitWarm()
	warm := s.submitWait(t, s.Token, fmt.Sprintf(spec, ""))
	cold := s.submitWait(t, s.Token, fmt.Sprintf(spec, `,"resources":{"memory_mb":256}`))
	warmTrail, coldTrail := trail(warm), trail(cold)
	if !warmOf(warmTrail) || warmOf(coldTrail) {
		t.Fatalf("want one warm and one cold run, got warm=%v cold=%v", warmOf(warmTrail), warmOf(coldTrail))
	}
	if diff := cmp.Diff(types(coldTrail), types(warmTrail)); diff != "" {
		t.Errorf("audit trail event types (-cold +warm):\n%s", diff)
	}
	for _, ev := range warmTrail {
		if ev.CorrelationID != warm.CorrelationID || ev.Actor == "" || ev.Team == "" {
			t.Errorf("warm %s lacks identities: %+v", ev.Type, ev.Event)
		}
	}
	if orNil(warm.ExitCode) != 3 || orNil(cold.ExitCode) != 3 || warm.Stdout.Data != cold.Stdout.Data {
		t.Errorf("warm exit %v %q, cold exit %v %q", orNil(warm.ExitCode), warm.Stdout.Data, orNil(cold.ExitCode), cold.Stdout.Data)
	}
}

// TestWarmPoolFollowsPolicyReload: when a reload changes the defaults runs
// get (here the memory limit), the warm pool replaces its containers with
// ones of the new default, and a default run is served warm again.
func TestWarmPoolFollowsPolicyReload(t *testing.T) {
	dir := t.TempDir()
	files, err := filepath.Glob("../../../policies/*.rego")
	if err != nil || len(files) == 0 {
		t.Fatalf("the policy bundle: %v", err)
	}
	for _, f := range append(files, "../../../policies/data.json") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, withEnv("SANDGATE_WARM_POOL", "1"), withEnv("SANDGATE_POLICY_DIR", dir))
	pooled := func() []string {
		t.Helper()
		out, err := exec.Command("docker", "ps", "-q", "--no-trunc", "--filter", "status=running",
			"--filter", "label="+sandgate.LabelNode+"="+s.Node, "--filter", "label="+executor.LabelPool).CombinedOutput()
		if err != nil {
			t.Fatalf("docker ps: %v: %s", err, out)
		}
		return strings.Fields(string(out))
	}
	waitPool := func(what string, ok func([]string) bool) []string {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ids := pooled()
			if ok(ids) {
				return ids
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the pool holds %v after 2 minutes", what, ids)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// One container of the default run's profile, one of the default
	// session's.
	first := waitPool("the pool to fill", func(ids []string) bool { return len(ids) == servedProfiles })

	data := filepath.Join(dir, "data.json")
	raw, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"memory_mb": 512`) {
		t.Fatalf("data.json has no default memory_mb of 512")
	}
	if err := os.WriteFile(data, []byte(strings.Replace(string(raw), `"memory_mb": 512`, `"memory_mb": 256`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitPool("the pool to replace its containers", func(ids []string) bool {
		return len(ids) == servedProfiles && !slices.Contains(ids, first[0]) && !slices.Contains(ids, first[1])
	})

	run := s.submitWait(t, s.Token, `{"command":["sh","-c","echo warm"]}`)
	if run.Spec.Resources.MemoryMB != 256 {
		t.Fatalf("the run's spec %+v, want the reloaded default memory limit of 256", run.Spec)
	}
	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}}, func(ev []sandgate.AuditRecord) bool {
		return hasEvent(ev, sandgate.EventContainerRemoved)
	})
	served := false
	for _, ev := range events {
		if ev.Type == sandgate.EventContainerCreated {
			_, served = ev.Payload["warm_pool"]
		}
	}
	if !served || run.Stdout.Data != "warm\n" {
		t.Errorf("after the reload: served warm %v, stdout %q", served, run.Stdout.Data)
	}
}
