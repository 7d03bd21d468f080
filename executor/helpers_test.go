package executor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// recorder collects emitted events.
type recorder struct {
	mu     sync.Mutex
	events []sandgate.Event
}

func (r *recorder) Emit(ev sandgate.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// of returns the events of one run, in order.
func (r *recorder) of(runID string) []sandgate.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sandgate.Event
	for _, ev := range r.events {
		if ev.RunID == runID {
			out = append(out, ev)
		}
	}
	return out
}

// all returns every event so far.
func (r *recorder) all() []sandgate.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sandgate.Event(nil), r.events...)
}

func (r *recorder) typesOf(runID string) []sandgate.EventType {
	var out []sandgate.EventType
	for _, ev := range r.of(runID) {
		out = append(out, ev.Type)
	}
	return out
}

func (r *recorder) count(t sandgate.EventType) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.events {
		if ev.Type == t {
			n++
		}
	}
	return n
}

// newTestExecutor starts an executor on a node of its own, so that tests
// running side by side never reap each other's containers, and checks at
// the end that it left no container behind.
func newTestExecutor(t testing.TB, tune func(*executor.Config)) (*executor.Executor, *recorder) {
	t.Helper()
	executortest.RequireDocker(t)
	rec := &recorder{}
	cfg := executor.Config{
		DockerHost: executortest.DockerHost(),
		Node:       "test-" + sandgatetest.RandomHex(t, 6),
		StopGrace:  3 * time.Second,
		// Cache volumes' and workspaces' file systems live with the test,
		// and go with it.
		VolumeDir:    t.TempDir(),
		WorkspaceDir: t.TempDir(),
	}
	if tune != nil {
		tune(&cfg)
	}
	ex, err := executor.New(cfg, rec)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ex.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := ex.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if left := managed(t, cfg.Node); len(left) > 0 {
			t.Errorf("%d container(s) of node %s left behind", len(left), cfg.Node)
		}
		vols, err := ex.CacheVolumes(context.Background())
		if err != nil {
			t.Error(err)
		}
		for _, v := range vols {
			if err := ex.RemoveCacheVolume(context.Background(), v.Team, v.Name); err != nil {
				t.Errorf("remove cache volume %s: %v", v.DockerVolume, err)
			}
		}
		ex.Close()
	})
	return ex, rec
}

// docker is a plain client for looking at what the executor did.
func docker(t testing.TB) *client.Client { return executortest.Docker(t) }

// managed lists the containers labelled with node.
func managed(t testing.TB, node string) []container.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := docker(t).ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", sandgate.LabelNode+"="+node)),
	})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	return list
}

// newJob returns an admitted job for command, normalised with the builtin
// defaults and then adjusted by tune.
func newJob(t testing.TB, tune func(*sandgate.RunSpec), command ...string) sandgate.Job {
	t.Helper()
	spec := sandgate.RunSpec{Command: command, SessionID: "s-test", TaskID: t.Name()}
	if tune != nil {
		tune(&spec)
	}
	n, err := sandgate.Normalize(spec, sandgate.Defaults{})
	if err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return sandgate.Job{
		RunID:         "0193" + sandgatetest.RandomHex(t, 14),
		CorrelationID: "corr-" + sandgatetest.RandomHex(t, 4),
		DecisionID:    "dec-" + sandgatetest.RandomHex(t, 4),
		Principal:     "alice",
		Team:          "payments",
		Spec:          n,
	}
}

func execute(t testing.TB, ex *executor.Executor, job sandgate.Job) sandgate.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := ex.Execute(ctx, job)
	if err != nil {
		t.Fatalf("Execute: %v (result %+v)", err, res)
	}
	return res
}

func exitCode(res sandgate.Result) int {
	if res.ExitCode == nil {
		return -1
	}
	return *res.ExitCode
}

// waitState waits until the run is live in state want.
func waitState(t testing.TB, ex *executor.Executor, runID string, want sandgate.State) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if got, ok := ex.State(runID); ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s never reached state %s", runID, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// executeAsync runs job in the background; errors are reported without
// stopping the test, since they happen off the test's goroutine.
func executeAsync(t testing.TB, ex *executor.Executor, job sandgate.Job) <-chan sandgate.Result {
	t.Helper()
	ch := make(chan sandgate.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := ex.Execute(ctx, job)
		if err != nil {
			t.Errorf("Execute: %v (result %+v)", err, res)
		}
		ch <- res
	}()
	return ch
}

// await waits for signal, failing when the run ends first or a minute
// passes.
func await[T any](t testing.TB, signal <-chan T, done <-chan sandgate.Result, what string) T {
	t.Helper()
	select {
	case v := <-signal:
		return v
	case res := <-done:
		t.Fatalf("the run ended (%s, stderr %q) before %s", res.Outcome, text(res.Stderr), what)
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// text is what a stream captured, as a string.
func text(o sandgate.Output) string {
	b, _ := o.Content()
	return string(b)
}

// encoded is o as a client reads it: its bytes as Data in their encoding.
func encoded(o sandgate.Output) sandgate.Output {
	if o.Raw != nil {
		o.Data, o.Encoding = sandgate.EncodeOutput(o.Raw)
		o.Raw = nil
	}
	return o
}

// newTestImages is the image administration of the test's daemon.
func newTestImages(t testing.TB) *images.Images {
	t.Helper()
	executortest.RequireDocker(t)
	im, err := images.New(images.Config{DockerHost: executortest.DockerHost()})
	if err != nil {
		t.Fatalf("images.New: %v", err)
	}
	t.Cleanup(func() { im.Close() })
	return im
}
