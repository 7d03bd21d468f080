package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Checkpoints: signed statements of a chain's head. The writer signs its
// chain's head every CheckpointEvery events or CheckpointInterval, also
// when idle, and a final one at a clean close.

// Checkpoint is a signed statement of a chain's head: after seq events the
// chain's hash was HeadHash, at CreatedAt. Each checkpoint also signs the
// previous checkpoint's signature of the same chain, so checkpoints form a
// chain of their own.
type Checkpoint struct {
	ChainID       string    `json:"chain_id"`
	Seq           int64     `json:"seq"`
	HeadHash      string    `json:"head_hash"`
	CreatedAt     time.Time `json:"created_at"`
	Final         bool      `json:"final"`
	PrevSignature string    `json:"prev_signature"`
	Signature     string    `json:"signature"`
	KeyID         string    `json:"key_id"`
	PublicKey     string    `json:"public_key"`
	// Note is the checkpoint as a signed note of the chain's Merkle tree
	// (see note.go), when the writer kept the tree.
	Note string `json:"note,omitempty"`
}

// CheckpointMessage returns the bytes a checkpoint's signature covers:
//
//	sandgate-checkpoint-v1\n chain_id\n seq\n hex(head_hash)\n
//	created_at (RFC 3339, UTC, microseconds)\n final\n hex(prev_signature)
//
// (fields separated by single newlines, no trailing newline).
func CheckpointMessage(chainID string, seq int64, headHash []byte, createdAt time.Time, final bool, prevSig []byte) []byte {
	return fmt.Appendf(nil, "sandgate-checkpoint-v1\n%s\n%d\n%x\n%s\n%t\n%x",
		chainID, seq, headHash, pgTime(createdAt).Format(timeLayout), final, prevSig)
}

// signCheckpoint returns a checkpoint of the head signed with key.
func signCheckpoint(key ed25519.PrivateKey, chainID string, seq int64, head []byte, at time.Time, final bool, prevSig []byte) Checkpoint {
	at = pgTime(at)
	sig := ed25519.Sign(key, CheckpointMessage(chainID, seq, head, at, final, prevSig))
	pub := key.Public().(ed25519.PublicKey)
	return Checkpoint{
		ChainID:       chainID,
		Seq:           seq,
		HeadHash:      hex.EncodeToString(head),
		CreatedAt:     at,
		Final:         final,
		PrevSignature: hex.EncodeToString(prevSig),
		Signature:     hex.EncodeToString(sig),
		KeyID:         KeyID(pub),
		PublicKey:     hex.EncodeToString(pub),
	}
}

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
	cp := signCheckpoint(w.key, w.chainID, w.headSeq, w.headHash, w.cfg.Clock(), final, w.lastSig)
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
		} else if n, err := SignNote(w.key, Origin(w.cfg.Node, w.chainID), w.headSeq, root); err != nil {
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
