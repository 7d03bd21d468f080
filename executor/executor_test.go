package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/sethvargo/go-retry"

	"github.com/sandgate/sandgate"
)

type eventLog struct {
	mu     sync.Mutex
	events []sandgate.Event
}

func (l *eventLog) Emit(ev sandgate.Event) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}

func (l *eventLog) types() []sandgate.EventType {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sandgate.EventType
	for _, ev := range l.events {
		out = append(out, ev.Type)
	}
	return out
}

func (l *eventLog) count(t sandgate.EventType) int {
	n := 0
	for _, got := range l.types() {
		if got == t {
			n++
		}
	}
	return n
}

const unitRetries = 3

// unitExecutor is an executor on a fake daemon with a 1ns backoff.
func unitExecutor(t *testing.T, f *fakeDocker, tune func(*Config)) (*Executor, *eventLog) {
	t.Helper()
	cfg := Config{
		Node:          "unit",
		MaxRetries:    unitRetries,
		Backoff:       func() retry.Backoff { return retry.NewConstant(time.Nanosecond) },
		CallTimeout:   5 * time.Second,
		StopGrace:     time.Second,
		ImageCacheTTL: -1,
	}
	if tune != nil {
		tune(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := &eventLog{}
	return newExecutor(cfg, log, f), log
}

func unitJob(t *testing.T, tune func(*sandgate.RunSpec)) sandgate.Job {
	t.Helper()
	spec := sandgate.RunSpec{Command: []string{"echo", "hello"}, SessionID: "s-1", TaskID: "t-42"}
	if tune != nil {
		tune(&spec)
	}
	n, err := sandgate.Normalize(spec, sandgate.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	return sandgate.Job{RunID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", CorrelationID: "corr-1", DecisionID: "dec-1", Principal: "alice", Team: "payments", Spec: n}
}

func runUnit(t *testing.T, e *Executor, job sandgate.Job) (sandgate.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.Execute(ctx, job)
}

// TestTransientErrorRetried: a create that fails transiently, without
// having happened, is tried again and the run succeeds.
func TestTransientErrorRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"503 unavailable", errUnavailable("daemon is restarting")},
		{"500 internal", errInternal("transient failure")},
		{"connection refused", &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDocker()
			f.onCreate = func(_ context.Context, n int) (bool, error) {
				if n == 1 {
					return false, tc.err
				}
				return true, nil
			}
			e, log := unitExecutor(t, f, nil)
			res, err := runUnit(t, e, unitJob(t, nil))
			if err != nil || res.Outcome != sandgate.OutcomeSucceeded || text(res.Stdout) != "hello\n" {
				t.Fatalf("Execute = %+v, %v; want succeeded with the output", res, err)
			}
			if got := f.count("create"); got != 2 {
				t.Errorf("create calls = %d, want 2", got)
			}
			if got := log.count(sandgate.EventExecutorRetry); got != 1 {
				t.Errorf("executor.retry events = %d, want 1", got)
			}
			if len(f.containers) != 0 {
				t.Errorf("%d container(s) left", len(f.containers))
			}
		})
	}
}

// TestCreateThatHappenedIsAdopted: a create that failed (timed out, or a
// 5xx) after the daemon had made the container is found by name and
// adopted: one container, one create, user code started once.
func TestCreateThatHappenedIsAdopted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create func(ctx context.Context) error
	}{
		{"timed out", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{"503 after the fact", func(context.Context) error { return errUnavailable("connection reset mid-response") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDocker()
			f.onCreate = func(ctx context.Context, n int) (bool, error) {
				if n == 1 {
					return true, tc.create(ctx)
				}
				return true, nil
			}
			e, log := unitExecutor(t, f, func(c *Config) { c.CallTimeout = 50 * time.Millisecond })
			res, err := runUnit(t, e, unitJob(t, nil))
			if err != nil || res.Outcome != sandgate.OutcomeSucceeded {
				t.Fatalf("Execute = %+v, %v; want succeeded", res, err)
			}
			if got := f.count("create"); got != 1 {
				t.Errorf("create calls = %d, want 1: the container was adopted, not created again", got)
			}
			if f.nextID != 1 {
				t.Errorf("containers made = %d, want 1", f.nextID)
			}
			if res.ContainerID != fmt.Sprintf("%064d", 1) {
				t.Errorf("container = %s, want the adopted one", res.ContainerID)
			}
			if got := log.count(sandgate.EventContainerCreated); got != 1 {
				t.Errorf("container.created events = %d, want 1", got)
			}
		})
	}
}

// TestStartThatHappenedIsNotRepeated: user code is never run twice, even
// when the start call failed after it took effect.
func TestStartThatHappenedIsNotRepeated(t *testing.T) {
	f := newFakeDocker()
	var c *fakeContainer
	f.onStart = func(n int) (bool, error) {
		f.mu.Lock()
		for _, fc := range f.containers {
			c = fc
		}
		f.mu.Unlock()
		return true, errUnavailable("connection reset after start")
	}
	e, _ := unitExecutor(t, f, nil)
	res, err := runUnit(t, e, unitJob(t, nil))
	if err != nil || res.Outcome != sandgate.OutcomeSucceeded {
		t.Fatalf("Execute = %+v, %v; want succeeded", res, err)
	}
	if got := f.count("start"); got != 1 {
		t.Errorf("start calls = %d, want 1", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c == nil || c.started != 1 {
		t.Fatalf("user code started %+v, want once", c)
	}
}

// TestPermanentErrorsNotRetried: what the daemon refused on the merits is
// asked once, and classified.
func TestPermanentErrorsNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(f *fakeDocker)
		op       string
		wantCode sandgate.ErrorCode
	}{
		{
			name:     "image not found",
			setup:    func(f *fakeDocker) { f.onImageInspect = func(int) error { return errNotFound("no such image") } },
			op:       "image inspect",
			wantCode: sandgate.CodeImageUnavailable,
		},
		{
			name: "create: network not found",
			setup: func(f *fakeDocker) {
				f.onCreate = func(context.Context, int) (bool, error) { return false, errNotFound("network x not found") }
			},
			op:       "create",
			wantCode: sandgate.CodeContainerCreate,
		},
		{
			name: "create: invalid parameter",
			setup: func(f *fakeDocker) {
				f.onCreate = func(context.Context, int) (bool, error) { return false, errInvalid("invalid sysctl") }
			},
			op:       "create",
			wantCode: sandgate.CodeContainerCreate,
		},
		{
			name: "create: name taken by another run",
			setup: func(f *fakeDocker) {
				f.onCreate = func(context.Context, int) (bool, error) { return false, errConflict("name in use") }
				f.containers["other"] = &fakeContainer{id: "other", name: "sandgate-s-1-t-42-0c1d2e3f4a5b", labels: map[string]string{sandgate.LabelRunID: "another"}}
			},
			op:       "create",
			wantCode: sandgate.CodeContainerCreate,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDocker()
			tc.setup(f)
			e, log := unitExecutor(t, f, nil)
			res, err := runUnit(t, e, unitJob(t, nil))
			if got := sandgate.ErrorCodeOf(err); got != tc.wantCode {
				t.Fatalf("error = %v, want code %s", err, tc.wantCode)
			}
			if res.Outcome != sandgate.OutcomeError || res.Error == nil || res.Error.Code != tc.wantCode {
				t.Errorf("result = %+v, want outcome error with %s", res, tc.wantCode)
			}
			if got := f.count(tc.op); got != 1 {
				t.Errorf("%s calls = %d, want 1", tc.op, got)
			}
			if got := log.count(sandgate.EventExecutorRetry); got != 0 {
				t.Errorf("executor.retry events = %d, want 0", got)
			}
			if got := f.count("image pull"); got != 0 {
				t.Errorf("image pulls = %d, want 0", got)
			}
		})
	}
}

// TestRetryCapHolds: a daemon that keeps failing is tried MaxRetries+1
// times, and the run ends DOCKER-UNAVAILABLE.
func TestRetryCapHolds(t *testing.T) {
	f := newFakeDocker()
	f.onCreate = func(context.Context, int) (bool, error) { return false, errUnavailable("daemon down") }
	f.onPing = func(int) error { return errUnavailable("daemon down") }
	e, log := unitExecutor(t, f, nil)
	res, err := runUnit(t, e, unitJob(t, nil))
	if got := sandgate.ErrorCodeOf(err); got != sandgate.CodeDockerUnavailable {
		t.Fatalf("error = %v, want DOCKER-UNAVAILABLE", err)
	}
	if res.Error == nil || res.Error.Code != sandgate.CodeDockerUnavailable {
		t.Errorf("result error = %+v", res.Error)
	}
	if got := f.count("create"); got != unitRetries+1 {
		t.Errorf("create calls = %d, want %d", got, unitRetries+1)
	}
	if got := log.count(sandgate.EventExecutorRetry); got != unitRetries {
		t.Errorf("executor.retry events = %d, want %d", got, unitRetries)
	}
	if err := e.Ping(context.Background()); sandgate.ErrorCodeOf(err) != sandgate.CodeDockerUnavailable {
		t.Errorf("Ping = %v, want DOCKER-UNAVAILABLE", err)
	}
	if got := f.count("ping"); got != unitRetries+1 {
		t.Errorf("ping calls = %d, want %d", got, unitRetries+1)
	}
}

// TestRetryBoundByContext: retries stop when the caller's context ends,
// whatever the backoff still allows.
func TestRetryBoundByContext(t *testing.T) {
	f := newFakeDocker()
	ctx, cancel := context.WithCancel(context.Background())
	f.onPing = func(n int) error {
		if n == 2 {
			cancel()
		}
		return errUnavailable("daemon down")
	}
	e, _ := unitExecutor(t, f, func(c *Config) { c.MaxRetries = 1000 })
	if err := e.Ping(ctx); err == nil {
		t.Fatal("Ping succeeded")
	}
	if got := f.count("ping"); got != 2 {
		t.Errorf("ping calls = %d, want 2", got)
	}
}

// TestPullPolicy: a missing image is pulled only when the policy allows it,
// the job is not air-gapped, and the image's registry is one the decision
// names: a short name is Docker Hub's, which no default names.
func TestPullPolicy(t *testing.T) {
	for _, tc := range []struct {
		name       string
		image      string
		policy     sandgate.PullPolicy
		airGapped  bool
		registries []string
		wantPulls  int
		wantCode   sandgate.ErrorCode
	}{
		{"never", "", sandgate.PullNever, false, []string{"docker.io"}, 0, sandgate.CodeImageUnavailable},
		{"if-not-present", "", sandgate.PullIfNotPresent, false, []string{"docker.io"}, 1, ""},
		{"if-not-present, air-gapped", "", sandgate.PullIfNotPresent, true, []string{"docker.io"}, 0, sandgate.CodeImageUnavailable},
		{"always, air-gapped: the local image or nothing", "", sandgate.PullAlways, true, []string{"docker.io"}, 0, sandgate.CodeImageUnavailable},
		{"no registry named: no pull", "", sandgate.PullIfNotPresent, false, nil, 0, sandgate.CodeImageUnavailable},
		{"always, Docker Hub not named", "", sandgate.PullAlways, false, []string{"registry.corp:5000"}, 0, sandgate.CodeImageUnavailable},
		{"a named registry", "registry.corp:5000/team/tool:1", sandgate.PullAlways, false, []string{"registry.corp:5000"}, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDocker()
			f.onImageInspect = func(n int) error {
				// Missing until pulled; with always, the first look is
				// after the pull.
				if n == 1 && (tc.policy != sandgate.PullAlways || tc.airGapped) {
					return errNotFound("no such image")
				}
				return nil
			}
			e, log := unitExecutor(t, f, nil)
			job := unitJob(t, func(s *sandgate.RunSpec) {
				s.PullPolicy = tc.policy
				if tc.image != "" {
					s.Image = tc.image
				}
			})
			job.AirGapped = tc.airGapped
			job.Enforcement.PullRegistries = tc.registries
			_, err := runUnit(t, e, job)
			if got := sandgate.ErrorCodeOf(err); got != tc.wantCode {
				t.Errorf("error = %v, want code %q", err, tc.wantCode)
			}
			if got := f.count("image pull"); got != tc.wantPulls {
				t.Errorf("pulls = %d, want %d", got, tc.wantPulls)
			}
			wantEvent := sandgate.EventImageResolved
			if tc.wantCode != "" {
				wantEvent = sandgate.EventImageUnavailable
			}
			if log.count(wantEvent) != 1 {
				t.Errorf("events %v, want one %s", log.types(), wantEvent)
			}
		})
	}
}

// TestRefusedSpecs: what the hardening forbids is refused before any
// Docker call, with the right code and the field named.
func TestRefusedSpecs(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name      string
		tune      func(*sandgate.RunSpec)
		job       func(*sandgate.Job)
		wantCode  sandgate.ErrorCode
		wantField string
	}{
		{"privileged", func(s *sandgate.RunSpec) { s.Privileged = true }, nil, sandgate.CodeContainerCreate, "privileged"},
		{"root user", func(s *sandgate.RunSpec) { s.User = "0:0" }, nil, sandgate.CodeContainerCreate, "user"},
		{"root by name", func(s *sandgate.RunSpec) { s.User = "root" }, nil, sandgate.CodeContainerCreate, "user"},
		{"devices", func(s *sandgate.RunSpec) { s.Devices = []string{"/dev/kmsg"} }, nil, sandgate.CodeContainerCreate, "devices"},
		{"host network", func(s *sandgate.RunSpec) { s.Network = "host" }, nil, sandgate.CodeContainerCreate, "network"},
		{"host pid", func(s *sandgate.RunSpec) { s.PIDMode = "host" }, nil, sandgate.CodeContainerCreate, "pid_mode"},
		{"seccomp unconfined", func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"seccomp=unconfined"} }, nil, sandgate.CodeContainerCreate, "security_opt"},
		{"no-new-privileges off", func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"no-new-privileges=false"} }, nil, sandgate.CodeContainerCreate, "security_opt"},
		{"SELinux spc_t", func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"label=type:spc_t"} }, nil, sandgate.CodeContainerCreate, "security_opt"},
		{"SELinux disabled", func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"label:disable"} }, nil, sandgate.CodeContainerCreate, "security_opt"},
		{"writable rootfs", func(s *sandgate.RunSpec) { s.ReadOnlyRootfs = &no }, nil, sandgate.CodeContainerCreate, "read_only_rootfs"},
		{"cap ALL", func(s *sandgate.RunSpec) { s.CapAdd = []string{"ALL"} }, nil, sandgate.CodeContainerCreate, "cap_add[0]"},
		{"published port", func(s *sandgate.RunSpec) { s.Ports = []string{"80:80"} }, nil, sandgate.CodeContainerCreate, "ports"},
		{"memory below docker's minimum", func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 4 }, nil, sandgate.CodeResourceLimit, ""},
		{"unresolved mount", nil, func(j *sandgate.Job) {
			j.Spec.Mounts = []sandgate.Mount{{Source: "/srv", Target: "/w"}}
		}, sandgate.CodeMountError, "mounts[0].source"},
		{"shared propagation", nil, func(j *sandgate.Job) {
			j.Spec.Mounts = []sandgate.Mount{{Source: "/srv", Resolved: "/srv", Target: "/w", Propagation: "rshared"}}
		}, sandgate.CodeMountError, "mounts[0].propagation"},
		{"bad volume name", func(s *sandgate.RunSpec) { s.Volumes = []sandgate.Volume{{Name: "../x", Target: "/c"}} }, nil, sandgate.CodeMountError, "volumes[0].name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDocker()
			e, log := unitExecutor(t, f, nil)
			job := unitJob(t, tc.tune)
			if tc.job != nil {
				tc.job(&job)
			}
			res, err := runUnit(t, e, job)
			var se *sandgate.Error
			if !errors.As(err, &se) || se.Code != tc.wantCode || se.Field != tc.wantField {
				t.Fatalf("error = %#v, want code %s field %q", err, tc.wantCode, tc.wantField)
			}
			if res.Outcome != sandgate.OutcomeError || res.Error == nil || res.Error.Code != tc.wantCode {
				t.Errorf("result = %+v", res)
			}
			if res.Stdout.Encoding != "utf-8" || res.Stderr.Encoding != "utf-8" || res.Stdout.Bytes != 0 {
				t.Errorf("outputs = %+v %+v, want empty utf-8 streams", res.Stdout, res.Stderr)
			}
			if diff := cmp.Diff([]sandgate.EventType{sandgate.EventRunFailed}, log.types()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if n := len(f.calls); n != 0 {
				t.Errorf("docker calls %v, want none", f.calls)
			}
		})
	}
}

// TestContainerName: names are safe for Docker and unique per run.
func TestContainerName(t *testing.T) {
	for _, tc := range []struct {
		name, session, task, runID, want string
	}{
		{"plain", "s-1", "t-42", "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "sandgate-s-1-t-42-0c1d2e3f4a5b"},
		{"empty session and task", "", "", "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "sandgate-none-none-0c1d2e3f4a5b"},
		{"unsafe characters", "a/b c", "../../etc", "run:1", "sandgate-a-b-c-etc-run1"},
		{"long parts are cut", strings.Repeat("s", 100), "t", "r", "sandgate-" + strings.Repeat("s", 40) + "-t-r"},
		{"unicode", "sessión", "tâche", "x", "sandgate-sessi-n-t-che-x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := containerName(sandgate.Job{RunID: tc.runID, Spec: sandgate.Normalized{RunSpec: sandgate.RunSpec{SessionID: tc.session, TaskID: tc.task}}})
			if got != tc.want {
				t.Errorf("containerName = %q, want %q", got, tc.want)
			}
			if !safeName.MatchString(got) {
				t.Errorf("%q is not a valid Docker name", got)
			}
		})
	}
}

// TestCapture: the cap, the count, the digest and the encoding.
func TestCapture(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int64
		writes []string
		want   sandgate.Output
	}{
		{"text under the cap", 100, []string{"hello ", "world\n"},
			sandgate.Output{Data: "hello world\n", Encoding: "utf-8", Bytes: 12, SHA256: "a948904f2f0f479b8f8197694b30184b0d2ed1c1cd2a1ec0fb85d299a192a447"}},
		{"cap inside a write", 5, []string{"abc", "defgh", "ij"},
			sandgate.Output{Data: "abcde", Encoding: "utf-8", Bytes: 10, Truncated: true, SHA256: "36bbe50ed96841d10443bcb670d6554f0a34b761be67ec9c4a8ad2c0c44ca42c"}},
		{"binary", 10, []string{"\xff\xfe\x00\x01"},
			sandgate.Output{Data: "//4AAQ==", Encoding: "base64", Bytes: 4, SHA256: sha256hex("\xff\xfe\x00\x01")}},
		{"nothing", 10, nil,
			sandgate.Output{Encoding: "utf-8", SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var live []string
			c := newCapture(sandgate.Stdout, nil, tc.limit, func(s sandgate.Stream, p []byte) { live = append(live, string(p)) })
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			got := c.output()
			// The bytes come as they are; encoded, they read as want's.
			got.Data, got.Encoding = sandgate.EncodeOutput(got.Raw)
			got.Raw = nil
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if kept := strings.Join(live, ""); int64(len(kept)) != min(tc.limit, got.Bytes) {
				t.Errorf("live subscriber got %d bytes, want %d", len(kept), min(tc.limit, got.Bytes))
			}
		})
	}
}

// TestCleanupOnlyThisNode: the reaper removes this node's orphans and
// nothing else: not live runs, not other nodes' containers.
func TestCleanupOnlyThisNode(t *testing.T) {
	f := newFakeDocker()
	add := func(id, node, runID string) {
		f.containers[id] = &fakeContainer{id: id, name: id, labels: map[string]string{
			sandgate.LabelManaged: "true", sandgate.LabelNode: node, sandgate.LabelRunID: runID,
		}}
	}
	add("mine-orphan", "unit", "gone-1")
	add("unlabelled-orphan", "", "gone-2")
	add("other-node", "elsewhere", "gone-3")
	add("mine-live", "unit", "live-run")
	e, log := unitExecutor(t, f, nil)
	live := e.newHandle(context.Background(), sandgate.Job{RunID: "live-run"})
	if err := e.runs.add(live); err != nil {
		t.Fatal(err)
	}
	removed, err := e.reaper.CleanupOrphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range removed {
		got = append(got, s.ContainerID)
	}
	if diff := cmp.Diff([]string{"mine-orphan", "unlabelled-orphan"}, got, cmpSorted); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if log.count(sandgate.EventOrphanRemoved) != 2 {
		t.Errorf("events %v, want two orphan.removed", log.types())
	}
	for _, id := range []string{"other-node", "mine-live"} {
		if f.containers[id] == nil {
			t.Errorf("%s was removed", id)
		}
	}
}

var cmpSorted = cmpopts.SortSlices(func(a, b string) bool { return a < b })

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestStopSequence: cancel and timeout send SIGTERM, and SIGKILL only when
// the grace period passes; the output so far is kept.
func TestStopSequence(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ignoreTERM  bool
		cancel      bool
		wantOutcome sandgate.Outcome
		wantExit    int
		wantKills   []string
	}{
		{"cancel, SIGTERM suffices", false, true, sandgate.OutcomeCancelled, 143, []string{"kill SIGTERM"}},
		{"cancel, SIGTERM ignored", true, true, sandgate.OutcomeCancelled, 137, []string{"kill SIGTERM", "kill SIGKILL"}},
		{"timeout, SIGTERM suffices", false, false, sandgate.OutcomeTimedOut, 143, []string{"kill SIGTERM"}},
		{"timeout, SIGTERM ignored", true, false, sandgate.OutcomeTimedOut, 137, []string{"kill SIGTERM", "kill SIGKILL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDocker()
			f.hang, f.ignoreTERM = true, tc.ignoreTERM
			e, log := unitExecutor(t, f, func(c *Config) { c.StopGrace = 10 * time.Millisecond })
			job := unitJob(t, func(s *sandgate.RunSpec) {
				if tc.cancel {
					s.TimeoutSeconds = 3600
				} else {
					s.TimeoutSeconds = 1
				}
			})
			printed := make(chan struct{})
			var once sync.Once
			job.Output = func(sandgate.Stream, []byte) { once.Do(func() { close(printed) }) }
			done := make(chan sandgate.Result, 1)
			go func() {
				res, _ := e.Execute(context.Background(), job)
				done <- res
			}()
			<-printed
			if tc.cancel {
				if err := e.Cancel(context.Background(), job.RunID); err != nil {
					t.Fatal(err)
				}
			}
			res := <-done
			if res.Outcome != tc.wantOutcome || res.ExitCode == nil || *res.ExitCode != tc.wantExit {
				t.Errorf("result = %s exit %v, want %s exit %d", res.Outcome, res.ExitCode, tc.wantOutcome, tc.wantExit)
			}
			if text(res.Stdout) != "hello\n" {
				t.Errorf("stdout = %q, want the output so far", text(res.Stdout))
			}
			var kills []string
			for _, op := range []string{"kill SIGTERM", "kill SIGKILL"} {
				if f.count(op) > 0 {
					kills = append(kills, op)
				}
			}
			if diff := cmp.Diff(tc.wantKills, kills); diff != "" {
				t.Errorf("signals (-want +got):\n%s", diff)
			}
			want := sandgate.EventRunCancelled
			if !tc.cancel {
				want = sandgate.EventRunTimedOut
			}
			if log.count(want) != 1 || log.count(sandgate.EventContainerRemoved) != 1 {
				t.Errorf("events %v, want %s and container.removed", log.types(), want)
			}
		})
	}
}

// TestReaperMarksVanishedRunLost: a live run whose container is no longer
// listed ends lost.
func TestReaperMarksVanishedRunLost(t *testing.T) {
	f := newFakeDocker()
	f.hang = true
	now := time.Unix(1000, 0)
	var clockMu sync.Mutex
	clock := func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		now = now.Add(time.Second)
		return now
	}
	e, log := unitExecutor(t, f, func(c *Config) { c.Clock = clock })
	job := unitJob(t, nil)
	started := make(chan string, 1)
	job.Started = func(id string, _ time.Time) { started <- id }
	done := make(chan sandgate.Result, 1)
	go func() {
		res, _ := e.Execute(context.Background(), job)
		done <- res
	}()
	id := <-started
	f.mu.Lock()
	delete(f.containers, id) // gone without an exit, as when a daemon loses it
	f.mu.Unlock()
	if _, err := e.reaper.CleanupOrphans(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Outcome != sandgate.OutcomeLost || res.Error == nil || res.Error.Code != sandgate.CodeContainerCreate {
		t.Errorf("result = %s %+v, want lost", res.Outcome, res.Error)
	}
	if log.count(sandgate.EventRunLost) != 1 {
		t.Errorf("events %v, want run.lost", log.types())
	}
}
