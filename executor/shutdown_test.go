package executor_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/sandgatetest"
)

// helperEnv makes the test binary act as a tiny sandgate process for
// TestSIGTERMLeavesNoContainer instead of running tests.
const helperEnv = "SANDGATE_EXECUTOR_SIGTERM_NODE"

func TestMain(m *testing.M) {
	if node := os.Getenv(helperEnv); node != "" {
		os.Exit(sigtermHelper(node))
	}
	os.Exit(m.Run())
}

// sigtermHelper starts a long run and, on SIGTERM, shuts the executor
// down the way `sandgate serve` does.
func sigtermHelper(node string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ex, err := executor.New(executor.Config{DockerHost: os.Getenv("DOCKER_HOST"), Node: node, StopGrace: 2 * time.Second}, nil)
	if err != nil {
		fmt.Println("new:", err)
		return 2
	}
	defer ex.Close()
	if err := ex.Start(ctx); err != nil {
		fmt.Println("start:", err)
		return 2
	}
	spec, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"sleep", "300"}, SessionID: "sigterm"}, sandgate.Defaults{})
	if err != nil {
		fmt.Println("normalize:", err)
		return 2
	}
	job := sandgate.Job{RunID: "sigterm-run-" + node, Spec: spec}
	job.Started = func(id string, _ time.Time) { fmt.Println("started", id) }
	results := make(chan sandgate.Result, 1)
	go func() {
		res, _ := ex.Execute(context.Background(), job)
		results <- res
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ex.Shutdown(sctx); err != nil {
		fmt.Println("shutdown:", err)
		return 1
	}
	fmt.Println("outcome", (<-results).Outcome)
	return 0
}

// TestSIGTERMLeavesNoContainer sends SIGTERM to a process with a running
// sandbox and checks that it stopped and removed the container before it
// exited.
func TestSIGTERMLeavesNoContainer(t *testing.T) {
	docker(t)
	node := "test-" + sandgatetest.RandomHex(t, 6)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+node)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "started ") {
		t.Fatalf("helper said %q, want started", lines.Text())
	}
	if n := len(managed(t, node)); n != 1 {
		t.Fatalf("%d containers of node %s before SIGTERM, want 1", n, node)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil {
		t.Errorf("helper exit: %v; output %q", err, rest)
	}
	if !strings.Contains(string(rest), "outcome cancelled") {
		t.Errorf("helper said %q, want outcome cancelled", rest)
	}
	if left := managed(t, node); len(left) != 0 {
		t.Errorf("%d container(s) left after SIGTERM", len(left))
	}
}

// TestShutdownStopsRunning: Shutdown cancels running and queued runs,
// removes their containers and refuses new runs.
func TestShutdownStopsRunning(t *testing.T) {
	ex, rec := newTestExecutor(t, func(c *executor.Config) { c.MaxConcurrent = 1 })
	started := make(chan struct{})
	running := newJob(t, nil, "sleep", "300")
	running.Started = func(string, time.Time) { close(started) }
	queued := newJob(t, nil, "echo", "never")
	runningDone := executeAsync(t, ex, running)
	await(t, started, runningDone, "the start")
	queuedDone := make(chan sandgate.Result, 1)
	go func() {
		res, _ := ex.Execute(context.Background(), queued)
		queuedDone <- res
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Wait until the queued run is registered, so that Shutdown finds it.
	waitState(t, ex, queued.RunID, sandgate.StatePending)
	if err := ex.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, ch := range []<-chan sandgate.Result{runningDone, queuedDone} {
		if res := <-ch; res.Outcome != sandgate.OutcomeCancelled {
			t.Errorf("outcome = %s, want cancelled", res.Outcome)
		}
	}
	for _, ev := range rec.of(running.RunID) {
		if ev.Type == sandgate.EventRunCancelled && ev.Payload["reason"] != "shutdown" {
			t.Errorf("run.cancelled reason = %v, want shutdown", ev.Payload["reason"])
		}
	}
	if left := managed(t, ex.Node()); len(left) != 0 {
		t.Errorf("%d container(s) left after Shutdown", len(left))
	}
	_, err := ex.Execute(context.Background(), newJob(t, nil, "true"))
	if sandgate.ErrorCodeOf(err) != sandgate.CodeUnavailable {
		t.Errorf("Execute after Shutdown = %v, want UNAVAILABLE", err)
	}
}
