package e2e

import (
	"context"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// BenchmarkStopVsDockerStop measures NFR-08, a run's stop: from the
// cancel (DELETE /v1/runs/{id} through the client) to the run's container
// gone from the daemon, against `docker stop` of the same container
// started with `docker run -d --rm` (the arguments sandgate gives it) on
// the same daemon, until it is gone. Both sides run `sleep 300` under
// --init, so SIGTERM ends them at once and neither waits out a grace
// period; both are timed to the same check (`docker ps` by the run's
// label, polled), so its cost falls on both. Pairs alternate which goes
// first. SANDGATE_BENCH_PAIRS sets how many (default 9).
func BenchmarkStopVsDockerStop(b *testing.B) {
	s := startServer(b, withEnv("SANDGATE_WARM_POOL", "0"))
	pairs := benchInt("SANDGATE_BENCH_PAIRS", 9)
	httpClient := &http.Client{Timeout: 2 * time.Minute}
	var cfg api.ConfigView
	if err := getJSON(httpClient, s, "/v1/config", &cfg); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dockerNode := s.Node + "-docker-stop"
	gone := func(runID string) {
		for deadline := time.Now().Add(time.Minute); countContainers(b, sandgate.LabelRunID, runID) != 0; {
			if time.Now().After(deadline) {
				b.Fatalf("run %s: its container is still there a minute after the stop", runID)
			}
		}
	}
	viaSandgate := func() time.Duration {
		run, err := s.Client.Submit(ctx, sandgate.RunSpec{Command: []string{"sleep", "300"}}, client.SubmitOptions{})
		if err != nil {
			b.Fatalf("submit: %v", err)
		}
		for deadline := time.Now().Add(time.Minute); ; {
			v, err := s.Client.Run(ctx, run.ID)
			if err != nil {
				b.Fatal(err)
			}
			if v.State == sandgate.StateRunning && v.ContainerID != "" {
				break
			}
			if v.Finished() || time.Now().After(deadline) {
				b.Fatalf("run %s did not start: %+v", run.ID, v)
			}
			time.Sleep(20 * time.Millisecond)
		}
		start := time.Now()
		if _, err := s.Client.Cancel(ctx, run.ID); err != nil {
			b.Fatalf("cancel: %v", err)
		}
		gone(run.ID)
		return time.Since(start)
	}
	viaDocker := func() time.Duration {
		runID := uuid.Must(uuid.NewV7()).String()
		args := dockerRunArgs(cfg.Defaults, dockerNode, defaultMaxConcurrent, runID, "sleep", "300")
		args = append([]string{"run", "-d"}, args[1:]...)
		out, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			b.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
		}
		id := strings.TrimSpace(string(out))
		start := time.Now()
		if out, err := exec.Command("docker", "stop", "-t", "10", id).CombinedOutput(); err != nil {
			b.Fatalf("docker stop: %v: %s", err, out)
		}
		gone(runID)
		return time.Since(start)
	}
	viaSandgate()
	viaDocker()
	b.ResetTimer()
	sg, dr := interleaved(pairs, viaSandgate, viaDocker)
	b.StopTimer()
	sgMed, drMed := sandgatetest.Median(slices.Clone(sg)), sandgatetest.Median(slices.Clone(dr))
	b.ReportMetric(float64(pairs), "pairs")
	b.ReportMetric(ms(sgMed), "sandgate-stop-p50-ms")
	b.ReportMetric(ms(drMed), "docker-stop-p50-ms")
	b.ReportMetric(float64(sgMed)/float64(drMed), "ratio-of-medians")
	b.Logf("pairs=%d cancel to gone: sandgate median %.0f ms, docker stop median %.0f ms, ratio %.2f; load %s",
		pairs, ms(sgMed), ms(drMed), float64(sgMed)/float64(drMed), loadAverage())
	if n := countContainers(b, sandgate.LabelNode, dockerNode); n != 0 {
		b.Errorf("%d docker containers left", n)
	}
}
