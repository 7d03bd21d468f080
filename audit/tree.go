package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate/audit/proof"
)

// Each chain is also an RFC 6962 Merkle tree whose leaves are its events'
// hash values in seq order: leaf i (from 0) is the event at seq i+1, and
// its leaf hash is SHA-256(0x00 ‖ event hash) (tlog.RecordHash). The
// tree's stored hashes (tlog.StoredHashIndex numbering) are kept in
// audit_tree_hashes, a run of consecutive ones per row. The writer
// computes them from the tree's right edge, kept in memory, as it commits
// events, and signs each checkpoint note with the root computed the same
// way; a builder goroutine beside it stores the runs, in order
// (proof.Frontier).
// The events' own commits are left as they were (a decision's commit is
// one statement). After a restart, or when hashes were lost, the writer
// catches the stored tree up from audit_events before its next note
// (growTreeTo).

// querier is what a tree reader reads through: a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readHashesSQL reads stored hashes by index: for each, the row whose run
// holds it, and its 32 bytes in the run.
const readHashesSQL = `SELECT x, substring(t.hashes FROM ((x - t.start_index) * 32 + 1)::int FOR 32)
FROM unnest($2::bigint[]) AS x
CROSS JOIN LATERAL (SELECT start_index, end_index, hashes FROM audit_tree_hashes
	WHERE chain_id = $1 AND start_index <= x ORDER BY start_index DESC LIMIT 1) t
WHERE x < t.end_index`

// treeRow is one audit_tree_hashes row: the run of stored hashes from
// index start.
func treeRow(chainID string, start int64, hs []tlog.Hash) []any {
	b := make([]byte, 0, len(hs)*tlog.HashSize)
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return []any{chainID, start, start + int64(len(hs)), b}
}

// treeColumns are the columns treeRow fills.
var treeColumns = []string{"chain_id", "start_index", "end_index", "hashes"}

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
	rows, err := r.q.Query(r.ctx, readHashesSQL, r.chainID, miss)
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
// n whose StoredHashCount is the end of the last run stored.
func storedTreeSize(ctx context.Context, q querier, chainID string) (int64, error) {
	var end *int64
	if err := q.QueryRow(ctx, `SELECT end_index FROM audit_tree_hashes WHERE chain_id = $1 ORDER BY start_index DESC LIMIT 1`, chainID).Scan(&end); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("read tree size: %w", err)
	}
	if end == nil {
		return 0, nil
	}
	count := *end
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

// treeChunk is how many leaves one catch-up step reads and stores.
const treeChunk = 50_000

// treeBuilder owns a writer's tree, off the writer's goroutine, which
// only hands it the hashes of the events it committed: a hasher goroutine
// keeps the tree's frontier, computes each event's stored hashes, answers
// the root a checkpoint note signs and, when it lost track, catches the
// stored tree up from audit_events; a storer goroutine stores the runs of
// stored hashes in audit_tree_hashes, in order. A checkpoint note is
// signed with the root the hasher answers; the tree hashes it covers
// follow within milliseconds, and proofs are only answered for trees
// whose hashes are stored (see Store.noteAt).
type treeBuilder struct {
	w       *writer
	in      chan treeMsg // from the writer, in chain order
	rows    chan []any   // to the storer, in order: one audit_tree_hashes row each
	done    chan struct{}
	pending sync.WaitGroup  // rows sent to the storer, not yet stored
	st      *proof.Frontier // the hasher's alone; nil: unknown, catch up from the database
}

// treeMsg is the writer's word to its tree: the hashes of events from
// seq first on, or (gap) that events were committed that do not follow,
// or a request for the root of the tree of root.size leaves.
type treeMsg struct {
	first  int64
	hashes [][]byte
	gap    bool
	root   *rootRequest
}

type rootRequest struct {
	ctx   context.Context
	size  int64
	reply chan rootReply
}

type rootReply struct {
	root tlog.Hash
	err  error
}

// startTree starts the builder of w's tree.
func (w *writer) startTree() {
	b := &treeBuilder{w: w, in: make(chan treeMsg, 1024), rows: make(chan []any, 1024), done: make(chan struct{})}
	w.tree = b
	stored := make(chan struct{})
	go func() { defer close(stored); b.store() }()
	go func() {
		defer close(b.done)
		b.hash()
		close(b.rows)
		<-stored
	}()
}

// hash follows the writer's messages until the channel closes.
func (b *treeBuilder) hash() {
	for m := range b.in {
		switch {
		case m.root != nil:
			root, err := b.root(m.root.ctx, m.root.size)
			if err != nil {
				b.st = nil
			}
			m.root.reply <- rootReply{root, err}
		case m.gap:
			b.st = nil
		default:
			b.add(m.first, m.hashes)
		}
	}
}

// add adds the leaves of event hashes from seq first on to the frontier
// and hands their stored hashes to the storer. Leaves that do not follow
// the tree's last leave it to catch up from the database at the next
// checkpoint.
func (b *treeBuilder) add(first int64, hashes [][]byte) {
	t := b.st
	if t == nil || len(hashes) == 0 {
		return
	}
	if first != t.Size()+1 {
		b.st = nil
		return
	}
	start := tlog.StoredHashIndex(0, t.Size())
	out := make([]tlog.Hash, 0, 2*len(hashes))
	for _, h := range hashes {
		hs, err := t.Push(h)
		if err != nil {
			b.st = nil
			return
		}
		out = append(out, hs...)
	}
	t.Prune()
	b.pending.Add(1)
	b.rows <- treeRow(b.w.chainID, start, out)
}

// root returns the root of the tree of size leaves: from the frontier,
// or, when the tree lost track (or the storer lost hashes), caught up
// from audit_events (synchronously, after the storer stored what it
// holds) and the frontier read back.
func (b *treeBuilder) root(ctx context.Context, size int64) (tlog.Hash, error) {
	w := b.w
	if w.treeBroken.Load() {
		b.pending.Wait() // the storer drops what is queued
		w.treeBroken.Store(false)
		b.st = nil
	}
	if b.st != nil && b.st.Size() == size {
		return b.st.Root()
	}
	b.pending.Wait()
	tx, err := w.s.ctl.Begin(ctx)
	if err != nil {
		return tlog.Hash{}, err
	}
	defer tx.Rollback(ctx)
	r, root, err := growTreeTo(ctx, tx, w.chainID, size)
	if err != nil {
		return tlog.Hash{}, err
	}
	hs, err := r.ReadHashes(proof.FrontierIndexes(size))
	if err != nil {
		return tlog.Hash{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return tlog.Hash{}, err
	}
	if b.st, err = proof.FrontierOf(size, hs); err != nil {
		return tlog.Hash{}, err
	}
	return root, nil
}

// store stores the rows the hasher sends, in order, until the channel
// closes: what has queued meanwhile in one COPY, committed without
// waiting for the WAL flush (synchronous_commit off), since tree hashes
// are derived data the hasher recomputes from the events after a crash.
// A batch that cannot be stored (Postgres away) is retried; past that,
// the tree catches up at the next checkpoint.
func (b *treeBuilder) store() {
	w := b.w
	for row := range b.rows {
		rows := [][]any{row}
	drain:
		for len(rows) < 256 {
			select {
			case r, ok := <-b.rows:
				if !ok {
					break drain
				}
				rows = append(rows, r)
			default:
				break drain
			}
		}
		// Once a batch is lost, the later ones would leave a hole: they
		// are dropped too until the tree catches up.
		for attempt := 0; !w.treeBroken.Load() && !w.cfg.treeUnstored; attempt++ {
			err := w.storeTreeRows(rows)
			if err == nil {
				break
			}
			if isPgError(err) || attempt >= 30 {
				w.cfg.Logger.Warn("audit: tree hashes not stored; the tree catches up later", "chain_id", w.chainID, "err", err)
				w.treeBroken.Store(true)
				break
			}
			time.Sleep(w.cfg.RetryInterval)
		}
		for range rows {
			b.pending.Done()
		}
	}
}

func (w *writer) storeTreeRows(rows [][]any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := w.s.ctl.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit TO off"); err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_tree_hashes"}, treeColumns, pgx.CopyFromRows(rows)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// stopTree stores what is queued and stops the builder.
func (w *writer) stopTree() {
	if w.tree == nil {
		return
	}
	close(w.tree.in)
	<-w.tree.done
}

// addLeaves hands the records just committed (in chain order) to the
// tree builder: the hashes of this chain's, or word of a gap when they do
// not follow each other.
func (w *writer) addLeaves(recs []*sealed) {
	b := w.tree
	if w.cfg.noTree || b == nil {
		return
	}
	var first int64
	hashes := make([][]byte, 0, len(recs))
	for _, r := range recs {
		if r.ChainID != w.chainID {
			continue
		}
		if len(hashes) == 0 {
			first = r.Seq
		} else if r.Seq != first+int64(len(hashes)) {
			b.in <- treeMsg{gap: true}
			return
		}
		hashes = append(hashes, r.Hash)
	}
	if len(hashes) > 0 {
		b.in <- treeMsg{first: first, hashes: hashes}
	}
}

// treeRoot returns the root of the chain's tree at headSeq for the next
// checkpoint note, as the tree builder answers it.
func (w *writer) treeRoot(ctx context.Context) (tlog.Hash, error) {
	req := &rootRequest{ctx: ctx, size: w.headSeq, reply: make(chan rootReply, 1)}
	w.tree.in <- treeMsg{root: req}
	select {
	case r := <-req.reply:
		return r.root, r.err
	case <-ctx.Done():
		return tlog.Hash{}, ctx.Err()
	}
}

// errLeavesGone means a chain's rows a tree needs are no longer in
// audit_events (retention dropped them before the tree was stored).
var errLeavesGone = errors.New("the chain's rows are gone")

// growTreeTo stores, in tx, the tree hashes of chainID's leaves from the
// stored tree's size up to target, read from audit_events, and returns
// its reader and the tree's root.
func growTreeTo(ctx context.Context, tx pgx.Tx, chainID string, target int64) (*treeReader, tlog.Hash, error) {
	size, err := storedTreeSize(ctx, tx, chainID)
	if err != nil {
		return nil, tlog.Hash{}, err
	}
	r := &treeReader{ctx: ctx, q: tx, chainID: chainID, cache: map[int64]tlog.Hash{}}
	if size > target {
		return nil, tlog.Hash{}, fmt.Errorf("chain %s: the stored tree has %d leaves, the chain %d", chainID, size, target)
	}
	for size < target {
		leaves, err := readLeaves(ctx, tx, chainID, size, min(target, size+treeChunk))
		if err != nil {
			return nil, tlog.Hash{}, err
		}
		start := tlog.StoredHashIndex(0, size)
		hashes := make([]tlog.Hash, 0, 2*len(leaves))
		for i, leaf := range leaves {
			n := size + int64(i)
			hs, err := tlog.StoredHashesForRecordHash(n, proof.LeafHash(leaf), r)
			if err != nil {
				return nil, tlog.Hash{}, fmt.Errorf("chain %s leaf %d: %w", chainID, n, err)
			}
			x := tlog.StoredHashIndex(0, n)
			for j, h := range hs {
				r.cache[x+int64(j)] = h
			}
			hashes = append(hashes, hs...)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO audit_tree_hashes (chain_id, start_index, end_index, hashes) VALUES ($1, $2, $3, $4)`,
			treeRow(chainID, start, hashes)...); err != nil {
			return nil, tlog.Hash{}, fmt.Errorf("store tree hashes: %w", err)
		}
		size += int64(len(leaves))
		// A long catch-up keeps only what the next chunk may need.
		keep := map[int64]tlog.Hash{}
		for _, x := range proof.FrontierIndexes(size) {
			if h, ok := r.cache[x]; ok {
				keep[x] = h
			}
		}
		r.cache = keep
	}
	root, err := tlog.TreeHash(size, r)
	return r, root, err
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
			return nil, fmt.Errorf("chain %s: seq %d missing: %w", chainID, next, errLeavesGone)
		}
		out = append(out, h)
		next++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read chain hashes: %w", err)
	}
	if next != to+1 {
		return nil, fmt.Errorf("chain %s: rows after seq %d missing: %w", chainID, next-1, errLeavesGone)
	}
	return out, nil
}
