package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestEndToEndRuns drives runs through one real server: live log
// streaming, idempotent submission, cancellation and the CLI's exit codes.
// The subtests share the server and run in parallel; each looks only at
// its own runs.
func TestEndToEndRuns(t *testing.T) {
	// The server's cleanup (which checks that no container is left) runs
	// after the parallel subtests have finished.
	s := startServer(t)
	t.Run("stream follows a live run", func(t *testing.T) { t.Parallel(); testLiveStream(t, s) })
	t.Run("idempotency key", func(t *testing.T) { t.Parallel(); testIdempotency(t, s) })
	t.Run("concurrent retries with one key", func(t *testing.T) { t.Parallel(); testConcurrentIdempotency(t, s) })
	t.Run("cancel", func(t *testing.T) { t.Parallel(); testCancel(t, s) })
	t.Run("cli exit codes", func(t *testing.T) { t.Parallel(); testCLIExitCodes(t, s) })
}

// submitAsync posts spec without waiting and returns the accepted run.
func submitAsync(t *testing.T, s *testServer, spec string, header ...string) api.RunView {
	t.Helper()
	status, h, body := s.do(t, http.MethodPost, "/v1/runs", spec, header...)
	if status != http.StatusAccepted {
		t.Fatalf("POST /v1/runs %s = %d %s", spec, status, body)
	}
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil {
		t.Fatal(err)
	}
	if got, want := h.Get("Location"), "/v1/runs/"+run.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	return run
}

// testLiveStream follows a run whose second line waits on a gate the test
// opens only after the first line has arrived: "first" reaching the client
// while the run is still running is then a matter of order, not timing.
func testLiveStream(t *testing.T, s *testServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	run := submitAsync(t, s, `{"command":["sh","-c","echo first; while [ ! -e /tmp/gate ]; do sleep 0.05; done; echo second"],"timeout_seconds":60}`)

	var events []string
	var stdout strings.Builder
	var stateAtFirst sandgate.State
	var exit api.ExitData
	err := s.Client.Logs(ctx, run.ID, true, func(ev api.LogEvent) error {
		events = append(events, ev.Event)
		switch ev.Event {
		case api.EventStdout:
			b, err := ev.Chunk()
			if err != nil {
				return err
			}
			stdout.Write(b)
			if stateAtFirst == "" && strings.Contains(stdout.String(), "first\n") {
				now, err := s.Client.Run(ctx, run.ID)
				if err != nil {
					return err
				}
				stateAtFirst = now.State
				if now.Stdout.Data != "first\n" {
					t.Errorf("GET while running: stdout %q, want the output so far %q", now.Stdout.Data, "first\n")
				}
				// Open the gate: the run may now finish.
				if out, err := exec.CommandContext(ctx, "docker", "exec", now.ContainerID, "touch", "/tmp/gate").CombinedOutput(); err != nil {
					t.Errorf("docker exec touch /tmp/gate: %v: %s", err, out)
					return err
				}
			}
		case api.EventExit:
			x, err := ev.Exit()
			if err != nil {
				return err
			}
			exit = x
		}
		return nil
	})
	if err != nil {
		t.Fatalf("logs: %v (events %v)", err, events)
	}
	if stateAtFirst != sandgate.StateRunning {
		t.Errorf("run state when \"first\" arrived = %q, want running", stateAtFirst)
	}
	if got := stdout.String(); got != "first\nsecond\n" {
		t.Errorf("streamed stdout = %q, want first then second", got)
	}
	if len(events) == 0 || events[len(events)-1] != api.EventExit {
		t.Errorf("events = %v, want the exit event last", events)
	}
	if exit.Outcome != sandgate.OutcomeSucceeded || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Errorf("exit = %+v, want succeeded with code 0", exit)
	}

	// A finished run replays the same output, then its exit.
	var replay strings.Builder
	if err := s.Client.Logs(ctx, run.ID, true, func(ev api.LogEvent) error {
		if ev.Event == api.EventStdout {
			b, err := ev.Chunk()
			replay.Write(b)
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if replay.String() != "first\nsecond\n" {
		t.Errorf("replayed stdout = %q", replay.String())
	}
}

// testIdempotency submits twice with one key: the same run answers, the
// replay is marked, one container is created, and the key cannot be
// reused for another request.
func testIdempotency(t *testing.T, s *testServer) {
	key := "e2e-idem-" + sandgatetest.RandomHex(t, 8)
	spec := `{"command":["sh","-c","echo once"]}`
	var ids []string
	for i, want := range []string{"", "true"} {
		status, h, body := s.do(t, http.MethodPost, "/v1/runs?wait=30s", spec, "Idempotency-Key", key)
		if status != http.StatusOK {
			t.Fatalf("submission %d: %d %s", i+1, status, body)
		}
		if got := h.Get("Idempotent-Replayed"); got != want {
			t.Errorf("submission %d: Idempotent-Replayed = %q, want %q", i+1, got, want)
		}
		var run api.RunView
		if err := json.Unmarshal(body, &run); err != nil {
			t.Fatal(err)
		}
		if run.Stdout.Data != "once\n" || run.Outcome == nil || *run.Outcome != sandgate.OutcomeSucceeded {
			t.Errorf("submission %d: run = %s %v %q, want succeeded with once", i+1, run.State, run.Outcome, run.Stdout.Data)
		}
		ids = append(ids, run.ID)
	}
	if ids[0] != ids[1] {
		t.Fatalf("run IDs %v, want the same run twice", ids)
	}

	status, _, body := s.do(t, http.MethodPost, "/v1/runs", `{"command":["sh","-c","echo other"]}`, "Idempotency-Key", key)
	if e := apiError(body); status != http.StatusConflict || e.Error.Code != sandgate.CodeConflict {
		t.Errorf("same key, other request: %d %s, want 409 CONFLICT", status, body)
	}
	assertOneContainer(t, s, ids[0])
}

// testConcurrentIdempotency sends one request with one key from several
// clients at once, as retries racing each other do: every answer names the
// same run, and one container runs.
func testConcurrentIdempotency(t *testing.T, s *testServer) {
	key := "e2e-idem-race-" + sandgatetest.RandomHex(t, 8)
	const n = 4
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run, err := s.Client.Submit(context.Background(), sandgate.RunSpec{Command: []string{"sh", "-c", "echo race"}},
				client.SubmitOptions{Wait: 30 * time.Second, IdempotencyKey: key})
			if err != nil {
				t.Errorf("submission %d: %v", i, err)
				return
			}
			ids[i] = run.ID
		}()
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if ids[i] != ids[0] {
			t.Fatalf("run IDs %v, want one run", ids)
		}
	}
	assertOneContainer(t, s, ids[0])
}

// assertOneContainer checks that the trail shows exactly one container
// created and removed for the run, and that none is left.
func assertOneContainer(t *testing.T, s *testServer, runID string) {
	t.Helper()
	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {runID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventContainerRemoved)
	})
	if n := countEvents(events, sandgate.EventContainerCreated); n != 1 {
		t.Errorf("container.created events for run %s: %d, want 1 (%s)", runID, n, eventTypes(events))
	}
	if n := countContainers(t, sandgate.LabelRunID, runID); n != 0 {
		t.Errorf("%d containers of run %s left", n, runID)
	}
}

// testCancel cancels a run that has printed a line and sleeps: it ends
// cancelled, the line is kept, the container is gone and the trail says
// run.cancelled.
func testCancel(t *testing.T, s *testServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	run := submitAsync(t, s, `{"command":["sh","-c","echo before; sleep 60; echo after"]}`)

	// Read the stream until "before" has been printed: the run is running.
	err := s.Client.Logs(ctx, run.ID, true, func(ev api.LogEvent) error {
		if ev.Event == api.EventStdout {
			if b, _ := ev.Chunk(); strings.Contains(string(b), "before") {
				return client.ErrStopStream
			}
		}
		if ev.Event == api.EventExit {
			return errors.New("the run ended before it was cancelled")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("logs: %v", err)
	}
	if n := countContainers(t, sandgate.LabelRunID, run.ID); n != 1 {
		t.Fatalf("%d containers for the running run, want 1", n)
	}

	got, err := s.Client.Cancel(ctx, run.ID)
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	for !got.Finished() {
		// DELETE answers 202 when the run is still stopping.
		time.Sleep(100 * time.Millisecond)
		if got, err = s.Client.Run(ctx, run.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got.Outcome == nil || *got.Outcome != sandgate.OutcomeCancelled {
		t.Errorf("outcome = %v, want cancelled", got.Outcome)
	}
	if got.Stdout.Data != "before\n" {
		t.Errorf("stdout = %q, want the output so far %q", got.Stdout.Data, "before\n")
	}
	if n := countContainers(t, sandgate.LabelRunID, run.ID); n != 0 {
		t.Errorf("%d containers left after cancel, want 0", n)
	}
	stored, err := s.Client.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Outcome == nil || *stored.Outcome != sandgate.OutcomeCancelled || stored.Stdout.Data != "before\n" {
		t.Errorf("stored run = %v %q, want cancelled with the output so far", stored.Outcome, stored.Stdout.Data)
	}
	// The trail records the cancellation and the removal (the wait fails
	// the test when either never comes).
	s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventContainerRemoved) && hasEvent(evs, sandgate.EventRunCancelled)
	})

	// A second DELETE finds the run finished.
	status, _, body := s.do(t, http.MethodDelete, "/v1/runs/"+run.ID, "")
	if status != http.StatusConflict {
		t.Errorf("second DELETE: %d %s, want 409", status, body)
	}
}

// testCLIExitCodes runs `sandgate run` (the CLI's own code path, in
// process) against the server: it streams the output and exits with the
// container's code, 126 for a denial and 125 for a refused token.
func testCLIExitCodes(t *testing.T, s *testServer) {
	tests := []struct {
		name       string
		args       []string
		token      string
		wantCode   int
		wantOutput string
	}{
		{"success", []string{"run", "--", "sh", "-c", "echo hello"}, s.Token, 0, "hello\n"},
		{"exit 7", []string{"run", "--", "sh", "-c", "echo out; echo err >&2; exit 7"}, s.Token, 7, "out\n"},
		{"exit 7 with --wait", []string{"run", "--wait", "--", "sh", "-c", "exit 7"}, s.Token, 7, ""},
		{"policy denial", []string{"run", "--network", "host", "--", "true"}, s.Token, exitDenied, "no_host_network"},
		{"bad token", []string{"run", "--", "true"}, "sgdev_wrong", exitPlatform, "UNAUTHENTICATED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out syncBuffer
			env := map[string]string{"SANDGATE_URL": s.URL, "SANDGATE_TOKEN": tc.token}
			err := runApp(ctx, tc.args, env, &out, nil)
			code := 0
			if err != nil {
				var ee *cli.ExitError
				if !errors.As(err, &ee) {
					t.Fatalf("err = %v (%T), want an *cli.ExitError", err, err)
				}
				code = ee.Code
				out.Write([]byte(ee.Message))
			}
			if diff := cmp.Diff(tc.wantCode, code); diff != "" {
				t.Errorf("exit code (-want +got):\n%s\noutput: %s", diff, out.String())
			}
			if !strings.Contains(out.String(), tc.wantOutput) {
				t.Errorf("output %q lacks %q", out.String(), tc.wantOutput)
			}
		})
	}
}
