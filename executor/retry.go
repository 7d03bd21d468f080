package executor

import (
	"context"
	"log/slog"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/sandgate/sandgate"
)

// retrier runs Docker calls under the retry policy: each attempt is
// bounded (CallTimeout, unless a call says otherwise); only transient
// errors are retried, at most MaxRetries times, with the configured
// backoff and within the call's context; every retry is logged and
// reported to onRetry.
//
// This is the only place sandgate retries anything. Callers must only pass
// calls that are safe to repeat: nothing here ever starts user code twice.
type retrier struct {
	cfg *Config
	log *slog.Logger
}

// do runs f under the policy; perAttempt bounds each attempt, 0 meaning
// none (for calls that legitimately wait long: a container's exit, a
// pull). onRetry, when set, is told of each retry before it happens.
func (rt retrier) do(ctx context.Context, op string, perAttempt time.Duration, f func(ctx context.Context) error,
	onRetry func(attempt int, wait time.Duration, err error)) error {
	attempt := 0
	var last error
	inner := retry.WithMaxRetries(rt.cfg.MaxRetries, rt.cfg.Backoff())
	b := retry.BackoffFunc(func() (time.Duration, bool) {
		next, stop := inner.Next()
		if !stop {
			rt.log.Warn("docker call failed, retrying", "op", op, "attempt", attempt, "wait", next, "err", last)
			if onRetry != nil {
				onRetry(attempt, next, last)
			}
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

// call runs one Docker call of run r (nil for none) under the retry
// policy with the CallTimeout bound; each retry of a run's call is also an
// executor.retry event.
func (e *Executor) call(ctx context.Context, r *run, op string, f func(ctx context.Context) error) error {
	return e.callWith(ctx, r, op, e.cfg.CallTimeout, f)
}

// callWith is call with another bound per attempt; 0 means none.
func (e *Executor) callWith(ctx context.Context, r *run, op string, perAttempt time.Duration, f func(ctx context.Context) error) error {
	var onRetry func(int, time.Duration, error)
	if r != nil {
		onRetry = func(attempt int, wait time.Duration, err error) {
			e.emit(r, sandgate.EventExecutorRetry, map[string]any{
				"operation": op,
				"attempt":   attempt,
				"wait_ms":   wait.Milliseconds(),
				"error":     err.Error(),
			})
		}
	}
	return retrier{cfg: &e.cfg, log: e.log}.do(ctx, op, perAttempt, f, onRetry)
}
