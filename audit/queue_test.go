package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestQueueBoundsTheBacklog: producers that only Queue never have more
// than MaxBacklog events waiting for the writer, nor twice as many with
// those in its commit, however many of them push at once, and every event
// they queued is in the trail.
func TestQueueBoundsTheBacklog(t *testing.T) {
	dsn, db := newDB(t)
	const limit = 16
	s := testStore(t, dsn, func(c *Config) { c.MaxBacklog = limit; c.MaxBatch = 64 })
	const producers, each = 8, 100
	var worst, worstQueued atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.w.mu.Lock()
			q, n := int64(s.w.queueN), int64(s.w.queueN+s.w.inflight)
			s.w.mu.Unlock()
			if n > worst.Load() {
				worst.Store(n)
			}
			if q > worstQueued.Load() {
				worstQueued.Store(q)
			}
		}
	}()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				if err := s.Queue(context.Background(), lifecycle(i, fmt.Sprintf("q-%d", p))); err != nil {
					t.Errorf("Queue: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	if q := worstQueued.Load(); q > limit {
		t.Errorf("%d events were queued; MaxBacklog is %d", q, limit)
	}
	if w := worst.Load(); w > 2*limit {
		t.Errorf("%d events were queued or being committed; MaxBacklog is %d", w, limit)
	}
	t.Logf("largest backlog seen: %d queued, %d with the commit's; MaxBacklog %d", worstQueued.Load(), worst.Load(), limit)
	sandgatetest.WaitFor(t, "every queued event committed", 10*time.Second, func() bool {
		return count(t, db, "SELECT count(*) FROM audit_events") == producers*each
	})
	if rep, err := s.Verifier().Verify(context.Background(), sandgate.VerifyRange{}); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
}

// TestQueueWaitsWhileTheTrailIsStuck: with Postgres away and the spool
// full, the trail makes no progress; Queue then waits, answers
// AUDIT-UNAVAILABLE when its context ends (and that event is not
// written), and a Queue still waiting goes through once Postgres returns.
func TestQueueWaitsWhileTheTrailIsStuck(t *testing.T) {
	requirePGSocket(t)
	_, db := newDB(t)
	p := newProxy(t, pgSocket)
	s := testStore(t, proxiedDSN(t, db, p), func(c *Config) { c.SpoolMaxBytes = 8192; c.MaxBacklog = 32 })
	p.cut()
	const emitted = 200
	for i := range emitted {
		s.Emit(lifecycle(i, "stuck"))
	}
	sandgatetest.WaitFor(t, "the spool to fill", 10*time.Second, func() bool { return s.w.spoolFull.Load() })

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := s.Queue(ctx, lifecycle(0, "given-up"))
	cancel()
	if !isCode(err, sandgate.CodeAuditUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Queue while the trail is stuck = %v, want AUDIT-UNAVAILABLE after the deadline", err)
	}

	queued := make(chan error, 1)
	go func() { queued <- s.Queue(context.Background(), lifecycle(0, "waited")) }()
	select {
	case err := <-queued:
		t.Fatalf("Queue returned %v while the trail was stuck", err)
	case <-time.After(200 * time.Millisecond):
	}
	p.restore()
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("Queue after Postgres returned = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Queue still waits after Postgres returned")
	}
	sandgatetest.WaitFor(t, "all events delivered", 10*time.Second, func() bool {
		return count(t, db, "SELECT count(*) FROM audit_events") == emitted+1
	})
	if n := count(t, db, "SELECT count(*) FROM audit_events WHERE run_id = 'given-up'"); n != 0 {
		t.Errorf("%d events of the Queue that gave up are in the trail", n)
	}
	if n := count(t, db, "SELECT count(*) FROM audit_events WHERE run_id = 'waited'"); n != 1 {
		t.Errorf("%d events of the Queue that waited are in the trail, want 1", n)
	}
	if rep, err := s.Verifier().Verify(context.Background(), sandgate.VerifyRange{}); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
}
