package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// The key registry (proof.KeyRecord): each node's checkpoint key is
// registered in audit_keys when the node first uses it, before it signs
// its first checkpoint, through audit_register_key (the application role
// cannot write the table itself), and in the same transaction the
// registration becomes an event of the trail.

// Keys returns the key registry, in registration order.
func (s *Reader) Keys(ctx context.Context) ([]proof.KeyRecord, error) { return s.keys(ctx) }

// keys reads the key registry, in registration order.
func (s *trailDB) keys(ctx context.Context) ([]proof.KeyRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT node, key_id, public_key, first_used_at, coalesce(chain_id, ''),
		coalesce(replaces, ''), endorsement, source FROM audit_keys ORDER BY id`)
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the key registry")
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (proof.KeyRecord, error) {
		var k proof.KeyRecord
		var pub, endorsement []byte
		err := r.Scan(&k.Node, &k.KeyID, &pub, &k.FirstUsedAt, &k.ChainID, &k.Replaces, &endorsement, &k.Source)
		k.PublicKey, k.Endorsement, k.FirstUsedAt = hex.EncodeToString(pub), hex.EncodeToString(endorsement), k.FirstUsedAt.UTC()
		return k, err
	})
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the key registry")
	}
	return keys, nil
}

// checkSchema makes sure the database has what this writer needs: the key
// registry and the database-stamped recorded_at of migration 5.
func (s *Store) checkSchema(ctx context.Context) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regprocedure('audit_register_key(text,bytea,text,bytea)') IS NOT NULL`).Scan(&ok); err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the audit schema")
	}
	if !ok {
		return errors.New("audit: the database schema is older than this sandgate (no audit key registry): run sandgate migrate up")
	}
	return nil
}

// RegisterKey registers this Store's signing key for its node now (a
// rotation endorsed by Config.PreviousSigningKeyFile when the node had
// another key), records it in the trail unless it is there already, signs
// a checkpoint, and returns the registration. A writer does this by itself
// before its first checkpoint; sandgate audit rotate-key calls it. The
// error is AUDIT-UNAVAILABLE when the trail cannot take it now.
func (s *Store) RegisterKey(ctx context.Context) (proof.KeyRecord, error) {
	if s.w == nil {
		return proof.KeyRecord{}, sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is read-only")
	}
	r := &request{key: true, done: make(chan error, 1), ctx: ctx}
	if !s.w.enqueue(r) {
		return proof.KeyRecord{}, sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is closed")
	}
	select {
	case err := <-r.done:
		if err != nil {
			return proof.KeyRecord{}, err
		}
		return s.w.lastKey, nil
	case <-ctx.Done():
		return proof.KeyRecord{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, ctx.Err(), "the key registration did not finish in time")
	}
}

// registerNow answers a RegisterKey request in the writer.
func (w *writer) registerNow(r *request) {
	if len(w.pending) > 0 || w.broken != nil {
		r.done <- unavailable(errors.Join(w.broken, errors.New("postgres unreachable; events are being spooled")))
		return
	}
	w.keyReady = false
	if !w.ensureKey() {
		r.done <- unavailable(errors.New("the signing key could not be registered (see the log)"))
		return
	}
	w.checkpoint(false)
	r.done <- nil
}

// endorsement returns the previous key's signature over the rotation to
// this writer's key, or nil without a previous key.
func (w *writer) endorsement() []byte {
	prev := w.s.prevKey
	if prev == nil {
		return nil
	}
	pub := w.key.Public().(ed25519.PublicKey)
	return ed25519.Sign(prev, proof.KeyRotationMessage(w.cfg.Node, proof.KeyID(prev.Public().(ed25519.PublicKey)), pub))
}

// ensureKey makes sure, once per writer, that its key is registered for
// its node and that the trail records the registration, and the root's
// endorsement of the key when the Store has one: all in one transaction,
// the events appended to this chain so that the checkpoint about to be
// signed covers them. It returns false when that cannot be done now; the
// checkpoint then waits.
func (w *writer) ensureKey() bool {
	if w.keyReady {
		return true
	}
	if len(w.pending) > 0 || w.broken != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := w.s.ctl.Begin(ctx)
	if err != nil {
		w.markDown(err)
		return false
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rec, status, recorded, err := w.registerIn(ctx, tx)
	if err != nil {
		w.keyFailed(err)
		return false
	}
	var evs []proof.Canonical
	if !recorded {
		ev := sandgate.NewAuditKeyRegistered(sandgate.NodeSubject(w.cfg.Node), time.Time{}, rec.Payload())
		if rec.Replaces != "" {
			ev = sandgate.NewAuditKeyRotated(sandgate.NodeSubject(w.cfg.Node), time.Time{}, rec.Payload())
		}
		evs = append(evs, w.s.prepare(ev))
	}
	if e := w.s.cfg.Endorsement; e != nil {
		var there bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM audit_events WHERE type = $1 AND payload->>'key_id' = $2 AND payload->>'signature' = $3)`,
			string(sandgate.EventAuditKeyEndorsed), e.KeyID, e.Signature).Scan(&there); err != nil {
			w.keyFailed(err)
			return false
		}
		if !there {
			evs = append(evs, w.s.prepare(sandgate.NewAuditKeyEndorsed(sandgate.NodeSubject(w.cfg.Node), time.Time{}, e.Payload())))
		}
	}
	if !w.appendIn(ctx, tx, evs) {
		return false
	}
	w.keyReady, w.lastKey = true, rec
	if !recorded {
		w.cfg.Logger.Info("audit: checkpoint key registered", "status", status, "node", rec.Node, "key_id", rec.KeyID,
			"replaces", rec.Replaces, "source", rec.Source)
	}
	return true
}

// registerIn registers the writer's key for its node in tx and returns
// the registration, the registry's status, and whether the trail already
// records it.
func (w *writer) registerIn(ctx context.Context, tx pgx.Tx) (rec proof.KeyRecord, status string, recorded bool, err error) {
	pub := w.key.Public().(ed25519.PublicKey)
	var keyID string
	err = tx.QueryRow(ctx, `SELECT key_id, status, recorded FROM audit_register_key($1, $2, $3, $4)`,
		w.cfg.Node, []byte(pub), w.chainID, nilIfEmpty(w.endorsement())).Scan(&keyID, &status, &recorded)
	if err != nil {
		return rec, status, recorded, err
	}
	var pk, endorsement []byte
	var chain, replaces *string
	err = tx.QueryRow(ctx, `SELECT public_key, first_used_at, chain_id, replaces, endorsement, source
		FROM audit_keys WHERE node = $1 AND key_id = $2`, w.cfg.Node, keyID).
		Scan(&pk, &rec.FirstUsedAt, &chain, &replaces, &endorsement, &rec.Source)
	rec.Node, rec.KeyID, rec.PublicKey, rec.Endorsement = w.cfg.Node, keyID, hex.EncodeToString(pk), hex.EncodeToString(endorsement)
	rec.FirstUsedAt = rec.FirstUsedAt.UTC()
	if chain != nil {
		rec.ChainID = *chain
	}
	if replaces != nil {
		rec.Replaces = *replaces
	}
	return rec, status, recorded, err
}

// appendIn seals evs into the chain, inserts them in tx and commits it.
// It returns false when the trail did not take them now: the head is
// rolled back, or (a commit whose outcome is unknown) they wait in the
// spool for an idempotent redelivery.
func (w *writer) appendIn(ctx context.Context, tx pgx.Tx, evs []proof.Canonical) bool {
	if len(evs) == 0 {
		if err := tx.Commit(ctx); err != nil {
			w.keyFailed(err)
			return false
		}
		return true
	}
	oldSeq, oldHash := w.headSeq, w.headHash
	recs := w.seal(evs)
	rows, err := w.eventRows(recs)
	if err == nil {
		err = w.copyFresh(ctx, tx, recs, rows)
	}
	if err != nil {
		w.headSeq, w.headHash = oldSeq, oldHash
		w.keyFailed(err)
		return false
	}
	if err := tx.Commit(ctx); err != nil {
		committed, known := w.resolve(recs)
		switch {
		case committed:
		case known:
			w.headSeq, w.headHash = oldSeq, oldHash
			w.keyFailed(err)
			return false
		default:
			// Delivered (idempotently) with the spool; the registration,
			// if it did not land, is made again on the next checkpoint.
			w.markDown(err)
			w.addPending(recs)
			return false
		}
	}
	w.sinceCP += int64(len(recs))
	return true
}

// keyFailed notes that the key could not be registered now.
func (w *writer) keyFailed(err error) {
	if !w.dbDown {
		w.logf("audit: cannot register the checkpoint key now; checkpoints wait for it", "err", err)
	}
	w.markDown(err)
}
