package executor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// TestEveryPathHasAnOutcome follows a run down every path that ends it,
// on the fake daemon, and checks that each result carries an outcome
// decided by the handle: error and lost with the error that says why,
// the others without one, both streams reported, and the trail's end
// agreeing with the result. The gateway only copies these results.
func TestEveryPathHasAnOutcome(t *testing.T) {
	hold := func(e *Executor, runID string) func() {
		// A run that holds the only slot until cancelled.
		job := unitJob(t, nil)
		job.RunID = runID
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.Execute(context.Background(), job)
		}()
		for {
			if st, ok := e.State(runID); ok && st == sandgate.StateRunning {
				break
			}
			time.Sleep(time.Millisecond)
		}
		return func() {
			e.Cancel(context.Background(), runID)
			<-done
		}
	}
	type path struct {
		name    string
		fake    func(*fakeDocker)
		cfg     func(*Config)
		spec    func(*sandgate.RunSpec)
		run     func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result
		want    sandgate.Outcome
		code    sandgate.ErrorCode
		endedBy sandgate.EventType
	}
	execute := func(t *testing.T, e *Executor, _ *fakeDocker, job sandgate.Job) sandgate.Result {
		res, _ := runUnit(t, e, job)
		return res
	}
	paths := []path{
		{name: "refused: no run ID", want: sandgate.OutcomeError, code: sandgate.CodeInvalidRequest,
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				job.RunID = ""
				return execute(t, e, f, job)
			}},
		{name: "refused: already executing", want: sandgate.OutcomeError, code: sandgate.CodeConflict,
			fake: func(f *fakeDocker) { f.hang = true },
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				defer hold(e, job.RunID)()
				return execute(t, e, f, job)
			}},
		{name: "refused by the hardening", want: sandgate.OutcomeError, code: sandgate.CodeContainerCreate, endedBy: sandgate.EventRunFailed,
			spec: func(s *sandgate.RunSpec) { s.Privileged = true }, run: execute},
		{name: "cancelled while queued", want: sandgate.OutcomeCancelled, endedBy: sandgate.EventRunCancelled,
			fake: func(f *fakeDocker) { f.hang = true },
			cfg:  func(c *Config) { c.MaxConcurrent = 1 },
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				defer hold(e, "holder")()
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				res, _ := e.Execute(ctx, job)
				return res
			}},
		{name: "image unavailable", want: sandgate.OutcomeError, code: sandgate.CodeImageUnavailable, endedBy: sandgate.EventRunFailed,
			fake: func(f *fakeDocker) { f.onImageInspect = func(int) error { return errNotFound("no such image") } }, run: execute},
		{name: "create refused", want: sandgate.OutcomeError, code: sandgate.CodeContainerCreate, endedBy: sandgate.EventRunFailed,
			fake: func(f *fakeDocker) {
				f.onCreate = func(context.Context, int) (bool, error) { return false, errInvalid("bad value") }
			}, run: execute},
		{name: "cancelled during create", want: sandgate.OutcomeCancelled, endedBy: sandgate.EventRunCancelled,
			fake: func(f *fakeDocker) {
				f.onCreate = func(ctx context.Context, _ int) (bool, error) {
					<-ctx.Done()
					return true, ctx.Err()
				}
			},
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				res, _ := e.Execute(ctx, job)
				return res
			}},
		{name: "start refused", want: sandgate.OutcomeError, code: sandgate.CodeContainerCreate, endedBy: sandgate.EventRunFailed,
			fake: func(f *fakeDocker) {
				f.onStart = func(int) (bool, error) { return false, errInvalid("no such binary") }
			}, run: execute},
		{name: "succeeded", want: sandgate.OutcomeSucceeded, endedBy: sandgate.EventContainerExited, run: execute},
		{name: "failed", want: sandgate.OutcomeFailed, endedBy: sandgate.EventContainerExited,
			fake: func(f *fakeDocker) { f.exitCode = 3 }, run: execute},
		{name: "timed out", want: sandgate.OutcomeTimedOut, endedBy: sandgate.EventRunTimedOut,
			fake: func(f *fakeDocker) { f.hang = true },
			cfg:  func(c *Config) { c.StopGrace = time.Millisecond },
			spec: func(s *sandgate.RunSpec) { s.TimeoutSeconds = 1 }, run: execute},
		{name: "cancelled while running", want: sandgate.OutcomeCancelled, endedBy: sandgate.EventRunCancelled,
			fake: func(f *fakeDocker) { f.hang = true },
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				started := make(chan struct{})
				var once sync.Once
				job.Started = func(string, time.Time) { once.Do(func() { close(started) }) }
				go func() {
					<-started
					e.Cancel(context.Background(), job.RunID)
				}()
				return execute(t, e, f, job)
			}},
		{name: "lost", want: sandgate.OutcomeLost, code: sandgate.CodeContainerCreate, endedBy: sandgate.EventRunLost,
			fake: func(f *fakeDocker) { f.hang = true },
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				started := make(chan string, 1)
				job.Started = func(id string, _ time.Time) { started <- id }
				go func() {
					id := <-started
					f.mu.Lock()
					delete(f.containers, id)
					f.mu.Unlock()
					e.reaper.CleanupOrphans(context.Background())
				}()
				return execute(t, e, f, job)
			}},
		{name: "adopted: no container", want: sandgate.OutcomeLost, code: sandgate.CodeContainerCreate, endedBy: sandgate.EventRunLost,
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				res, _ := e.reconciler.Adopt(context.Background(), job)
				return res
			}},
		{name: "adopted: exited meanwhile", want: sandgate.OutcomeFailed, endedBy: sandgate.EventContainerExited,
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				f.containers["c1"] = &fakeContainer{id: "c1", name: "c1", started: 1, exited: true, code: 7, labels: map[string]string{
					sandgate.LabelManaged: "true", sandgate.LabelNode: "unit", sandgate.LabelRunID: job.RunID,
				}}
				res, _ := e.reconciler.Adopt(context.Background(), job)
				return res
			}},
		{name: "command: session not open", want: sandgate.OutcomeError, code: sandgate.CodeConflict,
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				res, _ := e.Exec(context.Background(), "no-such-session", job)
				return res
			}},
		{name: "command: docker exec refused", want: sandgate.OutcomeError, code: sandgate.CodeContainerCreate, endedBy: sandgate.EventRunFailed,
			run: func(t *testing.T, e *Executor, f *fakeDocker, job sandgate.Job) sandgate.Result {
				s := e.newHandle(context.Background(), sandgate.Job{RunID: "session-1", SessionContainer: true})
				s.setContainer("session-container", e.now())
				s.setState(sandgate.StateRunning)
				if err := e.runs.add(s); err != nil {
					t.Fatal(err)
				}
				defer e.runs.remove(s)
				res, _ := e.Exec(context.Background(), "session-1", job)
				return res
			}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			f := newFakeDocker()
			if p.fake != nil {
				p.fake(f)
			}
			e, log := unitExecutor(t, f, p.cfg)
			job := unitJob(t, p.spec)
			res := p.run(t, e, f, job)
			if res.Outcome != p.want {
				t.Fatalf("outcome = %q (error %+v), want %q", res.Outcome, res.Error, p.want)
			}
			switch res.Outcome {
			case sandgate.OutcomeError, sandgate.OutcomeLost:
				if res.Error == nil || res.Error.Code != p.code || res.Error.Message == "" {
					t.Errorf("error = %+v, want code %s with a message", res.Error, p.code)
				}
			default:
				if res.Error != nil {
					t.Errorf("error = %+v, want none for outcome %s", res.Error, res.Outcome)
				}
			}
			if res.Stdout.Encoding == "" || res.Stderr.Encoding == "" || res.FinishedAt.IsZero() {
				t.Errorf("streams %+v %+v, finished %v: a result always reports both streams and its end", res.Stdout, res.Stderr, res.FinishedAt)
			}
			if p.endedBy == "" {
				return
			}
			var ends []sandgate.Event
			for _, ev := range log.events {
				if ev.RunID == job.RunID {
					switch ev.Type {
					case sandgate.EventRunFailed, sandgate.EventRunLost, sandgate.EventRunCancelled, sandgate.EventRunTimedOut, sandgate.EventContainerExited:
						ends = append(ends, ev)
					}
				}
			}
			if len(ends) == 0 || ends[len(ends)-1].Type != p.endedBy {
				t.Errorf("events %v, want the run's end recorded as %s", log.types(), p.endedBy)
			}
		})
	}
}
