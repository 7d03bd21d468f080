package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/sethvargo/go-retry"
)

// Retrier runs Docker calls under the retry policy: each attempt is
// bounded (a per-attempt timeout, unless a call says otherwise); only
// transient errors are retried, at most MaxRetries times, with the
// configured backoff and within the call's context; every retry is logged
// and reported to the caller's onRetry.
//
// This is the only place sandgate retries a Docker call. Callers must only
// pass calls that are safe to repeat: nothing here ever starts user code
// twice.
type Retrier struct {
	MaxRetries uint64
	// Backoff returns a fresh backoff for each call.
	Backoff func() retry.Backoff
	Log     *slog.Logger
}

// Do runs f under the policy; perAttempt bounds each attempt, 0 meaning
// none (for calls that legitimately wait long: a container's exit, a
// pull). onRetry, when set, is told of each retry before it happens.
func (rt Retrier) Do(ctx context.Context, op string, perAttempt time.Duration, f func(ctx context.Context) error,
	onRetry func(attempt int, wait time.Duration, err error)) error {
	attempt := 0
	var last error
	inner := retry.WithMaxRetries(rt.MaxRetries, rt.Backoff())
	b := retry.BackoffFunc(func() (time.Duration, bool) {
		next, stop := inner.Next()
		if !stop {
			rt.Log.Warn("docker call failed, retrying", "op", op, "attempt", attempt, "wait", next, "err", last)
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
		if err != nil && Transient(ctx, err) {
			last = err
			return retry.RetryableError(err)
		}
		return err
	})
}
