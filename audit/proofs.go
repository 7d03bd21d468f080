package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// The proofs the trail answers: a chain's newest checkpoint note, an
// event's inclusion in a checkpointed tree, one checkpointed tree's
// consistency with an earlier size, and the witnesses' cosignatures.

var _ sandgate.AuditProofs = (*Proofs)(nil)

func dbErr(err error, what string) error {
	return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "%s", what)
}

// noteAt returns chainID's newest checkpoint note of tree size size (0:
// of any size) with its cosignatures.
func (s *Proofs) noteAt(ctx context.Context, chainID string, size int64) (sandgate.CheckpointNote, error) {
	var cp sandgate.CheckpointNote
	cp.ChainID = chainID
	// A note is signed before its tree's hashes are all stored (the
	// writer's builder follows within milliseconds): only trees that are
	// stored are served.
	stored, err := storedTreeSize(ctx, s.pool, chainID)
	if err != nil {
		return cp, dbErr(err, "read tree size")
	}
	if size > stored {
		return cp, sandgate.Errorf(sandgate.CodeNotFound, "chain %q has no stored tree of size %d (stored: %d); retry shortly", chainID, size, stored)
	}
	q := `SELECT seq, note, created_at FROM audit_checkpoints WHERE chain_id = $1 AND note IS NOT NULL AND seq <= $2`
	args := []any{chainID, stored}
	if size > 0 {
		q += ` AND seq = $3`
		args = append(args, size)
	}
	q += ` ORDER BY id DESC LIMIT 1`
	err = s.pool.QueryRow(ctx, q, args...).Scan(&cp.TreeSize, &cp.Note, &cp.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		if size > 0 {
			return cp, sandgate.Errorf(sandgate.CodeNotFound, "chain %q has no checkpoint note at tree size %d", chainID, size)
		}
		return cp, sandgate.Errorf(sandgate.CodeNotFound, "chain %q has no checkpoint note", chainID)
	}
	if err != nil {
		return cp, dbErr(err, "read checkpoint note")
	}
	cp.CreatedAt = cp.CreatedAt.UTC()
	body, _, _ := strings.Cut(cp.Note, "\n\n")
	c, err := proof.ParseNoteText(body + "\n")
	if err != nil {
		return cp, sandgate.WrapError(sandgate.CodeInternal, err, "stored checkpoint note of chain %q", chainID)
	}
	cp.Origin, cp.RootHash = c.Origin, c.Root[:]
	// Only pinned witnesses' cosignatures are served: at most one each.
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (witness_key) signature FROM audit_cosignatures
		WHERE chain_id = $1 AND tree_size = $2 AND root_hash = $3 AND witness_key = ANY($4) ORDER BY witness_key, id`,
		chainID, cp.TreeSize, cp.RootHash, s.cfg.Witnesses)
	if err != nil {
		return cp, dbErr(err, "read cosignatures")
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return cp, dbErr(err, "read cosignatures")
		}
		cp.Cosignatures = append(cp.Cosignatures, line)
	}
	if err := rows.Err(); err != nil {
		return cp, dbErr(err, "read cosignatures")
	}
	return cp, nil
}

// defaultChain is the chain asked for, or this Store's.
func (s *Proofs) defaultChain(chainID string) (string, error) {
	if chainID != "" {
		return chainID, nil
	}
	if c := s.writer.ChainID(); c != "" {
		return c, nil
	}
	return "", sandgate.FieldError("chain", "chain is required")
}

// Checkpoint returns chainID's newest checkpoint note ("" for this
// Store's chain) with its cosignatures and the cluster root's
// endorsements of the key that signed it.
func (s *Proofs) Checkpoint(ctx context.Context, chainID string) (sandgate.CheckpointNote, error) {
	chainID, err := s.defaultChain(chainID)
	if err != nil {
		return sandgate.CheckpointNote{}, err
	}
	cp, err := s.noteAt(ctx, chainID, 0)
	if err != nil {
		return cp, err
	}
	var pub []byte
	if err := s.pool.QueryRow(ctx, `SELECT public_key FROM audit_checkpoints WHERE chain_id = $1 AND seq = $2 AND note = $3 LIMIT 1`,
		chainID, cp.TreeSize, cp.Note).Scan(&pub); err != nil {
		return cp, dbErr(err, "read the checkpoint's key")
	}
	cp.Endorsements, err = s.endorsementsOf(ctx, map[string]bool{proof.KeyID(pub): true})
	return cp, err
}

// InclusionProof proves that the event eventID is in its chain's tree of
// treeSize leaves (0: the newest checkpoint note's size).
func (s *Proofs) InclusionProof(ctx context.Context, eventID string, treeSize int64) (sandgate.InclusionProof, error) {
	var p sandgate.InclusionProof
	id, err := uuid.Parse(eventID)
	if err != nil {
		return p, sandgate.FieldError("event_id", "event_id must be a UUID")
	}
	if treeSize < 0 {
		return p, sandgate.FieldError("tree_size", "tree_size must not be negative")
	}
	err = s.pool.QueryRow(ctx, `SELECT chain_id, seq, hash FROM audit_events WHERE event_id = $1 LIMIT 1`, [16]byte(id)).
		Scan(&p.ChainID, &p.Seq, &p.EventHash)
	if errors.Is(err, pgx.ErrNoRows) {
		if gone := s.purgedError(ctx, "event", id.String()); gone != nil {
			return p, gone
		}
		return p, sandgate.Errorf(sandgate.CodeNotFound, "no event %s in the trail", eventID)
	}
	if err != nil {
		return p, dbErr(err, "read event")
	}
	p.EventID, p.LeafIndex = id.String(), p.Seq-1
	if treeSize > 0 && treeSize < p.Seq {
		return p, sandgate.FieldError("tree_size", "tree_size %d is smaller than the event's seq %d", treeSize, p.Seq)
	}
	if p.Checkpoint, err = s.noteAt(ctx, p.ChainID, treeSize); err != nil {
		return p, err
	}
	p.TreeSize = p.Checkpoint.TreeSize
	if p.TreeSize < p.Seq {
		return p, sandgate.Errorf(sandgate.CodeNotFound, "event %s (seq %d) is not yet in a checkpointed tree (newest size %d)", eventID, p.Seq, p.TreeSize)
	}
	proof, err := tlog.ProveRecord(p.TreeSize, p.LeafIndex, &treeReader{ctx: ctx, q: s.pool, chainID: p.ChainID})
	if err != nil {
		return p, dbErr(err, "prove inclusion")
	}
	p.Hashes = hashBytes(proof)
	return p, nil
}

// ConsistencyProof proves that chainID's tree of from leaves is a prefix
// of its tree of to leaves (0: the newest checkpoint note's size).
func (s *Proofs) ConsistencyProof(ctx context.Context, chainID string, from, to int64) (sandgate.ConsistencyProof, error) {
	var p sandgate.ConsistencyProof
	chainID, err := s.defaultChain(chainID)
	if err != nil {
		return p, err
	}
	if to < 0 {
		return p, sandgate.FieldError("to", "to must not be negative")
	}
	if from < 1 || (to > 0 && from > to) {
		return p, sandgate.FieldError("from", "from must be between 1 and to")
	}
	if p.Checkpoint, err = s.noteAt(ctx, chainID, to); err != nil {
		return p, err
	}
	p.ChainID, p.From, p.To = chainID, from, p.Checkpoint.TreeSize
	if from > p.To {
		return p, sandgate.FieldError("from", "from %d is larger than the newest tree size %d", from, p.To)
	}
	r := &treeReader{ctx: ctx, q: s.pool, chainID: chainID}
	proof, err := tlog.ProveTree(p.To, from, r)
	if err != nil {
		return p, dbErr(err, "prove consistency")
	}
	old, err := tlog.TreeHash(from, r)
	if err != nil {
		return p, dbErr(err, "tree hash")
	}
	p.FromRoot = old[:]
	p.Hashes = hashBytes(proof)
	return p, nil
}

func hashBytes[H ~[]tlog.Hash](hs H) [][]byte {
	out := make([][]byte, len(hs))
	for i, h := range hs {
		out[i] = bytes.Clone(h[:])
	}
	return out
}

// maxCosignedNote bounds a cosigned note taken from a witness.
const maxCosignedNote = 16 << 10

// AddCosignature checks a witness's cosignature of one of the trail's
// checkpoint notes and stores it: only a witness the operator pinned
// (Config.Witnesses), of a note under its chain's origin, once per
// witness per checkpoint.
func (s *Proofs) AddCosignature(ctx context.Context, c sandgate.Cosignature) (sandgate.CheckpointNote, error) {
	var none sandgate.CheckpointNote
	if len(c.Note) > maxCosignedNote {
		return none, sandgate.FieldError("note", "note is longer than %d bytes", maxCosignedNote)
	}
	if !s.witnesses[c.WitnessKey] {
		return none, sandgate.FieldError("witness_key", "%q is not a witness this gateway's operator pinned (SANDGATE_AUDIT_WITNESS_KEYS_FILE): its cosignatures are not taken", c.WitnessKey)
	}
	v, err := proof.NewCosignatureVerifier(c.WitnessKey)
	if err != nil {
		return none, sandgate.FieldError("witness_key", "%v", err)
	}
	n, err := note.Open([]byte(c.Note), note.VerifierList(v))
	if err != nil {
		return none, sandgate.FieldError("note", "the note carries no valid cosignature by %s: %v", v.Name(), err)
	}
	stated, err := proof.ParseNoteText(n.Text)
	if err != nil {
		return none, sandgate.FieldError("note", "%v", err)
	}
	// The origin is sandgate.<node>/<chain_id>, the node the chain's
	// writer's: a note under another origin (a rolled-back history
	// renamed, issue #29) is no checkpoint of the chain.
	chainID := stated.Origin[strings.LastIndex(stated.Origin, "/")+1:]
	var node string
	err = s.pool.QueryRow(ctx, `SELECT node FROM audit_chains WHERE chain_id = $1`, chainID).Scan(&node)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return none, dbErr(err, "find the chain")
	}
	if want := proof.Origin(node, chainID); err != nil || stated.Origin != want {
		return none, sandgate.FieldError("note", "the note's origin %q is not that of a chain of this trail (chain %s's is %q)", stated.Origin, chainID, want)
	}
	var found bool
	err = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM audit_checkpoints
		WHERE chain_id = $1 AND seq = $2 AND left(note, length($3)) = $3)`,
		chainID, stated.Size, n.Text+"\n").Scan(&found)
	if err != nil {
		return none, dbErr(err, "find checkpoint")
	}
	if !found {
		return none, sandgate.FieldError("note", "no checkpoint of this trail states %q at size %d with that root", stated.Origin, stated.Size)
	}
	line := fmt.Sprintf("— %s %s", n.Sigs[0].Name, n.Sigs[0].Base64)
	_, err = s.pool.Exec(ctx, `INSERT INTO audit_cosignatures (chain_id, tree_size, root_hash, witness, witness_key, signature)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (chain_id, tree_size, witness_key) DO NOTHING`,
		chainID, stated.Size, stated.Root[:], v.Name(), c.WitnessKey, line)
	if err != nil {
		return none, dbErr(err, "store cosignature")
	}
	return s.noteAt(ctx, chainID, stated.Size)
}

// NoteWithCosignatures returns a checkpoint's note with its witnesses'
// signature lines appended: the form witnesses and clients read.
func NoteWithCosignatures(cp sandgate.CheckpointNote) string {
	return proof.WithCosignatures(cp.Note, cp.Cosignatures)
}
