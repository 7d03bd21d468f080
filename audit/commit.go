package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// Group commit: the writer seals a batch into its chain and commits it in
// one transaction, answers each Record, and when the commit fails tells a
// batch that certainly did not land (spooled, head rolled back) from one
// that may have (kept as sealed, for an idempotent redelivery).

// seal assigns the next seq numbers and hashes to events.
func (w *writer) seal(events []proof.Canonical) []*sealed {
	now := w.cfg.Clock()
	out := make([]*sealed, 0, len(events))
	for i := range events {
		c := &events[i]
		body := c.Body(now)
		seq := w.headSeq + 1
		h := proof.ChainHash(w.headHash, w.chainID, seq, body)
		out = append(out, &sealed{
			Event: c.Event, ChainID: w.chainID, Seq: seq, RecordedAt: proof.CanonicalTime(now),
			Body: body, PrevHash: w.headHash, Hash: h, payload: c.PayloadJSON(),
		})
		w.headSeq, w.headHash = seq, h
	}
	return out
}

func unavailable(err error) error {
	return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "audit trail cannot commit")
}

// commit writes batch to Postgres, or to the spool when Postgres is away.
// It returns false when it could do neither (the spool is full), leaving
// the lifecycle events queued.
func (w *writer) commit(batch []*request) bool {
	defer w.settle()
	if len(batch) == 1 && batch[0].key {
		w.registerNow(batch[0])
		return true
	}
	if len(batch) == 1 && batch[0].also != nil {
		w.commitWith(batch[0])
		return true
	}
	var all, emits []proof.Canonical
	var syncs, rest []*request
	for _, r := range batch {
		if r.done != nil && r.ctx != nil && r.ctx.Err() != nil {
			// The caller gave up and was told AUDIT-UNAVAILABLE: do not
			// record a decision it will not act on.
			r.done <- unavailable(r.ctx.Err())
			continue
		}
		all = append(all, r.events...)
		if r.done == nil {
			emits = append(emits, r.events...)
			rest = append(rest, r)
		} else {
			syncs = append(syncs, r)
		}
	}
	if len(all) == 0 {
		return true
	}
	failSyncs := func(err error) {
		for _, r := range syncs {
			r.done <- unavailable(err)
		}
	}
	if w.broken != nil {
		failSyncs(w.broken)
		w.requeue(rest)
		return false
	}
	if w.fenced.Load() != nil {
		// Nothing more is committed on a fenced chain: lifecycle events
		// are held in the spool, decisions refused.
		failSyncs(w.fencedErr())
		return w.spoolEvents(emits, rest)
	}
	if len(w.pending) > 0 {
		// Postgres is away (or the spool is not yet delivered): decisions
		// cannot be committed; lifecycle events join the spool.
		failSyncs(errors.New("postgres unreachable; events are being spooled"))
		return w.spoolEvents(emits, rest)
	}
	oldSeq, oldHash := w.headSeq, w.headHash
	recs := w.seal(all)
	err := w.insert(recs, false)
	if err == nil {
		w.ok()
		for _, r := range syncs {
			r.done <- nil
		}
		w.committedRecs(recs)
		return true
	}
	committed, known := false, definitelyNotCommitted(err)
	if !known {
		// A broken connection leaves the outcome open; a fresh one may
		// settle it.
		committed, known = w.resolve(recs)
	}
	if committed {
		w.ok()
		for _, r := range syncs {
			r.done <- nil
		}
		w.committedRecs(recs)
		return true
	}
	if isFenced(err) {
		w.fence(err)
	}
	w.markDown(err)
	if known {
		failSyncs(err)
	} else {
		failSyncs(fmt.Errorf("%w: %w", sandgate.ErrCommitUncertain, err))
	}
	if known {
		w.headSeq, w.headHash = oldSeq, oldHash
		return w.spoolEvents(emits, rest)
	}
	// The commit may have happened: keep the batch exactly as sealed (the
	// decisions too) so that a redelivery is idempotent and the chain stays
	// gapless.
	w.logf("audit: commit outcome unknown; batch spooled for idempotent redelivery", "err", err, "events", len(recs))
	w.addPending(recs)
	return true
}

// commitWith commits a Record whose events go with a statement of its own
// (retention's DROP): both or neither. It is never spooled. When the
// outcome cannot be learned the writer stops taking events, since the
// chain's head is unknown.
func (w *writer) commitWith(r *request) {
	if r.ctx != nil && r.ctx.Err() != nil {
		r.done <- unavailable(r.ctx.Err())
		return
	}
	if w.fenced.Load() != nil {
		r.done <- unavailable(w.fencedErr())
		return
	}
	if len(w.pending) > 0 || w.broken != nil {
		r.done <- unavailable(cmp.Or(w.broken, errors.New("postgres unreachable; events are being spooled")))
		return
	}
	oldSeq, oldHash := w.headSeq, w.headHash
	recs := w.seal(r.events)
	err := w.insertWith(recs, false, r.also)
	if err == nil {
		r.done <- nil
		w.committedRecs(recs)
		return
	}
	committed, known := false, definitelyNotCommitted(err)
	if !known {
		committed, known = w.resolve(recs)
	}
	switch {
	case committed:
		r.done <- nil
		w.committedRecs(recs)
	case known:
		w.headSeq, w.headHash = oldSeq, oldHash
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && !errors.Is(err, errChainAdvanced) {
			// The statement itself was refused: say why, not "unavailable".
			r.done <- sandgate.WrapError(sandgate.CodeConflict, err, "refused by the database")
			return
		}
		r.done <- unavailable(err)
	default:
		w.broken = fmt.Errorf("the outcome of a commit is unknown (%v): restart to learn the chain's head", err)
		w.cfg.Logger.Error("audit: commit outcome unknown; this writer takes no more events", "err", err)
		r.done <- unavailable(w.broken)
	}
}

// resolve asks Postgres, on a new connection, whether recs were
// committed; known is false when it cannot tell.
func (w *writer) resolve(recs []*sealed) (committed, known bool) {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.Event.ID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int
	if err := w.s.ctl.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE event_id = ANY($1::text[]::uuid[])`, ids).Scan(&n); err != nil {
		return false, false
	}
	switch n {
	case len(recs):
		return true, true
	case 0:
		return false, true
	}
	return false, false
}

// definitelyNotCommitted reports whether err proves the statement did not
// commit: the server refused it, or nothing reached the server.
func definitelyNotCommitted(err error) bool {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	var before notCommitted
	if errors.As(err, &before) || errors.As(err, &pgErr) || errors.As(err, &connErr) {
		return true
	}
	return pgconn.SafeToRetry(err)
}

// notCommitted marks an error that happened before COMMIT was sent: the
// transaction certainly did not commit.
type notCommitted struct{ err error }

func (e notCommitted) Error() string { return e.err.Error() }

func (e notCommitted) Unwrap() error { return e.err }
