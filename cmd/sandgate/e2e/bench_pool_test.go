package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// BenchmarkWarmRunVsDockerRun compares an end-to-end run of `true` through
// sandgate with a warm pool (SANDGATE_WARM_POOL=2; POST /v1/runs?wait=60s
// over HTTP: decision, committed audit events, a warm container claimed,
// the command started by its agent and its exit read from the agent's
// stream, stored run; the container is removed after the answer) with
// `docker run --rm` of the same container on the same daemon, in
// interleaved pairs (alternating which goes first), and reports the ratio
// of the medians (the goal is <= 0.10).
//
// Before every measured sandgate run, outside the timed section, it waits
// until the pool is full again (the pool's containers of the node are all
// running and idle): the figure is the steady state of a request rate the
// refill keeps up with, which is one run per refill time (about one cold
// container start). It checks afterwards, in the audit trail, that every
// measured run was served warm, and reports where a warm run's time goes
// from the trail's event times. SANDGATE_BENCH_PAIRS sets the number of
// pairs (default 21).
func BenchmarkWarmRunVsDockerRun(b *testing.B) {
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
				b.Fatalf("the warm pool did not refill to %d within 2 minutes", poolSize)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var measured []string // run IDs
	viaSandgate := func() time.Duration {
		elapsed, run := runTrue(b, client, s)
		measured = append(measured, run.ID)
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

	for range 2 { // warm-up of both paths
		waitFull()
		viaSandgate()
		viaDocker()
	}
	measured = nil
	b.ResetTimer()
	sg, dr := interleavedAfter(b, pairs, func() {
		if len(measured) > 0 {
			// The container of a warm run is removed after its answer:
			// gone before the pool is counted.
			benchRunEvents(b, client, s, measured[len(measured)-1])
		}
		waitFull()
	}, viaSandgate, viaDocker)
	b.StopTimer()

	// Every measured run was warm, and its phases by the trail's clock.
	var admit, run, remove []time.Duration
	for _, id := range measured {
		events := benchRunEvents(b, client, s, id)
		at := map[sandgate.EventType]time.Time{}
		for _, ev := range events {
			at[ev.Type] = ev.Time
			if ev.Type == sandgate.EventContainerCreated {
				if _, ok := ev.Payload["warm_pool"]; !ok {
					b.Fatalf("run %s was not served from the warm pool: %v", id, ev.Payload)
				}
			}
		}
		admit = append(admit, at[sandgate.EventContainerCreated].Sub(at[sandgate.EventRunRequested]))
		run = append(run, at[sandgate.EventContainerExited].Sub(at[sandgate.EventContainerStarted]))
		remove = append(remove, at[sandgate.EventContainerRemoved].Sub(at[sandgate.EventContainerExited]))
	}

	sgMed, drMed := sandgatetest.Median(slices.Clone(sg)), sandgatetest.Median(slices.Clone(dr))
	ratio := float64(sgMed) / float64(drMed)
	b.ReportMetric(float64(pairs), "pairs")
	b.ReportMetric(ms(sgMed), "warm-p50-ms")
	b.ReportMetric(ms(drMed), "docker-run-p50-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(slices.Clone(sg), 90)), "warm-p90-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(slices.Clone(dr), 90)), "docker-run-p90-ms")
	b.ReportMetric(ratio, "ratio-of-medians")
	b.Logf("pairs=%d warm sandgate median %.1f ms, docker run --rm median %.1f ms, ratio %.3f (goal <= 0.10); load %s",
		pairs, ms(sgMed), ms(drMed), ratio, loadAverage())
	b.Logf("warm run phases (medians, trail clock): requested->created %.1f ms, started->exited %.1f ms, exited->removed %.1f ms",
		ms(sandgatetest.Median(admit)), ms(sandgatetest.Median(run)), ms(sandgatetest.Median(remove)))
	if n := countContainers(b, sandgate.LabelNode, dockerNode); n != 0 {
		b.Errorf("%d docker run containers left", n)
	}
}

// servedProfiles is how many warm profiles serve keeps: the default
// run's and the default session's.
const servedProfiles = 2

// warmIdle counts the running warm pool containers of node. Between runs
// (every run's container is removed before its answer) these are the
// idle ones.
func warmIdle(t testing.TB, node string) int {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-q", "--filter", "status=running",
		"--filter", "label="+sandgate.LabelNode+"="+node, "--filter", "label="+executor.LabelPool).CombinedOutput()
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return len(strings.Fields(string(out)))
}

// benchRunEvents returns the run's audit events once its container.removed
// is in the trail.
func benchRunEvents(t testing.TB, client *http.Client, s *testServer, runID string) []sandgate.AuditRecord {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var page api.AuditEventList
		if err := getJSON(client, s, "/v1/audit/events?"+url.Values{"run_id": {runID}, "limit": {"100"}}.Encode(), &page); err != nil {
			t.Fatal(err)
		}
		for _, ev := range page.Events {
			if ev.Type == sandgate.EventContainerRemoved {
				return page.Events
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: no container.removed in the trail: %s", runID, fmt.Sprint(len(page.Events), " events"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
