package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"sort"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// Run receipts: a run's events with their canonical bodies, each with its
// inclusion proof in a checkpointed tree of its chain, the checkpoint
// notes and the keys that signed them. VerifyReceipt checks one with
// nothing else: no database, no network.

// ReceiptFormat names the receipt format.
const ReceiptFormat = sandgate.ReceiptFormat

// Receipt is one run's proof of record (sandgate.Receipt: the CLI and the
// API hand out the same document).
type Receipt = sandgate.Receipt

// ReceiptEvent is one event of a receipt.
type ReceiptEvent = sandgate.ReceiptEvent

// ReceiptCheckpoint is a chain's checkpoint note in a receipt.
type ReceiptCheckpoint = sandgate.ReceiptCheckpoint

// Receipt builds the receipt of runID from the trail: each of its events
// with an inclusion proof in its chain's newest checkpointed tree, and
// the root endorsements of the keys that signed the notes. NOT-FOUND when
// the run has no events, has not ended (proof.IsRunEnd: a receipt shows
// the run's end), or one is not yet under a checkpoint note (the next
// comes within the checkpoint interval); TOO-LARGE past the events a
// receipt holds.
func (s *Proofs) Receipt(ctx context.Context, runID string) (Receipt, error) {
	r := Receipt{Format: ReceiptFormat, RunID: runID, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	if runID == "" {
		return r, sandgate.FieldError("run_id", "run_id is required")
	}
	rows, err := s.pool.Query(ctx, `SELECT event_id::text, type, chain_id, seq, body, prev_hash, hash
		FROM audit_events WHERE run_id = $1 ORDER BY recorded_at, chain_id, seq`, runID)
	if err != nil {
		return r, dbErr(err, "read the run's events")
	}
	for rows.Next() {
		var e ReceiptEvent
		var body, prev, h []byte
		if err := rows.Scan(&e.EventID, &e.Type, &e.ChainID, &e.Seq, &body, &prev, &h); err != nil {
			rows.Close()
			return r, dbErr(err, "read the run's events")
		}
		e.Body, e.PrevHash, e.Hash, e.LeafIndex = string(body), hex.EncodeToString(prev), hex.EncodeToString(h), e.Seq-1
		r.Events = append(r.Events, e)
		if len(r.Events) > proof.MaxReceiptEvents {
			rows.Close()
			return r, sandgate.Errorf(sandgate.CodeTooLarge, "run %s has more than %d events: more than a receipt holds", runID, proof.MaxReceiptEvents)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return r, dbErr(err, "read the run's events")
	}
	if len(r.Events) == 0 {
		if gone := s.purgedError(ctx, "event of run", runID); gone != nil {
			return r, gone
		}
		return r, sandgate.Errorf(sandgate.CodeNotFound, "no events of run %q in the trail", runID)
	}
	notes := map[string]sandgate.CheckpointNote{}
	keys, signers := map[string]bool{}, map[string]bool{}
	for i := range r.Events {
		e := &r.Events[i]
		cp, ok := notes[e.ChainID]
		if !ok {
			if cp, err = s.noteAt(ctx, e.ChainID, 0); err != nil {
				return r, err
			}
			var pub []byte
			if err := s.pool.QueryRow(ctx, `SELECT public_key FROM audit_checkpoints WHERE chain_id = $1 AND seq = $2 AND note = $3 LIMIT 1`,
				e.ChainID, cp.TreeSize, cp.Note).Scan(&pub); err != nil {
				return r, dbErr(err, "read the checkpoint's key")
			}
			vkey, err := proof.NoteVerifierKey(cp.Origin, ed25519.PublicKey(pub))
			if err != nil {
				return r, sandgate.WrapError(sandgate.CodeInternal, err, "verifier key of %s", cp.Origin)
			}
			keys[vkey] = true
			signers[proof.KeyID(pub)] = true
			notes[e.ChainID] = cp
			r.Checkpoints = append(r.Checkpoints, ReceiptCheckpoint{ChainID: e.ChainID, Note: NoteWithCosignatures(cp)})
		}
		if e.Seq > cp.TreeSize {
			return r, sandgate.Errorf(sandgate.CodeNotFound,
				"event %s (chain %s seq %d) is not yet under a checkpoint note (newest size %d); retry after the next checkpoint",
				e.EventID, e.ChainID, e.Seq, cp.TreeSize)
		}
		proof, err := tlog.ProveRecord(cp.TreeSize, e.LeafIndex, &treeReader{ctx: ctx, q: s.pool, chainID: e.ChainID})
		if err != nil {
			return r, dbErr(err, "prove inclusion")
		}
		e.TreeSize = cp.TreeSize
		for _, h := range proof {
			e.Proof = append(e.Proof, base64.StdEncoding.EncodeToString(h[:]))
		}
	}
	if !slices.ContainsFunc(r.Events, func(e ReceiptEvent) bool { return proof.IsRunEnd(e.Type) }) {
		return r, sandgate.Errorf(sandgate.CodeNotFound, "run %s has not ended: its receipt shows its end, and is made once that is recorded", runID)
	}
	for k := range keys {
		r.Keys = append(r.Keys, k)
	}
	sort.Strings(r.Keys)
	if r.Endorsements, err = s.endorsementsOf(ctx, signers); err != nil {
		return r, err
	}
	chains := map[string]bool{}
	for c := range notes {
		chains[c] = true
	}
	// What retention dropped of these chains: events of the run recorded
	// there (a run that spans a month's end) are known-absent.
	if r.Purged, err = s.purgedOf(ctx, chains); err != nil {
		return r, err
	}
	return r, nil
}

// endorsementsOf returns the trail's root endorsements of the keys with
// the IDs given.
func (s *Proofs) endorsementsOf(ctx context.Context, keyIDs map[string]bool) ([]sandgate.KeyEndorsement, error) {
	all, err := s.endorsements(ctx)
	if err != nil {
		return nil, err
	}
	var out []sandgate.KeyEndorsement
	for _, e := range all {
		if keyIDs[e.KeyID] {
			out = append(out, sandgate.KeyEndorsement(e))
		}
	}
	return out, nil
}
