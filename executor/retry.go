package executor

import (
	"context"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/sandgate/sandgate"
)

// call runs one Docker call under the retry policy: each attempt is
// bounded by CallTimeout; only transient errors are retried, at most
// MaxRetries times, with the configured backoff and within ctx; every retry
// is logged and, when r is not nil, emitted as an executor.retry event.
//
// This is the only place sandgate retries anything. Callers must only pass
// calls that are safe to repeat: nothing here ever starts user code twice.
func (e *Executor) call(ctx context.Context, r *run, op string, f func(ctx context.Context) error) error {
	return e.callWith(ctx, r, op, e.cfg.CallTimeout, f)
}

// callWith is call with another bound per attempt; 0 means none, for calls
// that legitimately wait long (waiting for a container's exit, a pull).
func (e *Executor) callWith(ctx context.Context, r *run, op string, perAttempt time.Duration, f func(ctx context.Context) error) error {
	attempt := 0
	var last error
	inner := retry.WithMaxRetries(e.cfg.MaxRetries, e.cfg.Backoff())
	b := retry.BackoffFunc(func() (time.Duration, bool) {
		next, stop := inner.Next()
		if !stop {
			e.retrying(r, op, attempt, next, last)
		}
		return next, stop
	})
	return retry.Do(ctx, b, func(ctx context.Context) error {
		attempt++
		actx, cancel := ctx, context.CancelFunc(func() {})
		if perAttempt > 0 {
			actx, cancel = context.WithTimeout(ctx, perAttempt)
		}
		err := f(actx)
		cancel()
		if err != nil && transient(ctx, err) {
			last = err
			return retry.RetryableError(err)
		}
		return err
	})
}

// retrying reports a retry about to happen.
func (e *Executor) retrying(r *run, op string, attempt int, wait time.Duration, err error) {
	e.log.Warn("docker call failed, retrying", "op", op, "attempt", attempt, "wait", wait, "err", err)
	if r == nil {
		return
	}
	e.emit(r, sandgate.EventExecutorRetry, map[string]any{
		"operation": op,
		"attempt":   attempt,
		"wait_ms":   wait.Milliseconds(),
		"error":     err.Error(),
	})
}
