package audit

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
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

// purgedTree is a chain's tree where retention dropped its rows: Size
// leaves (the last purged seq), their Root, and the Frontier hashes
// (base64, in frontierIndexes order), from which the tree's later roots
// follow without the dropped leaves.
type purgedTree struct {
	ChainID  string   `json:"chain_id"`
	Size     int64    `json:"tree_size"`
	Root     string   `json:"root"`
	Frontier []string `json:"frontier"`
}

// frontierOf decodes t into a tree of t.Size leaves, checking that its
// frontier makes its root.
func (t purgedTree) state() (*treeState, error) {
	idx := frontierIndexes(t.Size)
	if len(idx) != len(t.Frontier) {
		return nil, fmt.Errorf("tree of %d leaves: %d frontier hashes, want %d", t.Size, len(t.Frontier), len(idx))
	}
	st := &treeState{size: t.Size, frontier: make(map[int64]tlog.Hash, len(idx))}
	for i, x := range idx {
		raw, err := base64.StdEncoding.DecodeString(t.Frontier[i])
		if err != nil || len(raw) != tlog.HashSize {
			return nil, fmt.Errorf("frontier hash %d is not base64 of 32 bytes", i)
		}
		st.frontier[x] = tlog.Hash(raw)
	}
	root, err := tlog.TreeHash(t.Size, st)
	if err != nil {
		return nil, err
	}
	if b64(root[:]) != t.Root {
		return nil, fmt.Errorf("the frontier makes root %s, the record says %s", b64(root[:]), t.Root)
	}
	return st, nil
}

// treeFor makes sure chainID's stored tree has at least size leaves
// (storing what is missing, computed from the rows still there) and
// returns its frontier at size. errLeavesGone when rows it needs were
// dropped before their tree was stored.
func (s *Store) treeFor(ctx context.Context, chainID string, size int64) (purgedTree, error) {
	t := purgedTree{ChainID: chainID, Size: size}
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
	idx := frontierIndexes(size)
	hs, err := r.ReadHashes(idx)
	if err != nil {
		return t, err
	}
	root, err := tlog.TreeHash(size, r)
	if err != nil {
		return t, err
	}
	if err := tx.Commit(ctx); err != nil {
		return t, err
	}
	t.Root = b64(root[:])
	for _, h := range hs {
		t.Frontier = append(t.Frontier, b64(h[:]))
	}
	return t, nil
}

// purgeTrees returns the trees of p's chains at their last purged seq,
// storing hashes the stored trees lack. A chain whose earlier rows were
// dropped before trees were kept has none: it is left out, and verify and
// proofs of it start at the boundary without a tree.
func (s *Store) purgeTrees(ctx context.Context, p Partition) ([]purgedTree, error) {
	var out []purgedTree
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

// purgedRanges are the ranges a retention.applied payload records, one per
// chain.
func purgedRanges(p archivedPayload, eventID string) []sandgate.PurgedRange {
	out := make([]sandgate.PurgedRange, 0, len(p.Chains))
	for _, c := range p.Chains {
		out = append(out, sandgate.PurgedRange{ChainID: c.ChainID, Partition: p.Partition, FirstSeq: c.FirstSeq, LastSeq: c.LastSeq,
			LastHash: c.LastHash, From: p.From, To: p.To, EventID: eventID})
	}
	return out
}

// notePurged adds the ranges of an honoured retention.applied event to
// the report, once each.
func (v *verifier) notePurged(p archivedPayload, eventID string) {
	if v.purgedSeen == nil {
		v.purgedSeen = map[string]bool{}
	}
	for _, r := range purgedRanges(p, eventID) {
		key := r.EventID + "\x00" + r.ChainID
		if v.purgedSeen[key] {
			continue
		}
		v.purgedSeen[key] = true
		v.report.Purged = append(v.report.Purged, r)
	}
	sort.Slice(v.report.Purged, func(i, j int) bool {
		a, b := v.report.Purged[i], v.report.Purged[j]
		if a.ChainID != b.ChainID {
			return a.ChainID < b.ChainID
		}
		return a.LastSeq < b.LastSeq
	})
}

// seedTree starts chain's tree at a purge boundary from the frontier the
// purge recorded, so the notes of later checkpoints are checked against
// the kept rows.
func (v *verifier) seedTree(chain string, a anchorPoint) {
	if a.Tree == nil {
		return
	}
	c := v.chain(chain)
	c.tree = &treeState{size: a.Tree.size, frontier: maps.Clone(a.Tree.frontier)}
}

// retentionRecords reads every retention.applied event the trail holds,
// oldest first, as recorded (not judged: verify decides which count).
func (s *Store) retentionRecords(ctx context.Context) ([]retentionRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT event_id::text, chain_id, seq, payload FROM audit_events WHERE type = $1 ORDER BY recorded_at, chain_id, seq`,
		string(sandgate.EventRetentionApplied))
	if err != nil {
		return nil, dbErr(err, "read retention events")
	}
	defer rows.Close()
	var out []retentionRef
	for rows.Next() {
		var r retentionRef
		var raw []byte
		if err := rows.Scan(&r.id, &r.chain, &r.seq, &raw); err != nil {
			return nil, dbErr(err, "read retention events")
		}
		if json.Unmarshal(raw, &r.p) == nil {
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
func (s *Store) purgedError(ctx context.Context, what, id string) error {
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
	var hit *retentionRef
	for i := range refs {
		r := &refs[i]
		// The month it was made in, or any month before the newest
		// dropped: a row is recorded when it is made or later (spooled).
		if !at.Before(r.p.From) && at.Before(r.p.To) {
			hit = r
			break
		}
		if at.Before(r.p.To) && (hit == nil || r.p.To.After(hit.p.To)) {
			hit = r
		}
	}
	if hit == nil {
		return nil
	}
	return &sandgate.Error{Code: sandgate.CodePurged,
		Message: fmt.Sprintf("no %s %s remains in the trail: it dates from %s, and retention dropped %s (%s to %s, retention.applied event %s)",
			what, id, at.Format(time.RFC3339), hit.p.Partition, hit.p.From.Format("2006-01-02"), hit.p.To.Format("2006-01-02"), hit.id),
		Details: map[string]any{"partition": hit.p.Partition, "from": hit.p.From, "to": hit.p.To, "retention_event_id": hit.id,
			"purged": purgedRanges(hit.p, hit.id)}}
}

// purgedOf returns the ranges of chains retention dropped, per chain.
func (s *Store) purgedOf(ctx context.Context, chains map[string]bool) ([]sandgate.PurgedRange, error) {
	refs, err := s.retentionRecords(ctx)
	if err != nil {
		return nil, err
	}
	var out []sandgate.PurgedRange
	for _, r := range refs {
		for _, pr := range purgedRanges(r.p, r.id) {
			if chains[pr.ChainID] {
				out = append(out, pr)
			}
		}
	}
	return out, nil
}

// hexHash decodes a hex event hash, nil when malformed.
func hexHash(s string) []byte {
	h, err := hex.DecodeString(s)
	if err != nil || len(h) != HashSize {
		return nil
	}
	return h
}
