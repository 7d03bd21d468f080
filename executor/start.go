package executor

import (
	"context"
	"time"

	"github.com/sandgate/sandgate"
)

// Start checks that the daemon answers, claims the node's lease on it
// (Claim: CONFLICT, not retried, while another live gateway holds the
// node), has the reaper remove the orphans a previous process of this
// node left behind, starts the warm pool, and
// then reaps every ReapInterval until ctx ends or Shutdown or Close is
// called, so ctx should live as long as the executor serves. When the
// daemon does not answer, Start returns DOCKER-UNAVAILABLE and keeps
// trying in the background: the reaper and the warm pool begin as soon as
// it answers.
func (e *Executor) Start(ctx context.Context) error {
	err := e.startOnce(ctx)
	if sandgate.ErrorCodeOf(err) != sandgate.CodeDockerUnavailable {
		return err
	}
	e.startMu.Lock()
	defer e.startMu.Unlock()
	if e.started || e.starting || e.stopped {
		return err
	}
	e.starting = true
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.startStop = stop
	go func() {
		defer stop()
		e.startWhenReachable(ctx, sctx)
	}()
	return err
}

// startWhenReachable tries Start's work again until the daemon answers,
// parent ends or the executor stops.
func (e *Executor) startWhenReachable(parent, ctx context.Context) {
	wait := 250 * time.Millisecond
	for {
		select {
		case <-parent.Done():
			return
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := e.startOnce(parent)
		if sandgate.ErrorCodeOf(err) != sandgate.CodeDockerUnavailable {
			if err != nil {
				e.log.Error("executor start", "err", err)
			} else {
				e.log.Info("the docker daemon answers: reaper and warm pool started")
			}
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// startOnce is one attempt at Start's work.
func (e *Executor) startOnce(ctx context.Context) error {
	if err := e.Ping(ctx); err != nil {
		return err
	}
	if err := e.lease.claim(ctx); err != nil {
		return err
	}
	if _, err := e.reaper.CleanupOrphans(ctx); err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodeDockerUnavailable {
			return err
		}
		// Orphans that resist removal are retried on the next pass; they
		// are no reason to refuse to serve.
		e.log.Error("orphan reaper", "err", err)
	}
	e.startMu.Lock()
	defer e.startMu.Unlock()
	if e.started || e.stopped {
		return nil
	}
	e.started = true
	// After the first reaper pass, which removes the warm containers a
	// previous process left.
	e.pool.start(e.cfg.WarmPoolCheck)
	e.reaper.start(ctx)
	return nil
}

// stopBackground stops the reaper and anything still trying to start,
// for good.
func (e *Executor) stopBackground() {
	e.startMu.Lock()
	if e.startStop != nil {
		e.startStop()
	}
	e.stopped = true
	e.startMu.Unlock()
	e.reaper.halt()
}
