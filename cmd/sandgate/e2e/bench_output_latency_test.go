package e2e

import (
	"bufio"
	"context"
	"encoding/json"
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

// latencyScript prints the wall clock in microseconds (busybox adjtimex
// reads it) every 100 ms, 60 times.
const latencyScript = `i=0; while [ $i -lt 60 ]; do adjtimex | awk '/tv_sec/{s=$2} /tv_usec/{printf "%s.%06d\n", s, $2}'; sleep 0.1; i=$((i+1)); done`

// BenchmarkOutputLatencyVsDockerRun measures NFR-05, the output latency:
// each line a run prints states the time it was written (in the
// container, to the microsecond), and its delay is the time a follower of
// the run's live log (GET /v1/runs/{id}/logs?follow=true, SSE) read it
// minus that. The baseline is the same container under `docker run`
// (attached, the same arguments) on the same daemon, its lines read from
// the docker CLI's stdout. Runs alternate, SANDGATE_BENCH_PAIRS of each
// (default 3, 60 lines each); the figures are the medians and p99 of
// every line's delay.
func BenchmarkOutputLatencyVsDockerRun(b *testing.B) {
	s := startServer(b, withEnv("SANDGATE_WARM_POOL", "0"))
	pairs := benchInt("SANDGATE_BENCH_PAIRS", 3)
	httpClient := &http.Client{Timeout: 5 * time.Minute}
	var cfg api.ConfigView
	if err := getJSON(httpClient, s, "/v1/config", &cfg); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dockerNode := s.Node + "-docker-latency"
	viaSandgate := func() []time.Duration {
		run, err := s.Client.Submit(ctx, sandgate.RunSpec{Command: []string{"sh", "-c", latencyScript}}, client.SubmitOptions{})
		if err != nil {
			b.Fatalf("submit: %v", err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/runs/"+run.ID+"/logs?follow=true", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := httpClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("follow %s: %v %v", run.ID, resp, err)
		}
		defer resp.Body.Close()
		var delays []time.Duration
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			now := time.Now()
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var chunk api.ChunkData
			if json.Unmarshal([]byte(data), &chunk) != nil {
				continue
			}
			out, err := chunk.Bytes()
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(out), "\n") {
				if t, ok := parseMicros(line); ok {
					delays = append(delays, now.Sub(t))
				}
			}
		}
		return delays
	}
	viaDocker := func() []time.Duration {
		args := dockerRunArgs(cfg.Defaults, dockerNode, defaultMaxConcurrent, uuid.Must(uuid.NewV7()).String(), "sh", "-c", latencyScript)
		cmd := exec.Command("docker", args...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		var delays []time.Duration
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if t, ok := parseMicros(sc.Text()); ok {
				delays = append(delays, time.Since(t))
			}
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("docker run: %v", err)
		}
		return delays
	}
	b.ResetTimer()
	var sg, dr []time.Duration
	for i := range pairs {
		if i%2 == 0 {
			sg = append(sg, viaSandgate()...)
			dr = append(dr, viaDocker()...)
		} else {
			dr = append(dr, viaDocker()...)
			sg = append(sg, viaSandgate()...)
		}
	}
	b.StopTimer()
	if len(sg) < pairs*50 || len(dr) < pairs*50 {
		b.Fatalf("lines read: sandgate %d, docker %d, want about %d each", len(sg), len(dr), pairs*60)
	}
	sgMed, drMed := sandgatetest.Median(slices.Clone(sg)), sandgatetest.Median(slices.Clone(dr))
	sgP99, drP99 := sandgatetest.Percentile(slices.Clone(sg), 99), sandgatetest.Percentile(slices.Clone(dr), 99)
	b.ReportMetric(ms(sgMed), "sandgate-line-p50-ms")
	b.ReportMetric(ms(sgP99), "sandgate-line-p99-ms")
	b.ReportMetric(ms(drMed), "docker-run-line-p50-ms")
	b.ReportMetric(ms(drP99), "docker-run-line-p99-ms")
	b.ReportMetric(float64(len(sg)), "lines")
	b.Logf("write to reader: sandgate follower p50 %.2f ms, p99 %.2f ms (%d lines); docker run p50 %.2f ms, p99 %.2f ms (%d lines); load %s",
		ms(sgMed), ms(sgP99), len(sg), ms(drMed), ms(drP99), len(dr), loadAverage())
	if n := countContainers(b, sandgate.LabelNode, dockerNode); n != 0 {
		b.Errorf("%d docker run containers left", n)
	}
}
