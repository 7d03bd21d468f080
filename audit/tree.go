package audit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"
)

// Each chain is also an RFC 6962 Merkle tree whose leaves are its events'
// hash values in seq order: leaf i (from 0) is the event at seq i+1, and
// its leaf hash is SHA-256(0x00 ‖ event hash) (tlog.RecordHash). The
// tree's stored hashes (tlog.StoredHashIndex numbering) are kept in
// audit_tree_hashes. The writer adds them when it signs a checkpoint, in
// the checkpoint's transaction, for every leaf committed since the last
// one: the events' own commits are left as they were (a decision's commit
// is one statement), and a tree is only ever stored up to a size a
// checkpoint note signs.

// LeafHash returns the tree leaf hash of an event hash.
func LeafHash(eventHash []byte) tlog.Hash { return tlog.RecordHash(eventHash) }

// querier is what a tree reader reads through: a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// treeReader reads a chain's stored hashes (tlog.HashReader), first from
// cache.
type treeReader struct {
	ctx     context.Context
	q       querier
	chainID string
	cache   map[int64]tlog.Hash
}

// ReadHashes returns the stored hashes at indexes, in their order.
func (r *treeReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var miss []int64
	for i, x := range indexes {
		h, ok := r.cache[x]
		if !ok {
			miss = append(miss, x)
			continue
		}
		out[i] = h
	}
	if len(miss) == 0 {
		return out, nil
	}
	rows, err := r.q.Query(r.ctx, `SELECT index, hash FROM audit_tree_hashes WHERE chain_id = $1 AND index = ANY($2)`, r.chainID, miss)
	if err != nil {
		return nil, fmt.Errorf("read tree hashes: %w", err)
	}
	got := make(map[int64]tlog.Hash, len(miss))
	for rows.Next() {
		var x int64
		var h []byte
		if err := rows.Scan(&x, &h); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read tree hashes: %w", err)
		}
		got[x] = tlog.Hash(h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read tree hashes: %w", err)
	}
	for i, x := range indexes {
		if _, ok := r.cache[x]; ok {
			continue
		}
		h, ok := got[x]
		if !ok {
			return nil, fmt.Errorf("chain %s: tree hash %d is not stored", r.chainID, x)
		}
		out[i] = h
		if r.cache != nil {
			r.cache[x] = h
		}
	}
	return out, nil
}

// storedTreeSize returns how many leaves of chainID's tree are stored: the
// n whose StoredHashCount is one more than the largest stored index.
func storedTreeSize(ctx context.Context, q querier, chainID string) (int64, error) {
	var maxIndex *int64
	if err := q.QueryRow(ctx, `SELECT max(index) FROM audit_tree_hashes WHERE chain_id = $1`, chainID).Scan(&maxIndex); err != nil {
		return 0, fmt.Errorf("read tree size: %w", err)
	}
	if maxIndex == nil {
		return 0, nil
	}
	count := *maxIndex + 1
	lo, hi := int64(0), count // StoredHashCount(n) >= n
	for lo < hi {
		mid := lo + (hi-lo)/2
		if tlog.StoredHashCount(mid) < count {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if tlog.StoredHashCount(lo) != count {
		return 0, fmt.Errorf("chain %s: %d stored tree hashes make no whole tree", chainID, count)
	}
	return lo, nil
}

// maxTreeLeaves caps the leaves a writer keeps in memory for the next
// checkpoint; past it, the tree catches up from audit_events.
const maxTreeLeaves = 1 << 16

// treeChunk is how many leaves one catch-up step reads and stores.
const treeChunk = 50_000

// addLeaves remembers the hashes of records just committed, for the
// tree's next growth. Records that do not follow the ones remembered
// (a redelivery of older ones) make the tree read audit_events instead.
func (w *writer) addLeaves(recs []*sealed) {
	if w.cfg.noTree || len(recs) == 0 {
		return
	}
	if len(w.leaves) > 0 && recs[0].Seq != w.leavesFrom+int64(len(w.leaves)) || len(w.leaves)+len(recs) > maxTreeLeaves {
		w.leaves, w.leavesFrom = nil, 0
		return
	}
	if len(w.leaves) == 0 {
		w.leavesFrom = recs[0].Seq
	}
	for _, r := range recs {
		w.leaves = append(w.leaves, r.Hash)
	}
}

// growTree stores, in tx, the tree hashes of the chain's leaves up to
// headSeq and returns the tree's root.
func (w *writer) growTree(ctx context.Context, tx pgx.Tx) (tlog.Hash, error) {
	size := w.treeSize
	if size < 0 {
		n, err := storedTreeSize(ctx, tx, w.chainID)
		if err != nil {
			return tlog.Hash{}, err
		}
		size = n
	}
	r := &treeReader{ctx: ctx, q: tx, chainID: w.chainID, cache: map[int64]tlog.Hash{}}
	if size > w.headSeq {
		return tlog.Hash{}, fmt.Errorf("chain %s: the stored tree has %d leaves, the chain %d", w.chainID, size, w.headSeq)
	}
	useMem := len(w.leaves) > 0 && w.leavesFrom <= size+1 && w.leavesFrom+int64(len(w.leaves))-1 == w.headSeq
	for size < w.headSeq {
		var leaves [][]byte
		if useMem {
			leaves = w.leaves[size+1-w.leavesFrom:]
		} else {
			var err error
			if leaves, err = readLeaves(ctx, tx, w.chainID, size, min(w.headSeq, size+treeChunk)); err != nil {
				return tlog.Hash{}, err
			}
		}
		rows := make([][]any, 0, 2*len(leaves))
		for i, leaf := range leaves {
			n := size + int64(i)
			hs, err := tlog.StoredHashesForRecordHash(n, LeafHash(leaf), r)
			if err != nil {
				return tlog.Hash{}, fmt.Errorf("chain %s leaf %d: %w", w.chainID, n, err)
			}
			x := tlog.StoredHashIndex(0, n)
			for j, h := range hs {
				r.cache[x+int64(j)] = h
				rows = append(rows, []any{w.chainID, x + int64(j), h[:]})
			}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_tree_hashes"}, []string{"chain_id", "index", "hash"}, pgx.CopyFromRows(rows)); err != nil {
			return tlog.Hash{}, fmt.Errorf("store tree hashes: %w", err)
		}
		size += int64(len(leaves))
		if !useMem {
			// A long catch-up keeps only what the next chunk may need.
			r.cache = map[int64]tlog.Hash{}
		}
	}
	return tlog.TreeHash(size, r)
}

// readLeaves returns the event hashes of seq from+1 to to of chainID.
func readLeaves(ctx context.Context, q querier, chainID string, from, to int64) ([][]byte, error) {
	rows, err := q.Query(ctx, `SELECT seq, hash FROM audit_events WHERE chain_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq`, chainID, from, to)
	if err != nil {
		return nil, fmt.Errorf("read chain hashes: %w", err)
	}
	defer rows.Close()
	out := make([][]byte, 0, to-from)
	next := from + 1
	for rows.Next() {
		var seq int64
		var h []byte
		if err := rows.Scan(&seq, &h); err != nil {
			return nil, fmt.Errorf("read chain hashes: %w", err)
		}
		if seq != next {
			return nil, fmt.Errorf("chain %s: seq %d missing", chainID, next)
		}
		out = append(out, h)
		next++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read chain hashes: %w", err)
	}
	if next != to+1 {
		return nil, fmt.Errorf("chain %s: rows after seq %d missing", chainID, next-1)
	}
	return out, nil
}
