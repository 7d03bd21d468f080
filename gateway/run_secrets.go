package gateway

import (
	"context"
	"time"

	"github.com/sandgate/sandgate"
)

// revealTimeout bounds the read of a run's secrets before it starts.
const revealTimeout = 10 * time.Second

// executeWithSecrets hands job to the executor with the values of the
// secrets its decision bound (Enforcement.Secrets), revealed now, just
// before the container is made, and held nowhere but in the job the
// executor gives its egress proxy. A secret removed since the admission,
// or one that no longer opens, fails the run before anything starts:
// run.failed naming the field, never a value.
func (b base) executeWithSecrets(ctx context.Context, job sandgate.Job) (sandgate.Result, error) {
	if len(job.Enforcement.Secrets) > 0 {
		secrets, err := b.reveal(ctx, job.Enforcement.Secrets)
		if err != nil {
			return b.notStarted(job, err), err
		}
		job.Secrets = secrets
	}
	return b.d.Executor.Execute(ctx, job)
}

func (b base) reveal(ctx context.Context, bindings []sandgate.SecretBinding) ([]sandgate.RunSecret, error) {
	if b.d.Secrets == nil {
		return nil, sandgate.FieldError("secrets", "secrets are not configured on this gateway")
	}
	rctx, cancel := context.WithTimeout(ctx, revealTimeout)
	defer cancel()
	secrets, err := b.d.Secrets.Reveal(rctx, bindings)
	if err != nil && sandgate.ErrorCodeOf(err) == sandgate.CodeInternal {
		b.log.Error("a run's secrets could not be revealed", "error", err)
	}
	return secrets, err
}

// notStarted is the result of a job that failed before the executor had
// it, recorded as run.failed.
func (b base) notStarted(job sandgate.Job, err error) sandgate.Result {
	now := b.now()
	res := sandgate.Result{Outcome: sandgate.OutcomeError, FinishedAt: now,
		Error: &sandgate.ErrorInfo{Code: sandgate.ErrorCodeOf(err), Message: sandgate.ErrorMessageOf(err)}}
	if job.Stdout != nil {
		res.Stdout = job.Stdout.Output()
	}
	if job.Stderr != nil {
		res.Stderr = job.Stderr.Output()
	}
	b.d.Recorder.Emit(sandgate.NewRunFailed(sandgate.JobSubject(job, b.cfg.Node), now, res, res.Error.Message,
		map[string]any{"error_code": string(res.Error.Code)}))
	return res
}
