package executor_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/executor/seccomp"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestRuns runs short commands in real containers and checks what came
// back.
func TestRuns(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	tests := []struct {
		name       string
		tune       func(*sandgate.RunSpec)
		cmd        []string
		outcome    sandgate.Outcome
		exit       int
		stdout     sandgate.Output // Data, Encoding, Bytes, Truncated compared
		stderr     *sandgate.Output
		oomKilled  bool
		stdoutHas  []string
		stdoutLack []string
	}{
		{
			name:    "echo gives stdout and exit 0",
			cmd:     []string{"echo", "hello"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "hello\n", Encoding: "utf-8", Bytes: 6},
			stderr:  &sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:    "exit 3",
			cmd:     []string{"sh", "-c", "exit 3"},
			outcome: sandgate.OutcomeFailed,
			exit:    3,
			stdout:  sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:    "stderr is captured apart from stdout",
			cmd:     []string{"sh", "-c", "echo out; echo err >&2; echo more err >&2"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "out\n", Encoding: "utf-8", Bytes: 4},
			stderr:  &sandgate.Output{Data: "err\nmore err\n", Encoding: "utf-8", Bytes: 13},
		},
		{
			name:    "stdin is fed and closed",
			tune:    func(s *sandgate.RunSpec) { s.Stdin = "line one\nline two\n" },
			cmd:     []string{"wc", "-l"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "2\n", Encoding: "utf-8", Bytes: 2},
		},
		{
			name: "32 MB memory and a 200 MB allocation is oom_killed",
			tune: func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 32 },
			// busybox has no allocator; tail keeps a line without a
			// newline in memory, so 200 MB of zeros grows it past the limit.
			cmd:       []string{"sh", "-c", "head -c 200m /dev/zero | tail"},
			outcome:   sandgate.OutcomeOOMKilled,
			oomKilled: true,
			exit:      137,
			stdout:    sandgate.Output{Encoding: "utf-8"},
		},
		{
			name:      "output cap truncates and counts every byte",
			tune:      func(s *sandgate.RunSpec) { s.OutputLimitBytes = 1000 },
			cmd:       []string{"sh", "-c", "yes | head -c 3000000"},
			outcome:   sandgate.OutcomeSucceeded,
			stdout:    sandgate.Output{Data: strings.Repeat("y\n", 500), Encoding: "utf-8", Bytes: 3000000, Truncated: true},
			stdoutHas: nil,
		},
		{
			name:    "binary output comes back base64",
			cmd:     []string{"printf", `\377\376\000\001`},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "//4AAQ==", Encoding: "base64", Bytes: 4},
		},
		{
			name:      "rootfs is read-only and /tmp is writable",
			cmd:       []string{"sh", "-c", "touch /rootfs-file 2>/dev/null; echo root=$?; echo ok > /tmp/f && cat /tmp/f"},
			outcome:   sandgate.OutcomeSucceeded,
			stdoutHas: []string{"root=1\n", "ok\n"},
			exit:      0,
			stdout:    sandgate.Output{Encoding: "utf-8", Bytes: -1},
		},
		{
			name:    "the user is not root",
			cmd:     []string{"id", "-u"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "10001\n", Encoding: "utf-8", Bytes: 6},
		},
		{
			name: "a pids limit of 50 stops a fork loop",
			tune: func(s *sandgate.RunSpec) { s.Resources.Pids = 50 },
			cmd: []string{"sh", "-c",
				"i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done; echo spawned=$i"},
			outcome:    sandgate.OutcomeFailed,
			exit:       -1, // any non-zero code: the shell dies on "can't fork"
			stdout:     sandgate.Output{Encoding: "utf-8", Bytes: -1},
			stdoutLack: []string{"spawned=200"},
		},
		{
			name:    "the only network interface is lo",
			cmd:     []string{"sh", "-c", "ls /sys/class/net"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "lo\n", Encoding: "utf-8", Bytes: 3},
		},
		{
			// The default bridge of the test's daemon must exist (a test
			// that deleted the host's docker0 once broke every such run).
			name:    "network bridge gives an interface besides lo",
			tune:    func(s *sandgate.RunSpec) { s.Network = "bridge" },
			cmd:     []string{"sh", "-c", "ls /sys/class/net"},
			outcome: sandgate.OutcomeSucceeded,
			stdout:  sandgate.Output{Data: "eth0\nlo\n", Encoding: "utf-8", Bytes: 8},
		},
		{
			name:      "seccomp filter and no-new-privileges are in force, no capabilities",
			cmd:       []string{"grep", "-E", "^(Seccomp|NoNewPrivs|CapEff):", "/proc/self/status"},
			outcome:   sandgate.OutcomeSucceeded,
			stdout:    sandgate.Output{Encoding: "utf-8", Bytes: -1},
			stdoutHas: []string{"NoNewPrivs:\t1\n", "Seccomp:\t2\n", "CapEff:\t0000000000000000\n"},
		},
		{
			// The init process reports it, with the shell's exit code.
			name:    "a command that does not exist",
			cmd:     []string{"no-such-command"},
			outcome: sandgate.OutcomeFailed,
			exit:    127,
			stdout:  sandgate.Output{Encoding: "utf-8"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, tc.tune, tc.cmd...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := ex.Execute(ctx, job)
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if res.Outcome != tc.outcome {
				t.Errorf("outcome = %s, want %s (exit %d, stderr %q)", res.Outcome, tc.outcome, exitCode(res), text(res.Stderr))
			}
			if tc.exit == -1 {
				if exitCode(res) <= 0 {
					t.Errorf("exit code = %d, want non-zero", exitCode(res))
				}
			} else if exitCode(res) != tc.exit {
				t.Errorf("exit code = %d, want %d", exitCode(res), tc.exit)
			}
			if res.OOMKilled != tc.oomKilled {
				t.Errorf("oom_killed = %t, want %t", res.OOMKilled, tc.oomKilled)
			}
			got := encoded(res.Stdout)
			got.SHA256 = ""
			want := tc.stdout
			if want.Bytes == -1 {
				want.Data, want.Bytes = got.Data, got.Bytes
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if tc.stderr != nil {
				gotErr := encoded(res.Stderr)
				gotErr.SHA256 = ""
				if diff := cmp.Diff(*tc.stderr, gotErr); diff != "" {
					t.Errorf("stderr (-want +got):\n%s", diff)
				}
			}
			for _, s := range tc.stdoutHas {
				if !strings.Contains(text(res.Stdout), s) {
					t.Errorf("stdout %q lacks %q", text(res.Stdout), s)
				}
			}
			for _, s := range tc.stdoutLack {
				if strings.Contains(text(res.Stdout), s) {
					t.Errorf("stdout %q has %q", text(res.Stdout), s)
				}
			}
			if res.ContainerID == "" || res.CreatedAt.IsZero() || res.FinishedAt.Before(res.CreatedAt) {
				t.Errorf("result lacks container or times: %+v", res)
			}
			types := rec.typesOf(job.RunID)
			if !slices.Contains(types, sandgate.EventContainerRemoved) {
				t.Errorf("events %v: no container.removed", types)
			}
		})
	}
}

// TestRunEvents checks the lifecycle events of one run and what each
// carries.
func TestRunEvents(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	job := newJob(t, nil, "sh", "-c", "echo hi; exit 4")
	res := execute(t, ex, job)
	want := []sandgate.EventType{
		sandgate.EventImageResolved, sandgate.EventContainerCreated, sandgate.EventContainerStarted,
		sandgate.EventContainerExited, sandgate.EventContainerRemoved,
	}
	if diff := cmp.Diff(want, rec.typesOf(job.RunID)); diff != "" {
		t.Fatalf("event types (-want +got):\n%s", diff)
	}
	for _, ev := range rec.of(job.RunID) {
		if ev.CorrelationID != job.CorrelationID || ev.DecisionID != job.DecisionID || ev.Actor != "alice" ||
			ev.Team != "payments" || ev.Node != ex.Node() || ev.Time.IsZero() {
			t.Errorf("%s lacks identities: %+v", ev.Type, ev)
		}
		if ev.Type != sandgate.EventImageResolved && ev.ContainerID != res.ContainerID {
			t.Errorf("%s container_id = %q, want %q", ev.Type, ev.ContainerID, res.ContainerID)
		}
		if ev.Type == sandgate.EventContainerExited {
			if ev.ExitCode == nil || *ev.ExitCode != 4 || ev.Outcome != string(sandgate.OutcomeFailed) {
				t.Errorf("container.exited = %+v, want exit 4, outcome failed", ev)
			}
			if ev.Payload["stdout_bytes"] != int64(3) || ev.Payload["stdout_sha256"] != res.Stdout.SHA256 {
				t.Errorf("container.exited payload = %v, want stdout sizes and digest", ev.Payload)
			}
			for k, v := range ev.Payload {
				if s, ok := v.(string); ok && strings.Contains(s, "hi\n") {
					t.Errorf("payload %s carries output data", k)
				}
			}
		}
	}
}

// TestTimeout: a 2 s timeout on sleep 60 ends timed_out with the output
// written before it.
func TestTimeout(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	job := newJob(t, func(s *sandgate.RunSpec) { s.TimeoutSeconds = 2 }, "sh", "-c", "echo before; sleep 60; echo after")
	start := time.Now()
	res := execute(t, ex, job)
	t.Logf("timed out run took %v", time.Since(start))
	if res.Outcome != sandgate.OutcomeTimedOut {
		t.Errorf("outcome = %s, want timed_out", res.Outcome)
	}
	if text(res.Stdout) != "before\n" {
		t.Errorf("stdout = %q, want the output so far", text(res.Stdout))
	}
	if !slices.Contains(rec.typesOf(job.RunID), sandgate.EventRunTimedOut) {
		t.Errorf("events %v: no run.timed_out", rec.typesOf(job.RunID))
	}
}

// TestCancel cancels a running run: outcome cancelled, output so far kept,
// container gone.
func TestCancel(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	started := make(chan struct{})
	var once sync.Once
	job := newJob(t, nil, "sh", "-c", "echo started; sleep 60")
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
	res := <-done
	if res.Outcome != sandgate.OutcomeCancelled || text(res.Stdout) != "started\n" {
		t.Errorf("result = %s %q, want cancelled with the output so far", res.Outcome, text(res.Stdout))
	}
	if !slices.Contains(rec.typesOf(job.RunID), sandgate.EventRunCancelled) {
		t.Errorf("events %v: no run.cancelled", rec.typesOf(job.RunID))
	}
	if err := ex.Cancel(ctx, job.RunID); sandgate.ErrorCodeOf(err) != sandgate.CodeNotFound {
		t.Errorf("Cancel of a finished run = %v, want NOT-FOUND", err)
	}
	if left := managed(t, ex.Node()); len(left) != 0 {
		t.Errorf("%d container(s) left after cancel", len(left))
	}
}

// TestImageUnavailable: a missing image with pull policy never, or
// air-gapped, is SBX-002 and never a pull.
func TestImageUnavailable(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	for _, tc := range []struct {
		name      string
		policy    sandgate.PullPolicy
		airGapped bool
	}{
		{"pull never", sandgate.PullNever, false},
		{"air-gapped overrides if-not-present", sandgate.PullIfNotPresent, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, func(s *sandgate.RunSpec) {
				s.Image = "sandgate/no-such-image:" + sandgatetest.RandomHex(t, 4)
				s.PullPolicy = tc.policy
			}, "true")
			job.AirGapped = tc.airGapped
			res, err := ex.Execute(context.Background(), job)
			if sandgate.ErrorCodeOf(err) != sandgate.CodeImageUnavailable || res.Outcome != sandgate.OutcomeError ||
				res.Error == nil || res.Error.Code != sandgate.CodeImageUnavailable {
				t.Fatalf("Execute = %+v, %v; want SBX-002", res, err)
			}
			want := []sandgate.EventType{sandgate.EventImageUnavailable, sandgate.EventRunFailed}
			if diff := cmp.Diff(want, rec.typesOf(job.RunID)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHardeningInspect looks at a running container with docker inspect:
// every hardening setting is there, with a bind mount and a cache volume.
func TestHardeningInspect(t *testing.T) {
	instance := "itest-" + sandgatetest.RandomHex(t, 6)
	ex, _ := volumeExecutor(t, func(c *executor.Config) { c.Instance = instance })
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "input.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	volume := "itest-" + sandgatetest.RandomHex(t, 4)
	started := make(chan string, 1)
	job := newJob(t, func(s *sandgate.RunSpec) {
		s.Mounts = []sandgate.Mount{{Source: dir, Target: "/workspace/in", ReadOnly: true}}
		s.Volumes = []sandgate.Volume{{Name: volume, Target: "/cache"}}
		s.CapAdd = []string{"net_bind_service"}
		s.Resources = sandgate.Resources{MemoryMB: 64, CPUs: 0.5, Pids: 64, TmpfsMB: 16, Nofile: 256}
		s.Env = map[string]string{"GREETING": "hi"}
	}, "sh", "-c", "cat /workspace/in/input.txt; echo $GREETING; sleep 60")
	job.Started = func(id string, _ time.Time) { started <- id }
	printed := make(chan struct{})
	var seen strings.Builder
	var once sync.Once
	job.Output = func(s sandgate.Stream, p []byte) {
		seen.Write(p)
		if strings.HasSuffix(seen.String(), "hi\n") {
			once.Do(func() { close(printed) })
		}
	}
	done := executeAsync(t, ex, job)
	id := await(t, started, done, "the start")
	await(t, printed, done, "the output")
	c, err := docker(t).ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ex.Cancel(ctx, job.RunID); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	res := <-done
	if text(res.Stdout) != "from the host\nhi\n" {
		t.Errorf("stdout = %q", text(res.Stdout))
	}

	hc := c.HostConfig
	pids, nproc := int64(64), int64(64*4)
	type hardening struct {
		User, NetworkMode, Tmpfs, Name      string
		Privileged, ReadonlyRootfs, Init    bool
		CapDrop, CapAdd, SecurityOpt        []string
		Memory, MemorySwap, NanoCPUs        int64
		PidsLimit                           *int64
		Ulimits                             []container.Ulimit
		Labels                              map[string]string
		LogType                             string
		Mounts                              []mount.Mount
		AutoRemove, PublishAll, OomDisabled bool
	}
	var ulimits []container.Ulimit
	for _, u := range hc.Ulimits {
		ulimits = append(ulimits, *u)
	}
	got := hardening{
		User: c.Config.User, NetworkMode: string(hc.NetworkMode), Tmpfs: hc.Tmpfs["/tmp"], Name: c.Name,
		Privileged: hc.Privileged, ReadonlyRootfs: hc.ReadonlyRootfs, Init: hc.Init != nil && *hc.Init,
		CapDrop: hc.CapDrop, CapAdd: hc.CapAdd, SecurityOpt: hc.SecurityOpt,
		Memory: hc.Memory, MemorySwap: hc.MemorySwap, NanoCPUs: hc.NanoCPUs, PidsLimit: hc.PidsLimit,
		Ulimits: ulimits, Labels: sandgateLabels(c.Config.Labels), LogType: hc.LogConfig.Type, Mounts: hc.Mounts,
		OomDisabled: hc.OomKillDisable != nil && *hc.OomKillDisable,
	}
	profile, err := seccomp.SecurityOpt()
	if err != nil {
		t.Fatal(err)
	}
	want := hardening{
		User: "10001:10001", NetworkMode: "none", Tmpfs: "rw,nosuid,nodev,size=16m,mode=1777",
		Name:       "/sandgate-s-test-TestHardeningInspect-" + job.RunID[len(job.RunID)-12:],
		Privileged: false, ReadonlyRootfs: true, Init: true,
		CapDrop: []string{"ALL"}, CapAdd: []string{"CAP_NET_BIND_SERVICE"}, SecurityOpt: []string{"no-new-privileges", profile},
		Memory: 64 << 20, MemorySwap: 64 << 20, NanoCPUs: 5e8, PidsLimit: &pids,
		Ulimits: []container.Ulimit{{Name: "nofile", Soft: 256, Hard: 256}, {Name: "nproc", Soft: nproc, Hard: nproc}},
		Labels: map[string]string{
			sandgate.LabelManaged: "true", sandgate.LabelRunID: job.RunID, sandgate.LabelSession: "s-test",
			sandgate.LabelTask: "TestHardeningInspect", sandgate.LabelCorrelationID: job.CorrelationID,
			sandgate.LabelNode: ex.Node(), executor.LabelInstance: instance,
		},
		LogType: "none",
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: filepath.Join(executor.DefaultStageDir, ex.Node(), job.RunID, "0"), Target: "/workspace/in", ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
			{Type: mount.TypeVolume, Source: executor.VolumePrefix + "payments." + volume, Target: "/cache", VolumeOptions: &mount.VolumeOptions{Labels: map[string]string{"sandgate.cache": "true"}}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hardening (-want +got):\n%s", diff)
	}
	for _, m := range c.Mounts {
		if m.Type == mount.TypeBind && m.Propagation != mount.PropagationRPrivate {
			t.Errorf("bind mount %s propagation = %q, want rprivate", m.Destination, m.Propagation)
		}
	}
	info, err := docker(t).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(info.SecurityOptions, func(s string) bool { return strings.Contains(s, "name=seccomp,profile=default") }) {
		t.Errorf("daemon security options %v: the default seccomp profile is not in force", info.SecurityOptions)
	}
}

// TestConcurrentRuns: 16 runs at once come back with their exact exit
// codes and leave no container.
func TestConcurrentRuns(t *testing.T) {
	ex, _ := newTestExecutor(t, func(c *executor.Config) { c.MaxConcurrent = 16 })
	const n = 16
	var wg sync.WaitGroup
	got := make([]int, n)
	outcomes := make([]sandgate.Outcome, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := ex.Execute(context.Background(), newJob(t, nil, "sh", "-c", fmt.Sprintf("exit %d", i)))
			if err != nil {
				t.Errorf("run %d: %v", i, err)
			}
			got[i], outcomes[i] = exitCode(res), res.Outcome
		}()
	}
	wg.Wait()
	for i := range n {
		want := sandgate.OutcomeFailed
		if i == 0 {
			want = sandgate.OutcomeSucceeded
		}
		if got[i] != i || outcomes[i] != want {
			t.Errorf("run %d: exit %d outcome %s, want exit %d outcome %s", i, got[i], outcomes[i], i, want)
		}
	}
	if left := managed(t, ex.Node()); len(left) != 0 {
		t.Errorf("%d container(s) left", len(left))
	}
}

// TestQueueBeyondLimit: with one slot, runs queue and all finish; one
// cancelled while queued never gets a container.
func TestQueueBeyondLimit(t *testing.T) {
	ex, rec := newTestExecutor(t, func(c *executor.Config) { c.MaxConcurrent = 1 })
	started := make(chan struct{})
	first := newJob(t, nil, "sh", "-c", "sleep 1; echo first")
	first.Started = func(string, time.Time) { close(started) }
	queued := newJob(t, nil, "echo", "never")
	firstDone := executeAsync(t, ex, first)
	await(t, started, firstDone, "the first run's start")
	queuedDone := make(chan sandgate.Result, 1)
	go func() {
		res, _ := ex.Execute(context.Background(), queued)
		queuedDone <- res
	}()
	waitState(t, ex, queued.RunID, sandgate.StatePending)
	if err := ex.Cancel(context.Background(), queued.RunID); err != nil {
		t.Fatalf("Cancel of the queued run: %v", err)
	}
	var outcomes []string
	for _, ch := range []<-chan sandgate.Result{firstDone, queuedDone} {
		r := <-ch
		outcomes = append(outcomes, string(r.Outcome)+":"+text(r.Stdout))
	}
	sort.Strings(outcomes)
	if diff := cmp.Diff([]string{"cancelled:", "succeeded:first\n"}, outcomes); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]sandgate.EventType{sandgate.EventRunCancelled}, rec.typesOf(queued.RunID)); diff != "" {
		t.Errorf("queued run events (-want +got):\n%s", diff)
	}
}

var initTrue = true

// TestReaper: ten containers labelled for this node that no live run owns
// are removed by the reaper pass at Start, and reported.
func TestReaper(t *testing.T) {
	executortestNode := "test-" + sandgatetest.RandomHex(t, 6)
	ctx := context.Background()
	d := docker(t)
	var ids []string
	for i := range 10 {
		resp, err := d.ContainerCreate(ctx, &container.Config{
			Image: images.SandboxImage,
			Cmd:   []string{"sleep", "300"},
			Labels: map[string]string{
				sandgate.LabelManaged: "true", sandgate.LabelNode: executortestNode,
				sandgate.LabelRunID: fmt.Sprintf("orphan-%d", i),
			},
		}, &container.HostConfig{NetworkMode: "none", Init: &initTrue}, nil, nil, "")
		if err != nil {
			t.Fatalf("create orphan: %v", err)
		}
		ids = append(ids, resp.ID)
		if i%2 == 0 { // half of them running
			if err := d.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
				t.Fatalf("start orphan: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		for _, id := range ids {
			d.ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true})
		}
	})
	start := time.Now()
	ex, rec := newTestExecutor(t, func(c *executor.Config) { c.Node = executortestNode })
	elapsed := time.Since(start)
	// The time is reported, not asserted: on a loaded machine it says more
	// about the load than about the reaper (goal: under 5 s when quiet).
	t.Logf("reaper removed 10 orphans (5 running) in %v", elapsed)
	if n := rec.count(sandgate.EventOrphanRemoved); n != 10 {
		t.Errorf("orphan.removed events = %d, want 10", n)
	}
	if left := managed(t, ex.Node()); len(left) != 0 {
		t.Errorf("%d orphan(s) left", len(left))
	}
	boxes, err := ex.Reaper().Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range boxes {
		if b.Node == ex.Node() {
			t.Errorf("sandbox %s still listed", b.Name)
		}
	}
}

// sandgateLabels drops the labels the image brings.
func sandgateLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if strings.HasPrefix(k, "sandgate.") {
			out[k] = v
		}
	}
	return out
}

// TestStartFailure: a container that cannot start (its user does not
// exist in the image) is SBX-001 before it starts, and is removed.
func TestStartFailure(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	job := newJob(t, func(s *sandgate.RunSpec) { s.User = "nosuchuser" }, "true")
	res, err := ex.Execute(context.Background(), job)
	if sandgate.ErrorCodeOf(err) != sandgate.CodeContainerCreate || res.Outcome != sandgate.OutcomeError ||
		res.Error == nil || !strings.Contains(res.Error.Message, "not in the image's /etc/passwd") {
		t.Fatalf("Execute = %+v, %v; want SBX-001, no such user", res, err)
	}
	want := []sandgate.EventType{sandgate.EventImageResolved, sandgate.EventContainerCreated, sandgate.EventRunFailed, sandgate.EventContainerRemoved}
	if diff := cmp.Diff(want, rec.typesOf(job.RunID)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestContainerRemovedByHandIsLost: a container that vanishes under a
// running run makes it lost, with run.lost in the trail.
func TestContainerRemovedByHandIsLost(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	started := make(chan string, 1)
	job := newJob(t, nil, "sleep", "60")
	job.Started = func(id string, _ time.Time) { started <- id }
	done := executeAsync(t, ex, job)
	id := await(t, started, done, "the start")
	if err := docker(t).ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatalf("remove by hand: %v", err)
	}
	res := <-done
	if res.Outcome != sandgate.OutcomeLost || res.Error == nil {
		t.Errorf("result = %s %+v, want lost with an error", res.Outcome, res.Error)
	}
	if !slices.Contains(rec.typesOf(job.RunID), sandgate.EventRunLost) {
		t.Errorf("events %v: no run.lost", rec.typesOf(job.RunID))
	}
}

// TestLoadImage loads a `docker save` tarball and runs from the loaded
// image.
func TestLoadImage(t *testing.T) {
	ex, _ := newTestExecutor(t, nil)
	ctx := context.Background()
	d := docker(t)
	ref := "sandgate/load-test:" + sandgatetest.RandomHex(t, 4)
	if err := d.ImageTag(ctx, images.SandboxImage, ref); err != nil {
		t.Fatal(err)
	}
	save, err := d.ImageSave(ctx, []string{ref})
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(save)
	save.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.ImageRemove(ctx, ref, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.ImageRemove(context.Background(), ref, image.RemoveOptions{}) })
	loaded, err := newTestImages(t).LoadImage(ctx, bytes.NewReader(tarball))
	if err != nil {
		t.Fatalf("LoadImage: %v", err)
	}
	if diff := cmp.Diff([]string{ref}, loaded); diff != "" {
		t.Errorf("loaded (-want +got):\n%s", diff)
	}
	res := execute(t, ex, newJob(t, func(s *sandgate.RunSpec) { s.Image = ref }, "echo", "loaded"))
	if res.Outcome != sandgate.OutcomeSucceeded || text(res.Stdout) != "loaded\n" {
		t.Errorf("run from the loaded image: %s %q", res.Outcome, text(res.Stdout))
	}
	if _, err := newTestImages(t).LoadImage(ctx, strings.NewReader("not a tarball")); sandgate.ErrorCodeOf(err) != sandgate.CodeImageUnavailable {
		t.Errorf("LoadImage(garbage) = %v, want SBX-002", err)
	}
}

// TestSIGKILLAfterGrace: a run that ignores SIGTERM is killed once the
// grace period is over.
func TestSIGKILLAfterGrace(t *testing.T) {
	ex, rec := newTestExecutor(t, func(c *executor.Config) { c.StopGrace = time.Second })
	job := newJob(t, func(s *sandgate.RunSpec) { s.TimeoutSeconds = 1 },
		"sh", "-c", `trap "echo got TERM" TERM; echo ready; while true; do sleep 1; done`)
	res := execute(t, ex, job)
	if res.Outcome != sandgate.OutcomeTimedOut || exitCode(res) != 137 {
		t.Errorf("result = %s exit %d, want timed_out exit 137 (SIGKILL)", res.Outcome, exitCode(res))
	}
	if !strings.HasPrefix(text(res.Stdout), "ready\n") {
		t.Errorf("stdout = %q, want the output so far", text(res.Stdout))
	}
	retries := 0
	for _, ev := range rec.of(job.RunID) {
		if ev.Type == sandgate.EventExecutorRetry {
			retries++
		}
	}
	if retries != 0 {
		t.Errorf("%d retries while stopping", retries)
	}
}
