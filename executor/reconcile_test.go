package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/images"
)

// leftover makes the container a killed gateway would leave for job on
// node: labelled like the executor's, started when start is true. With
// warm, it is labelled like a warm pool's container instead, which carries
// no run's labels.
func leftover(t *testing.T, node string, job sandgate.Job, start, warm bool, command ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := docker(t)
	labels := map[string]string{
		sandgate.LabelManaged: "true", sandgate.LabelRunID: job.RunID, sandgate.LabelNode: node,
		sandgate.LabelCorrelationID: job.CorrelationID,
	}
	if warm {
		labels = map[string]string{sandgate.LabelManaged: "true", sandgate.LabelNode: node, executor.LabelPool: "0123456789abcdef"}
	}
	resp, err := d.ContainerCreate(ctx, &container.Config{
		Image:  images.SandboxImage,
		Cmd:    command,
		User:   "10001:10001",
		Labels: labels,
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatalf("create leftover container: %v", err)
	}
	t.Cleanup(func() {
		_ = d.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true})
	})
	if start {
		if err := d.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
			t.Fatalf("start leftover container: %v", err)
		}
	}
	return resp.ID
}

// TestAdopt takes over the containers a killed gateway left: each kind of
// leftover ends as the run really ended, with the events still due, and
// the container removed. A run claimed from the warm pool is found, and
// held against the reaper, by the container ID its run recorded.
func TestAdopt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command []string
		// start the leftover; wait for it to exit before adopting.
		start, exited, none bool
		// warm labels the leftover like a claimed warm pool container,
		// known to the run by its ID only; foreign puts it on another node.
		warm, foreign bool
		outcome       sandgate.Outcome
		exit          int
		stdout        string
		events        []sandgate.EventType
		// usage is what the result's usage must be: read from the
		// container's cgroup ("cgroup"), wall time only ("none"), either
		// ("any"), or no usage at all ("").
		usage string
	}{
		{
			name:    "running container is followed to its end",
			command: []string{"sh", "-c", "sleep 2; echo after; exit 9"},
			start:   true, outcome: sandgate.OutcomeFailed, exit: 9, stdout: "after\n", usage: "cgroup",
			events: []sandgate.EventType{sandgate.EventContainerExited, sandgate.EventContainerRemoved},
		},
		{
			name:    "exited container is recorded with its exit code",
			command: []string{"sh", "-c", "exit 6"},
			start:   true, exited: true, outcome: sandgate.OutcomeFailed, exit: 6, usage: "none",
			events: []sandgate.EventType{sandgate.EventContainerExited, sandgate.EventContainerRemoved},
		},
		{
			name:    "created container is started once",
			command: []string{"sh", "-c", "echo first; exit 0"},
			outcome: sandgate.OutcomeSucceeded, exit: 0, stdout: "first\n", usage: "any",
			events: []sandgate.EventType{sandgate.EventContainerStarted, sandgate.EventContainerExited, sandgate.EventContainerRemoved},
		},
		{
			name:    "claimed warm container is followed to its end",
			command: []string{"sh", "-c", "sleep 2; echo after; exit 9"},
			start:   true, warm: true, outcome: sandgate.OutcomeFailed, exit: 9, stdout: "after\n", usage: "cgroup",
			events: []sandgate.EventType{sandgate.EventContainerExited, sandgate.EventContainerRemoved},
		},
		{
			name:    "exited warm container is recorded with its exit code",
			command: []string{"sh", "-c", "exit 6"},
			start:   true, exited: true, warm: true, outcome: sandgate.OutcomeFailed, exit: 6, usage: "none",
			events: []sandgate.EventType{sandgate.EventContainerExited, sandgate.EventContainerRemoved},
		},
		{
			name:    "warm container whose command never came is lost",
			command: []string{"/bin/sh", "-c", executor.Launcher, "sandgate-launcher"},
			start:   true, exited: true, warm: true, outcome: sandgate.OutcomeLost, exit: -1,
			events: []sandgate.EventType{sandgate.EventRunLost, sandgate.EventContainerRemoved},
		},
		{
			name:    "warm container of another node is not adopted",
			command: []string{"sh", "-c", "exit 6"},
			start:   true, exited: true, warm: true, foreign: true, outcome: sandgate.OutcomeLost, exit: -1,
			events: []sandgate.EventType{sandgate.EventRunLost},
		},
		{
			name:    "no container is lost",
			command: []string{"true"},
			none:    true, outcome: sandgate.OutcomeLost, exit: -1,
			events: []sandgate.EventType{sandgate.EventRunLost},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ex, rec := newTestExecutor(t, nil)
			job := newJob(t, nil, tc.command...)
			if !tc.none {
				node := ex.Node()
				if tc.foreign {
					node = "other-" + node
				}
				id := leftover(t, node, job, tc.start, tc.warm, tc.command...)
				if tc.exited {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					waitC, errC := docker(t).ContainerWait(ctx, id, container.WaitConditionNotRunning)
					select {
					case <-waitC:
					case err := <-errC:
						t.Fatalf("wait for the leftover: %v", err)
					}
					cancel()
				}
				// Held, the container survives the reaper.
				ex.Reconciler().Hold(job.RunID)
				if tc.warm {
					job.ContainerID = id
					ex.Reconciler().HoldContainers(id)
				}
				if _, err := ex.Reaper().CleanupOrphans(context.Background()); err != nil {
					t.Fatalf("CleanupOrphans: %v", err)
				}
				if n := len(managed(t, node)); n != 1 {
					t.Fatalf("%d containers after the reaper ran on a held run, want 1", n)
				}
				if tc.foreign {
					defer func() {
						if n := len(managed(t, node)); n != 1 {
							t.Errorf("%d containers of the other node after Adopt, want 1: not this node's to remove", n)
						}
					}()
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := ex.Reconciler().Adopt(ctx, job)
			if err != nil {
				t.Fatalf("Adopt: %v (%+v)", err, res)
			}
			if res.Outcome != tc.outcome || exitCode(res) != tc.exit || text(res.Stdout) != tc.stdout {
				t.Errorf("Adopt = %s exit %d stdout %q, want %s exit %d stdout %q", res.Outcome, exitCode(res), text(res.Stdout), tc.outcome, tc.exit, tc.stdout)
			}
			switch u := res.Usage; {
			case tc.usage == "" && u != nil:
				t.Errorf("usage %+v, want none for a run whose container was not followed", u)
			case tc.usage != "" && u == nil:
				t.Errorf("no usage, want %s", tc.usage)
			case tc.usage == "none" && u.Source != sandgate.UsageNone,
				tc.usage == "cgroup" && u.Source != sandgate.UsageCgroupV1 && u.Source != sandgate.UsageCgroupV2:
				t.Errorf("usage source %q, want %s", u.Source, tc.usage)
			}
			if tc.outcome == sandgate.OutcomeLost && (res.Error == nil || res.Error.Message == "") {
				t.Errorf("lost without a reason: %+v", res.Error)
			}
			got := map[sandgate.EventType]int{}
			for _, typ := range rec.typesOf(job.RunID) {
				got[typ]++
			}
			for _, typ := range tc.events {
				if got[typ] != 1 {
					t.Errorf("%d %s event(s), want 1 (all: %v)", got[typ], typ, rec.typesOf(job.RunID))
				}
			}
			if n := len(managed(t, ex.Node())); n != 0 {
				t.Errorf("%d container(s) left after Adopt", n)
			}
		})
	}
}

// TestStoppedThroughDaemon stops a run's container from outside, as a
// restart of the Docker service does: the run ends as error with the
// reason and the exit code, not as the program's own failure.
func TestStoppedThroughDaemon(t *testing.T) {
	t.Parallel()
	ex, rec := newTestExecutor(t, nil)
	job := newJob(t, nil, "sleep", "30")
	started := make(chan string, 1)
	job.Started = func(id string, _ time.Time) { started <- id }
	done := executeAsync(t, ex, job)
	id := await(t, started, done, "the start")
	timeout := 5
	if err := docker(t).ContainerStop(context.Background(), id, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatalf("docker stop: %v", err)
	}
	res := <-done
	if res.Outcome != sandgate.OutcomeError || res.Error == nil || res.Error.Message == "" || exitCode(res) != 143 {
		t.Errorf("run stopped through the daemon = %s exit %d error %+v, want error exit 143 with a reason", res.Outcome, exitCode(res), res.Error)
	}
	if rec.count(sandgate.EventRunFailed) != 1 {
		t.Errorf("events: %v, want one run.failed", rec.typesOf(job.RunID))
	}
}
