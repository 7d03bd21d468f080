package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// What retention leaves of a chain's tree, and how the rest of the trail
// treats a dropped range: as known-absent. A purge records, per chain, the
// tree of the rows it drops (size, root and frontier: the roots of the
// complete subtrees the tree is made of), after making sure the stored
// tree covers them. audit_tree_hashes is never purged, so inclusion proofs
// of kept events and consistency proofs across the purge are answered as
// before; verify starts a purged chain's tree from the recorded frontier
// and so still checks every later checkpoint note's root; an inclusion
// proof or a receipt asked for what was dropped is SANDGATE-PURGED (410).

// treeFor makes sure chainID's stored tree has at least size leaves
// (storing what is missing, computed from the rows still there) and
// returns its frontier at size. errLeavesGone when rows it needs were
// dropped before their tree was stored.
func (s *Retention) treeFor(ctx context.Context, chainID string, size int64) (proof.PurgedTree, error) {
	t := proof.PurgedTree{ChainID: chainID, Size: size}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return t, err
	}
	defer tx.Rollback(ctx)
	stored, err := storedTreeSize(ctx, tx, chainID)
	if err != nil {
		return t, err
	}
	r := &treeReader{ctx: ctx, q: tx, chainID: chainID, cache: map[int64]tlog.Hash{}}
	if stored < size {
		if r, _, err = growTreeTo(ctx, tx, chainID, size); err != nil {
			return t, err
		}
	}
	hs, err := r.ReadHashes(proof.FrontierIndexes(size))
	if err != nil {
		return t, err
	}
	f, err := proof.FrontierOf(size, hs)
	if err != nil {
		return t, err
	}
	if err := tx.Commit(ctx); err != nil {
		return t, err
	}
	return proof.PurgedTreeOf(chainID, f)
}

// purgeTrees returns the trees of p's chains at their last purged seq,
// storing hashes the stored trees lack. A chain whose earlier rows were
// dropped before trees were kept has none: it is left out, and verify and
// proofs of it start at the boundary without a tree.
func (s *Retention) purgeTrees(ctx context.Context, p proof.Partition) ([]proof.PurgedTree, error) {
	var out []proof.PurgedTree
	for _, c := range p.Chains {
		t, err := s.treeFor(ctx, c.ChainID, c.LastSeq)
		if errors.Is(err, errLeavesGone) {
			s.cfg.Logger.Warn("audit: purge records no tree for a chain whose earlier rows were dropped before trees were kept",
				"chain_id", c.ChainID, "partition", p.Name, "err", err)
			continue
		}
		if err != nil {
			return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "partition %s: the tree of chain %s", p.Name, c.ChainID)
		}
		out = append(out, t)
	}
	return out, nil
}

// retentionRecords reads every retention.applied event the trail holds,
// oldest first, as recorded (not judged: verify decides which count).
func (s *trailDB) retentionRecords(ctx context.Context) ([]proof.RetentionRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT event_id::text, chain_id, seq, payload FROM audit_events WHERE type = $1 ORDER BY recorded_at, chain_id, seq`,
		string(sandgate.EventRetentionApplied))
	if err != nil {
		return nil, dbErr(err, "read retention events")
	}
	defer rows.Close()
	var out []proof.RetentionRecord
	for rows.Next() {
		var r proof.RetentionRecord
		var raw []byte
		if err := rows.Scan(&r.EventID, &r.ChainID, &r.Seq, &raw); err != nil {
			return nil, dbErr(err, "read retention events")
		}
		if json.Unmarshal(raw, &r.Payload) == nil {
			out = append(out, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err, "read retention events")
	}
	return out, nil
}

// purgedError explains that what id names (an event or a run: both are
// UUIDv7, made when it happened) is not in the trail because retention
// dropped the month it was made in: SANDGATE-PURGED with the range, or
// nil when no purge reaches its time.
func (s *trailDB) purgedError(ctx context.Context, what, id string) error {
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		return nil
	}
	sec, nsec := u.Time().UnixTime()
	at := time.Unix(sec, nsec).UTC()
	refs, err := s.retentionRecords(ctx)
	if err != nil {
		return err
	}
	var hit *proof.RetentionRecord
	for i := range refs {
		r := &refs[i]
		// The month it was made in, or any month before the newest
		// dropped: a row is recorded when it is made or later (spooled).
		if !at.Before(r.Payload.From) && at.Before(r.Payload.To) {
			hit = r
			break
		}
		if at.Before(r.Payload.To) && (hit == nil || r.Payload.To.After(hit.Payload.To)) {
			hit = r
		}
	}
	if hit == nil {
		return nil
	}
	return &sandgate.Error{Code: sandgate.CodePurged,
		Message: fmt.Sprintf("no %s %s remains in the trail: it dates from %s, and retention dropped %s (%s to %s, retention.applied event %s)",
			what, id, at.Format(time.RFC3339), hit.Payload.Partition, hit.Payload.From.Format("2006-01-02"), hit.Payload.To.Format("2006-01-02"), hit.EventID),
		Details: map[string]any{"partition": hit.Payload.Partition, "from": hit.Payload.From, "to": hit.Payload.To, "retention_event_id": hit.EventID,
			"purged": hit.Payload.Ranges(hit.EventID)}}
}

// purgedOf returns the ranges of chains retention dropped, per chain.
func (s *trailDB) purgedOf(ctx context.Context, chains map[string]bool) ([]sandgate.PurgedRange, error) {
	refs, err := s.retentionRecords(ctx)
	if err != nil {
		return nil, err
	}
	var out []sandgate.PurgedRange
	for _, r := range refs {
		for _, pr := range r.Payload.Ranges(r.EventID) {
			if chains[pr.ChainID] {
				out = append(out, pr)
			}
		}
	}
	return out, nil
}
