package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// BenchmarkMountSetup measures NFR-06, what bind mounts add to a run: a
// cold run of `true` with N read-only bind mounts of the team's
// directories (SANDGATE_BENCH_MOUNTS, default 8) against the same run
// with none, through sandgate (POST /v1/runs, waiting for the end: the
// mounts resolved under the mount root, staged and bound) and through
// `docker run --rm` with the same arguments and N -v flags on the same
// daemon. The four kinds of run take turns, the order rotating each
// round (SANDGATE_BENCH_PAIRS rounds, default 7); the figures are the
// medians and the difference per mount.
func BenchmarkMountSetup(b *testing.B) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		b.Skip("bind mounts need root")
	}
	n := benchInt("SANDGATE_BENCH_MOUNTS", 8)
	rounds := benchInt("SANDGATE_BENCH_PAIRS", 7)
	root := filepath.Join(b.TempDir(), "roots")
	team := filepath.Join(root, "dev") // the dev principal's team
	var mounts []sandgate.Mount
	for i := range n {
		dir := filepath.Join(team, fmt.Sprintf("d%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		mounts = append(mounts, sandgate.Mount{Source: dir, Target: fmt.Sprintf("/m%d", i), ReadOnly: true})
	}
	s := startServer(b, withEnv("SANDGATE_MOUNT_ROOTS", root), withEnv("SANDGATE_WARM_POOL", "0"))
	var cfg api.ConfigView
	if err := getJSON(&http.Client{Timeout: time.Minute}, s, "/v1/config", &cfg); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dockerNode := s.Node + "-docker-mounts"
	viaSandgate := func(ms []sandgate.Mount) time.Duration {
		start := time.Now()
		run, err := s.Client.Submit(ctx, sandgate.RunSpec{Command: []string{"true"}, Mounts: ms}, client.SubmitOptions{Wait: time.Minute})
		elapsed := time.Since(start)
		if err != nil || run.Outcome == nil || *run.Outcome != sandgate.OutcomeSucceeded {
			b.Fatalf("sandgate run with %d mounts: %+v, %v", len(ms), run, err)
		}
		return elapsed
	}
	viaDocker := func(ms []sandgate.Mount) time.Duration {
		args := dockerRunArgs(cfg.Defaults, dockerNode, defaultMaxConcurrent, uuid.Must(uuid.NewV7()).String(), "true")
		image := len(args) - 2 // the image, then the command
		var vols []string
		for _, m := range ms {
			vols = append(vols, "-v", m.Source+":"+m.Target+":ro")
		}
		args = slices.Concat(args[:image], vols, args[image:])
		start := time.Now()
		out, err := exec.Command("docker", args...).CombinedOutput()
		elapsed := time.Since(start)
		if err != nil {
			b.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return elapsed
	}
	kinds := []struct {
		name string
		run  func() time.Duration
		took []time.Duration
	}{
		{name: "sandgate-none", run: func() time.Duration { return viaSandgate(nil) }},
		{name: "sandgate-mounts", run: func() time.Duration { return viaSandgate(mounts) }},
		{name: "docker-none", run: func() time.Duration { return viaDocker(nil) }},
		{name: "docker-mounts", run: func() time.Duration { return viaDocker(mounts) }},
	}
	for _, k := range kinds {
		k.run() // warm up each path
	}
	b.ResetTimer()
	for r := range rounds {
		for i := range kinds {
			k := &kinds[(i+r)%len(kinds)]
			k.took = append(k.took, k.run())
		}
	}
	b.StopTimer()
	med := map[string]time.Duration{}
	for _, k := range kinds {
		med[k.name] = sandgatetest.Median(slices.Clone(k.took))
		b.ReportMetric(ms(med[k.name]), k.name+"-p50-ms")
	}
	perMount := func(side string) float64 {
		return ms(med[side+"-mounts"]-med[side+"-none"]) / float64(max(n, 1))
	}
	b.ReportMetric(float64(n), "mounts")
	b.ReportMetric(perMount("sandgate"), "sandgate-ms/mount")
	b.ReportMetric(perMount("docker"), "docker-ms/mount")
	b.Logf("%d mounts, %d rounds: sandgate %.0f ms with, %.0f ms without (%.1f ms a mount); docker run %.0f ms with, %.0f ms without (%.1f ms a mount); load %s",
		n, rounds, ms(med["sandgate-mounts"]), ms(med["sandgate-none"]), perMount("sandgate"),
		ms(med["docker-mounts"]), ms(med["docker-none"]), perMount("docker"), loadAverage())
	if c := countContainers(b, sandgate.LabelNode, dockerNode); c != 0 {
		b.Errorf("%d docker run containers left", c)
	}
}
