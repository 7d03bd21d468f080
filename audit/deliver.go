package audit

import (
	"errors"
	"time"

	"github.com/sandgate/sandgate/audit/proof"
)

// While Postgres is away, lifecycle events are sealed into the spool (or
// kept in memory when it is full); when Postgres returns, the pending
// records are delivered in chain order and the spool is emptied.

// spoolEvents seals lifecycle events into the spool. When the spool has no
// room it leaves them queued and returns false.
func (w *writer) spoolEvents(events []proof.Canonical, reqs []*request) bool {
	if len(events) == 0 {
		return true
	}
	if w.spoolFull.Load() || w.memOnly {
		w.requeue(reqs)
		return false
	}
	oldSeq, oldHash := w.headSeq, w.headHash
	recs := w.seal(events)
	if err := w.sp.append(recs); err != nil {
		w.headSeq, w.headHash = oldSeq, oldHash
		w.spoolFull.Store(true)
		if !errors.Is(err, errSpoolFull) {
			w.cfg.Logger.Error("audit: spool write failed; events kept in memory", "err", err)
		} else {
			w.cfg.Logger.Error("audit: spool full; events kept in memory and readiness fails", "max_bytes", w.cfg.SpoolMaxBytes)
		}
		w.requeue(reqs)
		return false
	}
	w.pending = append(w.pending, recs...)
	w.pendingN.Store(int64(len(w.pending)))
	w.spooledN.Add(int64(len(recs)))
	return true
}

// addPending keeps sealed records for delivery, in the spool when it has
// room and in memory otherwise.
func (w *writer) addPending(recs []*sealed) {
	w.spooledN.Add(int64(len(recs)))
	if !w.memOnly && !w.spoolFull.Load() {
		if err := w.sp.append(recs); err == nil {
			w.pending = append(w.pending, recs...)
			w.pendingN.Store(int64(len(w.pending)))
			return
		}
		w.spoolFull.Store(true)
	}
	w.memOnly = true
	w.pending = append(w.pending, recs...)
	w.pendingN.Store(int64(len(w.pending)))
}

// ok notes that Postgres took a batch with nothing pending: the spool is
// empty, so it has room again.
func (w *writer) ok() {
	w.spoolFull.Store(false)
	w.memOnly = false
	w.dbDown = false
}

func (w *writer) markDown(err error) {
	w.s.downAt.Store(time.Now().UnixNano())
	if !w.dbDown {
		w.cfg.Logger.Warn("audit: postgres unreachable; spooling lifecycle events", "err", err)
	}
	w.dbDown = true
	w.lastAttempt = time.Now()
}

// deliver sends pending records to Postgres in chain order. Unless force,
// a writer that found Postgres away waits RetryInterval between attempts.
func (w *writer) deliver(force bool) {
	if w.fenced.Load() != nil {
		return // held: the database refuses them
	}
	if w.dbDown && !force && time.Since(w.lastAttempt) < w.cfg.RetryInterval && !w.syncWaiting() {
		return
	}
	var own int64
	for len(w.pending) > 0 {
		chunk := w.pending[:min(len(w.pending), w.cfg.MaxBatch)]
		if err := w.insert(chunk, true); err != nil {
			if isFenced(err) {
				w.fence(err)
			}
			if errors.Is(err, errTrailBehind) {
				if w.behind.Load() == nil {
					w.cfg.Logger.Error("audit: the trail in Postgres is behind this writer; spooled events are held and admissions refused until an operator acts (docs/operations.md)", "err", err)
				}
				w.behind.Store(&err)
			}
			w.markDown(err)
			return
		}
		w.redeliveredN.Add(w.moved)
		w.alreadyN.Add(int64(len(chunk)) - w.moved)
		for _, r := range chunk {
			if r.ChainID == w.chainID {
				own++
			}
		}
		w.addLeaves(chunk)
		w.pending = w.pending[len(chunk):]
		w.pendingN.Store(int64(len(w.pending)))
	}
	w.pending = nil
	w.pendingN.Store(0)
	w.behind.Store(nil)
	if err := w.sp.reset(); err != nil {
		w.cfg.Logger.Error("audit: cannot empty the delivered spool; it will be redelivered (idempotently)", "err", err)
	} else {
		w.spoolFull.Store(false)
	}
	w.memOnly = false
	if w.dbDown {
		w.cfg.Logger.Info("audit: postgres is back; spooled events delivered", "chain_id", w.chainID)
	}
	w.dbDown = false
	w.committed(own)
}
