package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// BenchmarkSessionExec compares a command in an open session through
// sandgate (`true`: POST /v1/sessions/{id}/runs?wait=60s over HTTP, a
// policy decision with operation exec, run.requested and the admission
// committed to the trail while the run is stored, the command started by
// the session's agent and its exit read from the agent's stream,
// container.started and container.exited recorded, the run's end stored)
// with `docker exec` of the same command, as the same user, in the same
// container on the same daemon, in interleaved pairs (alternating which
// goes first). It reports both medians and their ratio (the goal
// is <= 0.25), then the throughput of 16 commands at once in the one
// session, next to 16 `docker exec` at once.
// SANDGATE_BENCH_PAIRS sets the pairs (default 21), SANDGATE_BENCH_BURST
// the commands of each throughput run (default 160).
func BenchmarkSessionExec(b *testing.B) {
	s := startServer(b)
	pairs := benchInt("SANDGATE_BENCH_PAIRS", 21)
	burst := benchInt("SANDGATE_BENCH_BURST", 160)
	client := &http.Client{Timeout: 2 * time.Minute}

	ss := benchOpenSession(b, client, s)
	defer benchDelete(b, client, s, "/v1/sessions/"+ss.ID)
	var measured []string // run IDs
	viaSandgate := func() time.Duration {
		start := time.Now()
		id := benchExecTrue(b, client, s, ss.ID)
		elapsed := time.Since(start)
		measured = append(measured, id)
		return elapsed
	}
	viaDocker := func() time.Duration {
		start := time.Now()
		out, err := exec.Command("docker", "exec", "--user", ss.Spec.User, "--workdir", ss.Spec.Workdir, ss.ContainerID, "true").CombinedOutput()
		elapsed := time.Since(start)
		if err != nil {
			b.Fatalf("docker exec: %v: %s", err, out)
		}
		return elapsed
	}
	for range 3 { // warm-up of both paths
		viaSandgate()
		viaDocker()
	}
	measured = nil
	b.ResetTimer()
	sg, de := interleaved(pairs, viaSandgate, viaDocker)
	b.StopTimer()

	sgMed, deMed := sandgatetest.Median(slices.Clone(sg)), sandgatetest.Median(slices.Clone(de))
	ratio := float64(sgMed) / float64(deMed)
	b.ReportMetric(float64(pairs), "pairs")
	b.ReportMetric(ms(sgMed), "session-exec-p50-ms")
	b.ReportMetric(ms(deMed), "docker-exec-p50-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(slices.Clone(sg), 90)), "session-exec-p90-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(slices.Clone(de), 90)), "docker-exec-p90-ms")
	b.ReportMetric(ratio, "ratio-of-medians")
	b.Logf("pairs=%d session exec median %.1f ms, docker exec median %.1f ms, ratio %.3f (goal <= 0.25); load %s",
		pairs, ms(sgMed), ms(deMed), ratio, loadAverage())
	// Where a command's time goes, by the trail's clock.
	var admit, run []time.Duration
	for _, id := range measured {
		at := map[sandgate.EventType]time.Time{}
		for _, ev := range benchCommandEvents(b, client, s, id) {
			at[ev.Type] = ev.Time
		}
		admit = append(admit, at[sandgate.EventContainerStarted].Sub(at[sandgate.EventRunRequested]))
		run = append(run, at[sandgate.EventContainerExited].Sub(at[sandgate.EventContainerStarted]))
	}
	b.ReportMetric(ms(sandgatetest.Median(admit)), "requested-to-started-p50-ms")
	b.ReportMetric(ms(sandgatetest.Median(run)), "started-to-exited-p50-ms")
	b.Logf("command phases (medians, trail clock): requested->started %.1f ms (commit and store, the agent's start), started->exited %.1f ms (the command, its exit frame)",
		ms(sandgatetest.Median(admit)), ms(sandgatetest.Median(run)))

	// 16 at once: runs per second through sandgate, and docker exec's.
	const workers = 16
	throughput := func(one func()) float64 {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= int64(burst) {
					one()
				}
			})
		}
		wg.Wait()
		return float64(burst) / time.Since(start).Seconds()
	}
	sgRate := throughput(func() { benchExecTrue(b, client, s, ss.ID) })
	deRate := throughput(func() { viaDocker() })
	b.ReportMetric(sgRate, "session-runs/s@16")
	b.ReportMetric(deRate, "docker-exec/s@16")
	b.Logf("%d commands, %d at once: sandgate %.1f runs/s, docker exec %.1f/s; load %s", burst, workers, sgRate, deRate, loadAverage())
}

// benchOpenSession opens a session with the policy's defaults.
func benchOpenSession(b *testing.B, client *http.Client, s *testServer) api.SessionView {
	b.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/sessions", strings.NewReader(`{"idle_timeout_seconds":3600,"max_lifetime_seconds":7200}`))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ss api.SessionView
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &ss) != nil {
		b.Fatalf("open session: %d %s", resp.StatusCode, body)
	}
	return ss
}

// benchCommandEvents returns a run's audit events once one of type until
// (container.exited when none is given) is in the trail.
func benchCommandEvents(b *testing.B, client *http.Client, s *testServer, runID string, until ...sandgate.EventType) []sandgate.AuditRecord {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var page api.AuditEventList
		if err := getJSON(client, s, "/v1/audit/events?"+url.Values{"run_id": {runID}, "limit": {"100"}}.Encode(), &page); err != nil {
			b.Fatal(err)
		}
		want := sandgate.EventContainerExited
		if len(until) > 0 {
			want = until[0]
		}
		for _, ev := range page.Events {
			if ev.Type == want {
				return page.Events
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("run %s: no %s in the trail", runID, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// benchExecTrue runs `true` in the session, waits for its end and
// returns its run ID.
func benchExecTrue(b *testing.B, client *http.Client, s *testServer, id string) string {
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/sessions/"+id+"/runs?wait=60s", strings.NewReader(`{"command":["true"]}`))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		b.Error(err)
		return ""
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var run api.RunView
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &run) != nil ||
		run.Outcome == nil || *run.Outcome != sandgate.OutcomeSucceeded {
		b.Errorf("session exec: %d %s", resp.StatusCode, body)
	}
	return run.ID
}

// benchDelete sends DELETE path.
func benchDelete(b *testing.B, client *http.Client, s *testServer, path string) {
	req, _ := http.NewRequest(http.MethodDelete, s.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := client.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	resp.Body.Close()
}

// BenchmarkSessionCreateVsDockerRun compares opening a session and
// running its first command through sandgate with a warm pool
// (SANDGATE_WARM_POOL=2: POST /v1/sessions, a policy decision with
// operation session, its admission committed, the session stored, a warm
// session container claimed with its agent and workspace ready,
// session.created recorded; then POST /v1/sessions/{id}/runs?wait=60s of
// `true`, all the way to its stored end) with `docker run --rm` of `true`
// in the same hardened container on the same daemon, in interleaved
// pairs. The goal is <= 0.15. Before each measured pair, outside
// the timed section, the previous session is deleted and the pool is
// waited for until it is full again; afterwards the trail is checked for
// every measured session having been served warm.
func BenchmarkSessionCreateVsDockerRun(b *testing.B) {
	const poolSize = 2
	s := startServer(b, withEnv("SANDGATE_WARM_POOL", strconv.Itoa(poolSize)))
	pairs := benchInt("SANDGATE_BENCH_PAIRS", 21)
	client := &http.Client{Timeout: 2 * time.Minute}
	var cfg api.ConfigView
	if err := getJSON(client, s, "/v1/config", &cfg); err != nil {
		b.Fatal(err)
	}
	maxConcurrent := defaultMaxConcurrent
	dockerNode := s.Node + "-docker-run"
	waitFull := func() {
		deadline := time.Now().Add(2 * time.Minute)
		for warmIdle(b, s.Node) != poolSize*servedProfiles {
			if time.Now().After(deadline) {
				b.Fatalf("the warm pool did not refill within 2 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var sessions []string
	viaSandgate := func() time.Duration {
		start := time.Now()
		ss := benchOpenSession(b, client, s)
		benchExecTrue(b, client, s, ss.ID)
		elapsed := time.Since(start)
		sessions = append(sessions, ss.ID)
		return elapsed
	}
	viaDocker := func() time.Duration {
		args := dockerRunArgs(cfg.Defaults, dockerNode, maxConcurrent, uuid.Must(uuid.NewV7()).String(), "true")
		start := time.Now()
		out, err := exec.Command("docker", args...).CombinedOutput()
		elapsed := time.Since(start)
		if err != nil {
			b.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return elapsed
	}
	settle := func() {
		if len(sessions) > 0 {
			benchDelete(b, client, s, "/v1/sessions/"+sessions[len(sessions)-1])
			// Its container is gone before the pool is counted.
			benchSessionEnded(b, client, s, sessions[len(sessions)-1])
		}
		waitFull()
	}
	for range 2 { // warm-up of both paths
		settle()
		viaSandgate()
		viaDocker()
	}
	sessions = sessions[len(sessions)-1:]
	b.ResetTimer()
	sg, dr := interleavedAfter(b, pairs, settle, viaSandgate, viaDocker)
	b.StopTimer()
	settle()
	for _, id := range sessions[1:] {
		warm := false
		for _, ev := range benchCommandEvents(b, client, s, id, sandgate.EventContainerCreated) {
			if _, ok := ev.Payload["warm_pool"]; ok && ev.Type == sandgate.EventContainerCreated {
				warm = true
			}
		}
		if !warm {
			b.Fatalf("session %s was not served from the warm pool", id)
		}
	}
	sgMed, drMed := sandgatetest.Median(slices.Clone(sg)), sandgatetest.Median(slices.Clone(dr))
	ratio := float64(sgMed) / float64(drMed)
	b.ReportMetric(float64(pairs), "pairs")
	b.ReportMetric(ms(sgMed), "session-create-first-command-p50-ms")
	b.ReportMetric(ms(drMed), "docker-run-p50-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(slices.Clone(sg), 90)), "session-create-first-command-p90-ms")
	b.ReportMetric(ratio, "ratio-of-medians")
	b.Logf("pairs=%d session create + first command median %.1f ms, docker run --rm median %.1f ms, ratio %.3f (goal <= 0.15); load %s",
		pairs, ms(sgMed), ms(drMed), ratio, loadAverage())
}

// benchSessionEnded waits until the session's container is removed.
func benchSessionEnded(b *testing.B, client *http.Client, s *testServer, id string) {
	b.Helper()
	benchCommandEvents(b, client, s, id, sandgate.EventContainerRemoved)
}
