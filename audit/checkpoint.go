package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"time"

	"github.com/sandgate/sandgate/audit/proof"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Checkpoints: the writer signs its chain's head every CheckpointEvery
// events or CheckpointInterval, also when idle, and a final one at a clean
// close (proof.Checkpoint is what it signs).

// committedRecs is committed for records just committed fresh, which
// join the chain's tree.
func (w *writer) committedRecs(recs []*sealed) {
	w.addLeaves(recs)
	w.committed(int64(len(recs)))
}

func (w *writer) committed(n int64) {
	w.sinceCP += n
	if w.sinceCP >= int64(w.cfg.CheckpointEvery) {
		w.checkpoint(false)
	}
}

// maybeCheckpoint signs the head when N events or T have passed since the
// last checkpoint; when idle that re-signs the same head with a new time.
func (w *writer) maybeCheckpoint() {
	if len(w.pending) > 0 || w.headSeq == 0 || w.fenced.Load() != nil {
		return
	}
	if w.sinceCP >= int64(w.cfg.CheckpointEvery) || w.cfg.Clock().Sub(w.lastCP) >= w.cfg.CheckpointInterval {
		w.checkpoint(false)
	}
}

func (w *writer) checkpoint(final bool) {
	if !w.ensureKey() {
		return
	}
	if w.cpUncertain {
		// The last insert failed and may still have landed: sign whatever
		// checkpoint Postgres holds last, so the checkpoints stay chained.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var sig []byte
		err := w.s.ctl.QueryRow(ctx, `SELECT signature FROM audit_checkpoints WHERE chain_id = $1 ORDER BY id DESC LIMIT 1`, w.chainID).Scan(&sig)
		cancel()
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			w.markDown(err)
			return
		}
		w.lastSig, w.cpUncertain = sig, false
	}
	cp := proof.SignCheckpoint(w.key, w.chainID, w.headSeq, w.headHash, w.cfg.Clock(), final, w.lastSig)
	sig, _ := hex.DecodeString(cp.Signature)
	pub := w.key.Public().(ed25519.PublicKey)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var noteText *string
	if !w.cfg.noTree {
		root, err := w.treeRoot(ctx)
		if err != nil {
			// A tree that cannot be grown (rows missing, Postgres away)
			// must not stop the checkpoints verify relies on: sign
			// without a note (the builder catches up next time).
			w.logf("audit: checkpoint signed without a note", "chain_id", w.chainID, "err", err)
		} else if n, err := proof.SignNote(w.key, proof.Origin(w.cfg.Node, w.chainID), w.headSeq, root); err != nil {
			w.logf("audit: checkpoint note not signed", "chain_id", w.chainID, "err", err)
		} else {
			noteText = &n
		}
	}
	_, err := w.s.ctl.Exec(ctx, `INSERT INTO audit_checkpoints
		(chain_id, seq, head_hash, created_at, final, prev_signature, signature, key_id, public_key, note)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		w.chainID, w.headSeq, w.headHash, cp.CreatedAt, final, nilIfEmpty(w.lastSig), sig, cp.KeyID, []byte(pub), noteText)
	if err != nil {
		if isFenced(err) {
			w.fence(err)
			return
		}
		w.cpUncertain = !definitelyNotCommitted(err)
		w.markDown(err)
		return
	}
	w.lastSig = sig
	w.lastCP = cp.CreatedAt
	w.sinceCP = 0
}

// isPgError reports whether the server answered err.
func isPgError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
