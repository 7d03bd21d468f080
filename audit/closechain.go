package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// ChainClosure is a dead node's chain closed by a survivor: the head it
// signed a final checkpoint over.
type ChainClosure struct {
	ChainID  string `json:"chain_id"`
	Node     string `json:"closed_node"`
	Seq      int64  `json:"seq"`
	HeadHash string `json:"head_hash"`
	KeyID    string `json:"key_id"`
}

// keyWait bounds how long CloseChainsOf waits for this Store's key to be
// registered: the writer registers it before its first checkpoint.
const keyWait = 30 * time.Second

// CloseChainsOf closes every chain of node dead (its own and its decision
// chain) whose newest checkpoint is not a final one over its head: it
// signs a final checkpoint of the chain's head with this Store's key and
// records audit.chain_closed in this Store's chain, saying who closed
// whose chain. Verify then vouches for the dead chain's tail (the key is
// in the registry) instead of reporting its checkpoint stale. A chain
// already closed at its head is left as it is.
//
// Call it once, from the one survivor that took dead over. A closed
// chain is fenced (fence.go): events the dead node still holds, or
// records, are refused by the database and stay in its spool. It returns
// AUDIT-UNAVAILABLE when Postgres does not answer or this Store's key is
// not registered in time.
func (s *Takeover) CloseChainsOf(ctx context.Context, dead, reason string) ([]ChainClosure, error) {
	if s.writer.key == nil || s.writer.w == nil {
		return nil, errors.New("audit: a read-only store cannot close chains")
	}
	if dead == s.cfg.Node {
		return nil, errors.New("audit: a node does not close its own chain")
	}
	pub := s.writer.key.Public().(ed25519.PublicKey)
	keyID := proof.KeyID(pub)
	if err := s.awaitKey(ctx, keyID); err != nil {
		return nil, err
	}
	rows, err := s.ctl.Query(ctx, `SELECT chain_id, node FROM audit_chains WHERE node = $1 OR node = $1 || '-decisions' ORDER BY chain_id`, dead)
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "list the chains of node %s", dead)
	}
	type chain struct{ id, node string }
	var chains []chain
	for rows.Next() {
		var c chain
		if err := rows.Scan(&c.id, &c.node); err != nil {
			rows.Close()
			return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "list the chains of node %s", dead)
		}
		chains = append(chains, c)
	}
	rows.Close()
	var out []ChainClosure
	for _, c := range chains {
		cl, closed, err := s.closeChain(ctx, c.id, dead)
		if err != nil {
			return out, err
		}
		if !closed {
			continue
		}
		subject := sandgate.NodeSubject(s.cfg.Node)
		subject.Actor = s.cfg.Node
		err = s.writer.Record(ctx, sandgate.NewAuditChainClosed(subject, s.cfg.Clock(), map[string]any{
			"chain_id": cl.ChainID, "closed_node": dead, "seq": cl.Seq, "head_hash": cl.HeadHash,
			"signed_by_node": s.cfg.Node, "key_id": cl.KeyID, "reason": reason,
		}))
		if err != nil {
			return out, err
		}
		out = append(out, cl)
	}
	return out, nil
}

// awaitKey waits until keyID is in the key registry.
func (s *Takeover) awaitKey(ctx context.Context, keyID string) error {
	deadline := time.Now().Add(keyWait)
	for {
		var n int
		err := s.ctl.QueryRow(ctx, `SELECT count(*) FROM audit_keys WHERE key_id = $1`, keyID).Scan(&n)
		if err == nil && n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("key %s is not registered", keyID)
			}
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "this node's checkpoint key is not registered yet")
		}
		select {
		case <-ctx.Done():
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, ctx.Err(), "wait for this node's key")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// closeChain signs a final checkpoint of chain's head unless its newest
// checkpoint is one already.
func (s *Takeover) closeChain(ctx context.Context, chainID, dead string) (ChainClosure, bool, error) {
	fail := func(err error) (ChainClosure, bool, error) {
		return ChainClosure{}, false, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "close chain %s", chainID)
	}
	tx, err := s.ctl.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// One closer at a time per chain, whoever calls.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('sandgate-close-chain:' || $1, 0))`, chainID); err != nil {
		return fail(err)
	}
	var seq int64
	var head []byte
	err = tx.QueryRow(ctx, `SELECT seq, hash FROM audit_events WHERE chain_id = $1 ORDER BY seq DESC LIMIT 1`, chainID).Scan(&seq, &head)
	if errors.Is(err, pgx.ErrNoRows) {
		return ChainClosure{}, false, nil
	}
	if err != nil {
		return fail(err)
	}
	var lastSig []byte
	var lastSeq int64
	var lastFinal bool
	err = tx.QueryRow(ctx, `SELECT signature, seq, final FROM audit_checkpoints WHERE chain_id = $1 ORDER BY id DESC LIMIT 1`, chainID).
		Scan(&lastSig, &lastSeq, &lastFinal)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fail(err)
	}
	if err == nil && lastFinal && lastSeq == seq {
		return ChainClosure{}, false, nil
	}
	// Closing fences: the dead node's writer, should it come back, is
	// refused past this head (a takeover fenced it already, at the same
	// head, since nothing gets past a fence).
	if _, err := tx.Exec(ctx, `INSERT INTO audit_fences (chain_id, seq, fenced_by, reason) VALUES ($1, $2, $3, $4)
		ON CONFLICT (chain_id) DO NOTHING`, chainID, seq, s.cfg.Node, "closed by node "+s.cfg.Node); err != nil {
		return fail(err)
	}
	cp := proof.SignCheckpoint(s.writer.key, chainID, seq, head, s.cfg.Clock(), true, lastSig)
	sig, _ := hex.DecodeString(cp.Signature)
	pub := s.writer.key.Public().(ed25519.PublicKey)
	if _, err := tx.Exec(ctx, `INSERT INTO audit_checkpoints
		(chain_id, seq, head_hash, created_at, final, prev_signature, signature, key_id, public_key)
		VALUES ($1, $2, $3, $4, true, $5, $6, $7, $8)`,
		chainID, seq, head, cp.CreatedAt, nilIfEmpty(lastSig), sig, cp.KeyID, []byte(pub)); err != nil {
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	return ChainClosure{ChainID: chainID, Node: dead, Seq: seq, HeadHash: hex.EncodeToString(head), KeyID: cp.KeyID}, true, nil
}
