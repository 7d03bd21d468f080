package executor_test

import (
	"context"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// newWarmExecutor is an executor with a warm pool of size for the given
// profiles (the builtin default spec when none), already full.
func newWarmExecutor(t *testing.T, size int, tune func(*executor.Config), profiles ...sandgate.Normalized) (*executor.Executor, *recorder) {
	t.Helper()
	ex, rec := newTestExecutor(t, func(c *executor.Config) {
		c.WarmPool = size
		c.WarmProfiles = profiles
		// Warm containers run the agent, as serve's do.
		c.AgentBinary = executortest.AgentBinary(t)
		if tune != nil {
			tune(c)
		}
	})
	waitIdle(t, ex, size*max(len(profiles), 1))
	return ex, rec
}

// waitIdle waits until the pool has n idle containers.
func waitIdle(t testing.TB, ex *executor.Executor, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for ex.WarmIdle() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool has %d idle containers after 2 minutes, want %d", ex.WarmIdle(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// profileOf is the builtin default spec adjusted by tune, as a profile.
func profileOf(t testing.TB, tune func(*sandgate.RunSpec)) sandgate.Normalized {
	t.Helper()
	spec := sandgate.RunSpec{Command: []string{"true"}}
	if tune != nil {
		tune(&spec)
	}
	n, err := sandgate.Normalize(spec, sandgate.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// warm reports whether the run was served from the pool, as its
// container.created event says.
func warm(rec *recorder, runID string) bool {
	for _, ev := range rec.of(runID) {
		if ev.Type == sandgate.EventContainerCreated {
			_, ok := ev.Payload["warm_pool"]
			return ok
		}
	}
	return false
}

// TestWarmRuns runs commands in warm containers and checks they come back
// exactly as from cold ones.
func TestWarmRuns(t *testing.T) {
	ex, rec := newWarmExecutor(t, 2, nil)
	tests := []struct {
		name    string
		tune    func(*sandgate.RunSpec)
		cmd     []string
		outcome sandgate.Outcome
		exit    int
		stdout  sandgate.Output
		stderr  sandgate.Output
		has     []string // instead of stdout, what it contains
	}{
		{
			name:    "echo gives stdout and exit 0",
			cmd:     []string{"echo", "hello"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "hello\n", Encoding: "utf-8", Bytes: 6},
			stderr:  sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:    "true gives nothing and exit 0",
			cmd:     []string{"true"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Encoding: "utf-8"},
			stderr:  sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:    "exit 3",
			cmd:     []string{"sh", "-c", "exit 3"},
			outcome: sandgate.OutcomeFailed,
			exit:    3,
			stdout:  sandgate.Output{Encoding: "utf-8"},
			stderr:  sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:    "exit 255",
			cmd:     []string{"sh", "-c", "exit 255"},
			outcome: sandgate.OutcomeFailed,
			exit:    255,
			stdout:  sandgate.Output{Encoding: "utf-8"},
			stderr:  sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:    "stderr is captured apart from stdout",
			cmd:     []string{"sh", "-c", "echo out; echo err >&2"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "out\n", Encoding: "utf-8", Bytes: 4},
			stderr:  sandgate.Output{Data: "err\n", Encoding: "utf-8", Bytes: 4},
		},
		{
			name:    "stdin is fed and closed",
			tune:    func(s *sandgate.RunSpec) { s.Stdin = "line one\nline two\n" },
			cmd:     []string{"wc", "-l"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "2\n", Encoding: "utf-8", Bytes: 2},
			stderr:  sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:    "no stdin reads end of file at once",
			cmd:     []string{"cat"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Encoding: "utf-8"},
			stderr:  sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:    "arguments are passed verbatim",
			cmd:     []string{"printf", `[%s]`, `it's`, "$HOME", "a\nb", "`id`", `\`, ""},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "[it's][$HOME][a\nb][`id`][\\][]", Encoding: "utf-8", Bytes: 29},
			stderr:  sandgate.Output{Encoding: "utf-8"},
		},
		{
			name: "environment values are passed verbatim",
			tune: func(s *sandgate.RunSpec) {
				s.Env = map[string]string{"A": "it's $(id) `x`", "B": "two\nlines", "PWD": "/mine"}
			},
			cmd:     []string{"env"},
			outcome: sandgate.OutcomeSucceeded,
			has:     []string{"\nA=it's $(id) `x`\n", "\nB=two\nlines\n", "\nPWD=/mine\n", "\nHOME=/workspace\n"},
			stderr:  sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:    "binary output comes back base64",
			cmd:     []string{"printf", `\377\376\000\001`},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "//4AAQ==", Encoding: "base64", Bytes: 4},
			stderr:  sandgate.Output{Encoding: "utf-8"},
		},
	}
	ignore := func(o sandgate.Output) sandgate.Output { o = encoded(o); o.SHA256 = ""; return o }
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			waitIdle(t, ex, 2)
			job := newJob(t, tc.tune, tc.cmd...)
			res := execute(t, ex, job)
			if !warm(rec, job.RunID) {
				t.Fatalf("the run was not served from the warm pool: %v", rec.of(job.RunID))
			}
			if res.Outcome != tc.outcome || exitCode(res) != tc.exit {
				t.Errorf("outcome %s exit %d, want %s %d (stderr %q)", res.Outcome, exitCode(res), tc.outcome, tc.exit, text(res.Stderr))
			}
			for _, want := range tc.has {
				if !strings.Contains("\n"+text(res.Stdout), want) {
					t.Errorf("stdout lacks %q:\n%s", want, text(res.Stdout))
				}
			}
			if diff := cmp.Diff(tc.stdout, ignore(res.Stdout)); tc.has == nil && diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.stderr, ignore(res.Stderr)); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWarmEnvironmentIsCold: the command in a warm container sees the
// environment, working directory, user and limits a cold one does.
func TestWarmEnvironmentIsCold(t *testing.T) {
	warmEx, warmRec := newWarmExecutor(t, 1, nil)
	coldEx, coldRec := newTestExecutor(t, nil)
	script := `env | grep -v '^HOSTNAME=' | sort; pwd; id; ulimit -n; ulimit -u; cat /proc/self/status | grep -E '^(Cap|NoNewPrivs|Seccomp)'; ls -l /proc/1/exe 2>&1 | sed 's/.*-> //'`
	tune := func(s *sandgate.RunSpec) { s.Env = map[string]string{"GREETING": "hi"} }
	warmJob := newJob(t, tune, "sh", "-c", script)
	coldJob := newJob(t, tune, "sh", "-c", script)
	w := execute(t, warmEx, warmJob)
	c := execute(t, coldEx, coldJob)
	if !warm(warmRec, warmJob.RunID) || warm(coldRec, coldJob.RunID) {
		t.Fatalf("want one warm and one cold run")
	}
	if w.Outcome != sandgate.OutcomeSucceeded || c.Outcome != sandgate.OutcomeSucceeded {
		t.Fatalf("outcomes %s / %s; stderr %q / %q", w.Outcome, c.Outcome, text(w.Stderr), text(c.Stderr))
	}
	if diff := cmp.Diff(text(c.Stdout), text(w.Stdout)); diff != "" {
		t.Errorf("what the command sees (-cold +warm):\n%s", diff)
	}
	if !strings.Contains(text(w.Stdout), "GREETING=hi\n") {
		t.Errorf("warm environment lacks the run's variable:\n%s", text(w.Stdout))
	}
}

// TestWarmHardening: a warm container is configured like the cold one of
// the same spec, but for its entrypoint, stdin and labels.
func TestWarmHardening(t *testing.T) {
	ex, _ := newWarmExecutor(t, 1, nil)
	cold, _ := newTestExecutor(t, nil)
	inspect := func(ex *executor.Executor, job sandgate.Job) container.InspectResponse {
		t.Helper()
		started := make(chan string, 1)
		job.Started = func(id string, _ time.Time) { started <- id }
		done := executeAsync(t, ex, job)
		id := await(t, started, done, "the start")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := docker(t).ContainerInspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := ex.Cancel(ctx, job.RunID); err != nil {
			t.Fatal(err)
		}
		<-done
		return c
	}
	w := inspect(ex, newJob(t, nil, "sleep", "60"))
	c := inspect(cold, newJob(t, nil, "sleep", "60"))
	// The one difference: the agent's binary, mounted read-only.
	if n := len(w.HostConfig.Mounts); n != 1 || !w.HostConfig.Mounts[0].ReadOnly || w.HostConfig.Mounts[0].Target != "/.sandgate/agent" {
		t.Errorf("warm mounts = %+v, want the agent's binary alone, read-only", w.HostConfig.Mounts)
	}
	w.HostConfig.Mounts = nil
	if diff := cmp.Diff(c.HostConfig, w.HostConfig); diff != "" {
		t.Errorf("host config (-cold +warm):\n%s", diff)
	}
	if w.Config.User != c.Config.User || w.Config.WorkingDir != c.Config.WorkingDir || w.Image != c.Image {
		t.Errorf("warm user %q workdir %q image %s, cold %q %q %s", w.Config.User, w.Config.WorkingDir, w.Image, c.Config.User, c.Config.WorkingDir, c.Image)
	}
	if w.Config.Labels[sandgate.LabelManaged] != "true" || w.Config.Labels[executor.LabelPool] == "" || w.Config.Labels[sandgate.LabelNode] != ex.Node() {
		t.Errorf("warm labels = %v", w.Config.Labels)
	}
}

// TestWarmOOM: a run that exhausts the memory of a warm container of a
// 32 MB profile is oom_killed, as on the cold path.
func TestWarmOOM(t *testing.T) {
	small := func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 32 }
	ex, rec := newWarmExecutor(t, 1, nil, profileOf(t, small))
	job := newJob(t, small, "sh", "-c", "head -c 200m /dev/zero | tail")
	res := execute(t, ex, job)
	if !warm(rec, job.RunID) {
		t.Fatalf("the run was not served from the warm pool")
	}
	if res.Outcome != sandgate.OutcomeOOMKilled || !res.OOMKilled || exitCode(res) != 137 {
		t.Errorf("outcome %s oom %v exit %d, want oom_killed, true, 137", res.Outcome, res.OOMKilled, exitCode(res))
	}
	if !slices.Contains(rec.typesOf(job.RunID), sandgate.EventContainerOOMKilled) {
		t.Errorf("events %v: no container.oom_killed", rec.typesOf(job.RunID))
	}
}

// TestWarmTimeoutAndCancel: timeout and cancel of warm runs keep the
// output so far and end timed_out and cancelled.
func TestWarmTimeoutAndCancel(t *testing.T) {
	ex, rec := newWarmExecutor(t, 2, nil)

	job := newJob(t, func(s *sandgate.RunSpec) { s.TimeoutSeconds = 1 }, "sh", "-c", "echo before; sleep 60; echo after")
	res := execute(t, ex, job)
	if !warm(rec, job.RunID) || res.Outcome != sandgate.OutcomeTimedOut || text(res.Stdout) != "before\n" {
		t.Errorf("warm %v outcome %s stdout %q, want a warm run timed_out with the output so far", warm(rec, job.RunID), res.Outcome, text(res.Stdout))
	}
	if !slices.Contains(rec.typesOf(job.RunID), sandgate.EventRunTimedOut) {
		t.Errorf("events %v: no run.timed_out", rec.typesOf(job.RunID))
	}

	started := make(chan struct{})
	var once sync.Once
	job = newJob(t, nil, "sh", "-c", "echo started; sleep 60")
	job.Output = func(s sandgate.Stream, p []byte) {
		if s == sandgate.Stdout && strings.Contains(string(p), "started") {
			once.Do(func() { close(started) })
		}
	}
	done := executeAsync(t, ex, job)
	await(t, started, done, "the first line")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ex.Cancel(ctx, job.RunID); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	res = <-done
	if !warm(rec, job.RunID) || res.Outcome != sandgate.OutcomeCancelled || text(res.Stdout) != "started\n" {
		t.Errorf("warm %v outcome %s stdout %q, want a warm run cancelled with the output so far", warm(rec, job.RunID), res.Outcome, text(res.Stdout))
	}
	if !slices.Contains(rec.typesOf(job.RunID), sandgate.EventRunCancelled) {
		t.Errorf("events %v: no run.cancelled", rec.typesOf(job.RunID))
	}
}

// TestWarmEventsMatchCold: a warm run emits the same lifecycle events, with
// the same identities, as a cold one.
func TestWarmEventsMatchCold(t *testing.T) {
	ex, rec := newWarmExecutor(t, 1, nil)
	cold, coldRec := newTestExecutor(t, nil)
	for _, cmd := range [][]string{{"sh", "-c", "echo hi; exit 4"}, {"true"}} {
		wj, cj := newJob(t, nil, cmd...), newJob(t, nil, cmd...)
		waitIdle(t, ex, 1)
		wr, cr := execute(t, ex, wj), execute(t, cold, cj)
		if !warm(rec, wj.RunID) {
			t.Fatalf("the run was not served from the warm pool")
		}
		if diff := cmp.Diff(coldRec.typesOf(cj.RunID), rec.typesOf(wj.RunID)); diff != "" {
			t.Errorf("%q: event types (-cold +warm):\n%s", cmd, diff)
		}
		if exitCode(wr) != exitCode(cr) || wr.Outcome != cr.Outcome || wr.Stdout.SHA256 != cr.Stdout.SHA256 {
			t.Errorf("%q: warm %s %d, cold %s %d", cmd, wr.Outcome, exitCode(wr), cr.Outcome, exitCode(cr))
		}
		for _, ev := range rec.of(wj.RunID) {
			if ev.CorrelationID != wj.CorrelationID || ev.DecisionID != wj.DecisionID || ev.Actor != "alice" || ev.Node != ex.Node() {
				t.Errorf("%s lacks identities: %+v", ev.Type, ev)
			}
			if ev.Type != sandgate.EventImageResolved && ev.ContainerID != wr.ContainerID {
				t.Errorf("%s container_id = %q, want %q", ev.Type, ev.ContainerID, wr.ContainerID)
			}
		}
	}
}

// TestWarmNeverReused: every run gets a container of its own, removed
// after it, and the pool refills behind the runs.
func TestWarmNeverReused(t *testing.T) {
	ex, rec := newWarmExecutor(t, 2, nil)
	seen := map[string]bool{}
	for i := range 6 {
		waitIdle(t, ex, 2) // refilled
		job := newJob(t, nil, "true")
		res := execute(t, ex, job)
		if !warm(rec, job.RunID) {
			t.Fatalf("run %d was not served from the warm pool", i)
		}
		if seen[res.ContainerID] {
			t.Fatalf("run %d reused container %s", i, res.ContainerID)
		}
		seen[res.ContainerID] = true
	}
	// Removed after each run answered: gone within a little while.
	for deadline := time.Now().Add(30 * time.Second); ; {
		left := 0
		for _, c := range managed(t, ex.Node()) {
			if seen[c.ID] {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d containers of finished runs are still there", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitIdle(t, ex, 2)
	if n := len(managed(t, ex.Node())); n != 2 {
		t.Errorf("%d containers of the node, want the 2 idle ones", n)
	}
}

// TestWarmColdFallback: runs the pool cannot serve take the cold path and
// leave the pool as it was.
func TestWarmColdFallback(t *testing.T) {
	ex, rec := newWarmExecutor(t, 1, nil)
	for _, tc := range []struct {
		name string
		tune func(*sandgate.RunSpec)
	}{
		{"other memory limit", func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 64 }},
		{"other working directory", func(s *sandgate.RunSpec) { s.Workdir = "/tmp" }},
		{"a cache volume", func(s *sandgate.RunSpec) {
			s.Volumes = []sandgate.Volume{{Name: "pooltest-" + sandgatetest.RandomHex(t, 4), Target: "/cache"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, tc.tune, "sh", "-c", "exit 5")
			res := execute(t, ex, job)
			if warm(rec, job.RunID) {
				t.Errorf("served from the pool")
			}
			if exitCode(res) != 5 {
				t.Errorf("exit %d, want 5", exitCode(res))
			}
			if ex.WarmIdle() != 1 {
				t.Errorf("%d idle, want the pool untouched", ex.WarmIdle())
			}
		})
	}
	// Empty pool: the next run goes cold too.
	var wg sync.WaitGroup
	jobs := []sandgate.Job{newJob(t, nil, "sleep", "1"), newJob(t, nil, "sleep", "1")}
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			execute(t, ex, j)
		}()
	}
	wg.Wait()
	if a, b := warm(rec, jobs[0].RunID), warm(rec, jobs[1].RunID); a == b {
		t.Errorf("warm = %v, %v; want one warm and one cold run from a pool of one", a, b)
	}
}

// TestWarmReaper: the reaper leaves the pool's containers alone, including
// one claimed by a running run, but reaps a pool container no pool owns.
func TestWarmReaper(t *testing.T) {
	ex, rec := newWarmExecutor(t, 2, func(c *executor.Config) { c.WarmPoolCheck = time.Hour })
	started := make(chan string, 1)
	job := newJob(t, nil, "sleep", "60")
	job.Started = func(id string, _ time.Time) { started <- id }
	done := executeAsync(t, ex, job)
	running := await(t, started, done, "the start")
	if !warm(rec, job.RunID) {
		t.Fatalf("the run was not served from the warm pool")
	}
	waitIdle(t, ex, 2)

	// A pool container a previous process of this node left behind.
	name := "sandgate-pool-" + ex.Node() + "-stale-" + sandgatetest.RandomHex(t, 4)
	out, err := exec.Command("docker", "create", "--name", name,
		"--label", sandgate.LabelManaged+"=true", "--label", sandgate.LabelNode+"="+ex.Node(),
		"--label", executor.LabelPool+"=stale", images.SandboxImage, "true").CombinedOutput()
	if err != nil {
		t.Fatalf("docker create: %v: %s", err, out)
	}
	stale := strings.TrimSpace(string(out))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	removed, err := ex.Reaper().CleanupOrphans(ctx)
	if err != nil {
		t.Fatalf("CleanupOrphans: %v", err)
	}
	var ids []string
	for _, s := range removed {
		ids = append(ids, s.ContainerID)
	}
	if diff := cmp.Diff([]string{stale}, ids); diff != "" {
		t.Errorf("reaped (-want +got):\n%s", diff)
	}
	if ex.WarmIdle() != 2 {
		t.Errorf("%d idle after the reaper, want 2", ex.WarmIdle())
	}
	boxes, err := ex.Reaper().Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var claimed []string
	for _, b := range boxes {
		if b.Node == ex.Node() && b.Orphan {
			t.Errorf("sandbox %s listed as an orphan", b.Name)
		}
		if b.ContainerID == running {
			claimed = append(claimed, b.RunID)
		}
	}
	if diff := cmp.Diff([]string{job.RunID}, claimed); diff != "" {
		t.Errorf("run of the claimed container (-want +got):\n%s", diff)
	}
	if err := ex.Cancel(ctx, job.RunID); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Outcome != sandgate.OutcomeCancelled {
		t.Errorf("outcome %s, want cancelled", res.Outcome)
	}
}

// TestWarmHealth: an idle warm container that dies is removed and
// replaced; one past its TTL is replaced too.
func TestWarmHealth(t *testing.T) {
	ex, _ := newWarmExecutor(t, 2, func(c *executor.Config) {
		c.WarmPoolTTL = 3 * time.Second
		c.WarmPoolCheck = 500 * time.Millisecond
	})
	ids := func() []string {
		var out []string
		for _, c := range managed(t, ex.Node()) {
			if c.State == "running" {
				out = append(out, c.ID)
			}
		}
		sort.Strings(out)
		return out
	}
	before := ids()
	if len(before) != 2 {
		t.Fatalf("%d running pool containers, want 2", len(before))
	}
	if out, err := exec.Command("docker", "kill", before[0]).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	// Killed: removed and replaced. Past the TTL: replaced, so in the end
	// none of the first two is left and two others run.
	deadline := time.Now().Add(time.Minute)
	for {
		now := ids()
		if len(now) == 2 && !slices.Contains(now, before[0]) && !slices.Contains(now, before[1]) && ex.WarmIdle() == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool containers %v, started with %v: not replaced", now, before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range managed(t, ex.Node()) {
		if c.ID == before[0] {
			t.Errorf("the killed container %s was not removed", c.ID)
		}
	}
}

// TestWarmShutdown: Shutdown removes the idle pool and a claimed container
// with its run, and stops refilling.
func TestWarmShutdown(t *testing.T) {
	ex, rec := newWarmExecutor(t, 3, nil)
	started := make(chan string, 1)
	job := newJob(t, nil, "sleep", "60")
	job.Started = func(id string, _ time.Time) { started <- id }
	done := executeAsync(t, ex, job)
	await(t, started, done, "the start")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ex.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if res := <-done; res.Outcome != sandgate.OutcomeCancelled {
		t.Errorf("outcome %s, want cancelled", res.Outcome)
	}
	if left := managed(t, ex.Node()); len(left) > 0 {
		t.Errorf("%d container(s) left after Shutdown", len(left))
	}
	if rec.count(sandgate.EventOrphanRemoved) != 0 {
		t.Errorf("pool containers removed as orphans: %d", rec.count(sandgate.EventOrphanRemoved))
	}
	time.Sleep(200 * time.Millisecond)
	if left := managed(t, ex.Node()); len(left) > 0 || ex.WarmIdle() != 0 {
		t.Errorf("the pool refilled after Shutdown: %d containers, %d idle", len(left), ex.WarmIdle())
	}
}

// TestWarmProfilesReplaced: replacing the pool's profiles (a policy reload
// that changed the defaults) removes the containers of the profile that
// went, fills the new one, serves runs of the new profile warm and those
// of the old one cold; a profile the pool cannot keep is refused and
// changes nothing.
func TestWarmProfilesReplaced(t *testing.T) {
	oldProfile := profileOf(t, nil)
	ex, rec := newWarmExecutor(t, 1, nil, oldProfile)
	before := managed(t, ex.Node())
	if len(before) != 1 {
		t.Fatalf("%d containers of the node, want the 1 idle one", len(before))
	}

	small := func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 256 }
	if err := ex.SetWarmProfiles([]sandgate.Normalized{profileOf(t, func(s *sandgate.RunSpec) {
		s.Volumes = []sandgate.Volume{{Name: "cache", Target: "/cache"}}
	})}); err == nil {
		t.Fatal("a profile with a volume was accepted")
	}
	if ex.WarmIdle() != 1 {
		t.Fatalf("%d idle after a refused change, want the pool untouched", ex.WarmIdle())
	}

	if err := ex.SetWarmProfiles([]sandgate.Normalized{profileOf(t, small)}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, ex, 1)
	deadline := time.Now().Add(time.Minute)
	for {
		now := managed(t, ex.Node())
		if len(now) == 1 && now[0].ID != before[0].ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containers of the node %v; want only a new one, %s removed", now, before[0].ID)
		}
		time.Sleep(50 * time.Millisecond)
	}

	job := newJob(t, small, "sh", "-c", "echo new")
	if res := execute(t, ex, job); !warm(rec, job.RunID) || text(res.Stdout) != "new\n" {
		t.Errorf("a run of the new profile: warm %v, stdout %q", warm(rec, job.RunID), text(res.Stdout))
	}
	waitIdle(t, ex, 1)
	job = newJob(t, nil, "true")
	if execute(t, ex, job); warm(rec, job.RunID) {
		t.Errorf("a run of the old profile was served warm")
	}

	// Setting the same profiles again keeps the idle container.
	idle := managed(t, ex.Node())
	if err := ex.SetWarmProfiles([]sandgate.Normalized{profileOf(t, small)}); err != nil {
		t.Fatal(err)
	}
	if now := managed(t, ex.Node()); len(now) != 1 || len(idle) != 1 || now[0].ID != idle[0].ID {
		t.Errorf("the same profiles again replaced the idle container: %v, then %v", idle, now)
	}
}
