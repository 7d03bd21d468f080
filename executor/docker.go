package executor

import (
	"context"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// dockerAPI is every Docker call the executor makes: the union of the
// narrow interfaces its parts declare where they make them (containerAPI
// for a run's container, execAPI for session commands, reaperAPI,
// reconcileAPI, resolveAPI, networkAPI, volumeAPI, poolAPI, probeAPI,
// statsAPI, leaseAPI, infoAPI, pingAPI). *client.Client satisfies it; New hands
// each part the view it declared, and unit tests fake those.
type dockerAPI interface {
	containerAPI
	execAPI
	reaperAPI
	reconcileAPI
	resolveAPI
	networkAPI
	volumeAPI
	poolAPI
	probeAPI
	statsAPI
	leaseAPI
	infoAPI
	pingAPI
}

// calls runs a part's Docker calls under the one retry policy
// (daemon.Retrier): each attempt bounded by CallTimeout unless a call says
// otherwise, only transient errors retried, at most MaxRetries times.
type calls struct {
	rt      daemon.Retrier
	timeout time.Duration
}

func newCalls(cfg Config, log *slog.Logger) calls {
	return calls{rt: daemon.Retrier{MaxRetries: cfg.MaxRetries, Backoff: cfg.Backoff, Log: log}, timeout: cfg.CallTimeout}
}

// do runs f with the CallTimeout bound on each attempt. A run's trail t
// (nil for none) records each retry as an executor.retry event.
func (c calls) do(ctx context.Context, t *trail, op string, f func(ctx context.Context) error) error {
	return c.with(ctx, t, op, c.timeout, f)
}

// with is do with another bound per attempt; 0 means none.
func (c calls) with(ctx context.Context, t *trail, op string, perAttempt time.Duration, f func(ctx context.Context) error) error {
	var onRetry func(int, time.Duration, error)
	if t != nil {
		onRetry = func(attempt int, wait time.Duration, err error) { t.retry(op, attempt, wait, err) }
	}
	return c.rt.Do(ctx, op, perAttempt, f, onRetry)
}

// cleanup is a context for the calls that must happen even after the run
// was cancelled: a fresh deadline, long enough for every retry.
func (c calls) cleanup(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.timeout*time.Duration(c.rt.MaxRetries+1))
}
