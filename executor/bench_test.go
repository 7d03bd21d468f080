package executor_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// benchRounds is how many runs of each side the comparison takes.
const benchRounds = 15

// BenchmarkExecutorVsDockerRun runs `true` through the executor and through
// `docker run --rm` with the same container settings on the same daemon,
// interleaved (alternating which goes first), and reports both medians and
// their ratio. The executor's figure is the whole of Execute: image
// resolution, create, attach, start, wait, inspect and removal, with every
// event emitted; the CLI's is the wall time of the process.
func BenchmarkExecutorVsDockerRun(b *testing.B) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		b.Fatalf("the docker CLI is needed for the comparison: %v", err)
	}
	ex, _ := newTestExecutor(b, nil)
	spec := func() sandgate.Job { return newJob(b, func(s *sandgate.RunSpec) { s.SessionID = "bench" }, "true") }
	// The flags containerSettings gives a default run.
	d := sandgate.BuiltinDefaults.Resources
	cliArgs := func(i int) []string {
		return []string{
			"run", "--rm",
			"--name", fmt.Sprintf("sandgate-bench-cli-%s-%d", ex.Node(), i),
			"--user", sandgate.BuiltinDefaults.User,
			"--cap-drop", "ALL",
			"--security-opt", "no-new-privileges",
			"--read-only",
			"--tmpfs", fmt.Sprintf("/tmp:rw,nosuid,nodev,size=%dm,mode=1777", d.TmpfsMB),
			"--pids-limit", fmt.Sprint(d.Pids),
			"--memory", fmt.Sprintf("%dm", d.MemoryMB), "--memory-swap", fmt.Sprintf("%dm", d.MemoryMB),
			"--cpus", fmt.Sprint(d.CPUs),
			"--ulimit", fmt.Sprintf("nofile=%d:%d", d.Nofile, d.Nofile),
			"--ulimit", fmt.Sprintf("nproc=%d:%d", d.Pids*4, d.Pids*4),
			"--network", "none",
			"--init",
			"--log-driver", "none",
			"--label", sandgate.LabelManaged + "=true", "--label", sandgate.LabelNode + "=" + ex.Node(),
			"--label", sandgate.LabelRunID + "=cli",
			images.SandboxImage, "true",
		}
	}
	runExecutor := func() time.Duration {
		start := time.Now()
		res, err := ex.Execute(context.Background(), spec())
		took := time.Since(start)
		if err != nil || res.Outcome != sandgate.OutcomeSucceeded {
			b.Fatalf("executor run: %+v, %v", res, err)
		}
		return took
	}
	runCLI := func(i int) time.Duration {
		start := time.Now()
		out, err := exec.Command(docker, cliArgs(i)...).CombinedOutput()
		took := time.Since(start)
		if err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
		return took
	}

	// Warm both paths (image cache, client connections, page cache).
	runExecutor()
	runCLI(-1)
	b.ResetTimer()
	var ours, theirs []time.Duration
	for i := range benchRounds {
		if i%2 == 0 {
			ours = append(ours, runExecutor())
			theirs = append(theirs, runCLI(i))
		} else {
			theirs = append(theirs, runCLI(i))
			ours = append(ours, runExecutor())
		}
	}
	b.StopTimer()
	mo, mt := sandgatetest.Median(ours), sandgatetest.Median(theirs)
	b.ReportMetric(float64(mo.Microseconds())/1000, "executor-ms")
	b.ReportMetric(float64(mt.Microseconds())/1000, "docker-run-ms")
	b.ReportMetric(float64(mo)/float64(mt), "ratio")
	b.Logf("executor: median %v of %v", mo, ours)
	b.Logf("docker run --rm: median %v of %v", mt, theirs)
}

// BenchmarkUsageSampling measures what reading a run's counters costs the
// run path: the same jobs through an executor that samples each
// container's cgroup and through one with sampling off
// (UsageInterval < 0), interleaved (alternating which goes first), on the
// same daemon. Two jobs: `true`, the whole of Execute for the shortest
// run (the sampler's start, first readings and stop are all on it); and a
// fixed amount of shell arithmetic (about a third of a second), whose
// wall time shows whether the readings slow the command itself. It
// reports the medians of both sides and their differences. With
// SANDGATE_BENCH_USAGE_AA=1 both sides sample nothing: the difference
// that remains is the benchmark's own noise.
func BenchmarkUsageSampling(b *testing.B) {
	interval := time.Duration(0)
	if os.Getenv("SANDGATE_BENCH_USAGE_AA") == "1" {
		interval = -1
	}
	on, _ := newTestExecutor(b, func(c *executor.Config) { c.UsageInterval = interval })
	off, _ := newTestExecutor(b, func(c *executor.Config) { c.UsageInterval = -1 })
	jobs := []struct {
		name string
		cmd  []string
	}{
		{"true", []string{"true"}},
		{"work", []string{"sh", "-c", "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done"}},
	}
	timed := func(ex *executor.Executor, cmd []string) (time.Duration, sandgate.Result) {
		job := newJob(b, func(s *sandgate.RunSpec) { s.SessionID = "bench"; s.Resources.CPUs = 1 }, cmd...)
		start := time.Now()
		res, err := ex.Execute(context.Background(), job)
		took := time.Since(start)
		if err != nil || res.Outcome != sandgate.OutcomeSucceeded {
			b.Fatalf("run: %+v, %v", res, err)
		}
		return took, res
	}
	for _, j := range jobs {
		timed(on, j.cmd) // warm both: image cache, connections, page cache
		timed(off, j.cmd)
	}
	b.ResetTimer()
	for _, j := range jobs {
		var withS, withoutS []time.Duration
		var sources []sandgate.UsageSource
		for i := range benchRounds {
			runOn := func() {
				d, res := timed(on, j.cmd)
				withS = append(withS, d)
				sources = append(sources, res.Usage.Source)
			}
			runOff := func() {
				d, _ := timed(off, j.cmd)
				withoutS = append(withoutS, d)
			}
			if i%2 == 0 {
				runOn()
				runOff()
			} else {
				runOff()
				runOn()
			}
		}
		mOn, mOff := sandgatetest.Median(withS), sandgatetest.Median(withoutS)
		b.ReportMetric(float64(mOn.Microseconds())/1000, j.name+"-sampled-ms")
		b.ReportMetric(float64(mOff.Microseconds())/1000, j.name+"-unsampled-ms")
		b.ReportMetric(float64(mOn-mOff)/float64(time.Millisecond), j.name+"-delta-ms")
		b.Logf("%s sampled: median %v of %v (sources %v)", j.name, mOn, withS, sources)
		b.Logf("%s unsampled: median %v of %v", j.name, mOff, withoutS)
	}
	b.StopTimer()
}
