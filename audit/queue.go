package audit

import (
	"context"
	"time"

	"github.com/sandgate/sandgate"
)

// The writer's queue. Producers append requests (Emit and Record at once,
// Queue within the backlog bound) and wake the writer, which takes them in
// batches of up to MaxBatch events and puts back what it could not settle.

// enqueue adds r to the queue; it returns false when the writer is closed.
func (w *writer) enqueue(r *request) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		if r.done == nil {
			// Never silently: the log keeps the event.
			w.cfg.Logger.Error("audit: event emitted after Close; not in the trail", "event", r.events)
		}
		return false
	}
	w.push(r)
	return true
}

// push appends r to the queue and wakes the writer. The caller holds mu,
// which push releases.
func (w *writer) push(r *request) {
	w.queue = append(w.queue, r)
	w.queueN += len(r.events)
	w.mu.Unlock()
	w.wake()
}

// wake tells the writer goroutine that the queue has work.
func (w *writer) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// enqueueWithin is enqueue for a producer that waits for room: while
// limit or more events are queued, or twice that many are queued or being
// committed, it waits for the writer to take or settle some, or for ctx.
// So a producer that calls it cannot outrun the trail by more than 2×limit
// events, however fast it answers. The batch being committed counts only
// against the larger bound: producers fill the queue while a commit runs
// and stall for what of it is left when the queue is full, not for all of
// it; and a writer that cannot commit, and puts its batch back, does not
// let them add more each time it tries.
func (w *writer) enqueueWithin(ctx context.Context, r *request, limit int) error {
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is closed")
		}
		if w.queueN < limit && w.queueN+w.inflight < 2*limit {
			w.push(r)
			return nil
		}
		if w.room == nil {
			w.room = make(chan struct{})
		}
		room := w.room
		w.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, ctx.Err(),
				"the audit trail is %d events behind and did not catch up in time", limit)
		}
	}
}

// settle records that the events taken for a commit are settled:
// committed, spooled, failed or put back in the queue (requeue counts
// those). It releases the producers waiting for room, as taking events
// from the queue does.
func (w *writer) settle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight = 0
	w.releaseWaiters()
}

// releaseWaiters wakes enqueueWithin's waiters to look again. The caller
// holds mu.
func (w *writer) releaseWaiters() {
	if w.room != nil {
		close(w.room)
		w.room = nil
	}
}

// take removes up to MaxBatch events' worth of requests from the queue,
// lingering FlushInterval for more when only lifecycle events came.
func (w *writer) take() []*request {
	var batch []*request
	n, sync := 0, false
	grab := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		taken := n
		i := 0
		for ; i < len(w.queue); i++ {
			r := w.queue[i]
			if len(batch) > 0 && (n+len(r.events) > w.cfg.MaxBatch || r.alone() || batch[0].alone()) {
				break
			}
			batch = append(batch, r)
			n += len(r.events)
			sync = sync || r.done != nil
		}
		w.queue = w.queue[i:]
		if len(w.queue) == 0 {
			w.queue = nil
		}
		if n > taken {
			w.queueN -= n - taken
			w.inflight += n - taken
			w.releaseWaiters()
		}
	}
	grab()
	if len(batch) == 0 || sync || w.cfg.FlushInterval <= 0 || n >= w.cfg.MaxBatch {
		return batch
	}
	deadline := time.NewTimer(w.cfg.FlushInterval)
	defer deadline.Stop()
	for !sync && n < w.cfg.MaxBatch {
		select {
		case <-w.notify:
			grab()
		case <-deadline.C:
			grab()
			return batch
		case <-w.closing:
			return batch
		}
	}
	return batch
}

// requeue puts batch back at the front of the queue, in order.
func (w *writer) requeue(batch []*request) {
	w.mu.Lock()
	w.queue = append(append([]*request(nil), batch...), w.queue...)
	for _, r := range batch {
		w.queueN += len(r.events)
		w.inflight -= len(r.events)
	}
	w.mu.Unlock()
}

func (w *writer) syncWaiting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.queue {
		if r.done != nil {
			return true
		}
	}
	return false
}

// queueSnapshot returns the requests still queued (for tests and stats).
func (w *writer) queueSnapshot() []*request {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*request(nil), w.queue...)
}

// queuedEvents returns how many events wait for Postgres: those the queued
// requests hold and those sealed but not yet delivered (spooled, or kept
// in memory when the spool is full).
func (w *writer) queuedEvents() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.pendingN.Load()) + w.queueN
}

// queued returns how many requests wait for the writer.
func (w *writer) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}
