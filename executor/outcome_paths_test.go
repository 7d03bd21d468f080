package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/sandgatetest"
)

// checkOutcome holds a result to what the handle promises on every path:
// an outcome, the error that says why when it is error or lost and none
// otherwise, and, where the path decides it, the outcome wanted ("" to
// check the promise alone).
func checkOutcome(t *testing.T, what string, res sandgate.Result, want sandgate.Outcome) {
	t.Helper()
	switch {
	case res.Outcome == "":
		t.Errorf("%s: no outcome (%+v)", what, res)
	case want != "" && res.Outcome != want:
		t.Errorf("%s: outcome %s (%+v), want %s", what, res.Outcome, res.Error, want)
	case (res.Outcome == sandgate.OutcomeError || res.Outcome == sandgate.OutcomeLost) != (res.Error != nil):
		t.Errorf("%s: outcome %s with error %+v", what, res.Outcome, res.Error)
	case res.Stdout.Encoding == "" || res.FinishedAt.IsZero():
		t.Errorf("%s: the result reports no streams or no end: %+v", what, res)
	}
}

// TestRealPathsHaveOutcomes follows, on the real daemon, the paths the
// fake one cannot take (TestEveryPathHasAnOutcome takes the others): a
// run in a warm container through its agent, and the commands of a
// session through its agent and through docker exec, with the session's
// own end.
func TestRealPathsHaveOutcomes(t *testing.T) {
	ctx := context.Background()
	t.Run("warm, through the agent", func(t *testing.T) {
		ex, _ := newWarmExecutor(t, 1, nil)
		res, _ := ex.Execute(ctx, newJob(t, nil, "sh", "-c", "exit 3"))
		checkOutcome(t, "exit 3", res, sandgate.OutcomeFailed)
		waitIdle(t, ex, 1)
		res, _ = ex.Execute(ctx, newJob(t, nil, "no-such-program"))
		checkOutcome(t, "a program that is not there", res, "")
	})
	for name, agent := range map[string]bool{"a session through its agent": true, "a session through docker exec": false} {
		t.Run(name, func(t *testing.T) {
			ex, _ := newTestExecutor(t, func(c *executor.Config) {
				if agent {
					c.AgentBinary = executortest.AgentBinary(t)
				}
			})
			id := "0193" + sandgatetest.RandomHex(t, 14)
			spec, _, err := sandgate.NormalizeSession(sandgate.SessionSpec{}, id, sandgate.Defaults{})
			if err != nil {
				t.Fatal(err)
			}
			spec.TimeoutSeconds = 600
			session := sandgate.Job{RunID: id, CorrelationID: "corr-s", Principal: "alice", Team: "payments",
				Spec: spec, SessionContainer: true}
			done := executeAsync(t, ex, session)
			waitState(t, ex, id, sandgate.StateRunning)
			command := func(argv ...string) sandgate.Result {
				job := newJob(t, nil, argv...)
				job.Spec.User, job.Spec.UID, job.Spec.GID, job.Spec.Workdir = spec.User, spec.UID, spec.GID, spec.Workdir
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				res, _ := ex.Exec(cctx, id, job)
				return res
			}
			checkOutcome(t, "true", command("true"), sandgate.OutcomeSucceeded)
			checkOutcome(t, "exit 4", command("sh", "-c", "exit 4"), sandgate.OutcomeFailed)
			checkOutcome(t, "a program that is not there", command("no-such-program"), "")
			if err := ex.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
			checkOutcome(t, "the session", <-done, sandgate.OutcomeCancelled)
		})
	}
}
