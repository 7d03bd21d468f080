package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// request is one Emit (done == nil) or Record (done != nil).
type request struct {
	events []proof.Canonical
	done   chan error
	ctx    context.Context // a Record's; once done before sealing, the events are not written
	// also runs in the events' transaction, after they are inserted: the
	// events are committed if and only if it succeeds. A request with also
	// is committed alone.
	also func(ctx context.Context, tx pgx.Tx) error
	// key asks the writer to register its signing key and sign a
	// checkpoint now (Store.RegisterKey); the request has no events, is
	// taken alone, and its answer goes to done.
	key bool
}

// alone reports whether r is committed in a batch of its own.
func (r *request) alone() bool { return r.also != nil || r.key }

// writer is the single goroutine that owns a chain: it assigns seq and
// hashes, commits, spools and signs checkpoints. Producers only append to
// its queue. This file starts, runs and closes it; its queue is in
// queue.go, group commit in commit.go and the rows' SQL in insert.go,
// spooling and redelivery in deliver.go, checkpoints in checkpoint.go, its
// key's registration in keys.go and the months ahead in partitions.go.
type writer struct {
	s       *Store
	cfg     Config
	chainID string
	key     ed25519.PrivateKey
	logf    func(msg string, args ...any)

	mu       sync.Mutex
	queue    []*request
	queueN   int           // events in queue
	inflight int           // events taken from the queue, not yet committed or sealed
	room     chan struct{} // closed when events settle, for enqueueWithin's waiters
	closed   bool
	notify   chan struct{}
	closing  chan struct{}
	done     chan struct{}

	spoolFull atomic.Bool
	// behind is set when Postgres's head of a chain is behind records
	// committed before (errTrailBehind): readiness reports it.
	behind   atomic.Pointer[error]
	pendingN atomic.Int64 // len(pending), for QueueDepth
	// Counts since start, for SpoolCounts: records sealed into the spool
	// (or kept in memory for it), records a redelivery inserted, and
	// records it found stored already (a commit whose outcome was unknown
	// had landed).
	spooledN, redeliveredN, alreadyN atomic.Int64
	moved                            int64 // rows the last redelivery inserted; the writer goroutine's

	// Owned by the writer goroutine.
	headSeq     int64
	headHash    []byte
	pending     []*sealed // sealed but not known to be in Postgres, oldest first
	memOnly     bool      // some of pending is not in the spool file
	sp          *spool
	dbDown      bool
	lastAttempt time.Time
	sinceCP     int64
	lastCP      time.Time
	lastSig     []byte
	cpUncertain bool // the last checkpoint insert may or may not have landed
	// tree is the chain's Merkle tree (tree.go); treeBroken is set by its
	// builder when hashes were lost and the tree must catch up.
	tree       *treeBuilder
	treeBroken atomic.Bool

	broken error // set when a commitWith outcome is unknown
	// fenced is set once the database refused this writer's chain as
	// fenced (fence.go): from then on it commits nothing and holds what
	// comes in its spool.
	fenced atomic.Pointer[Fence]
	// heldFiles are fenced spools of earlier processes set aside in its
	// directory, holding heldSetAside records; set at start.
	heldFiles         []string
	heldSetAside      int64
	ensuresPartitions bool // this writer keeps the month partitions ahead
	lastEnsure        time.Time

	// keyReady is set once this writer's key is registered for its node
	// and the trail records it (ensureKey).
	keyReady bool
	lastKey  proof.KeyRecord
	// cols are the audit_events columns this writer inserts, casts their
	// types: recorded_at only when it stamps rows with its own (injected)
	// clock, otherwise the database sets it.
	cols, casts []string
}

func startWriter(ctx context.Context, s *Store, spoolDir, chainID, chainPrefix string, ensurePartitions bool) (*writer, error) {
	cfg := s.cfg
	w := &writer{
		s:       s,
		cfg:     cfg,
		key:     s.key,
		logf:    func(msg string, args ...any) { cfg.Logger.Warn(msg, args...) },
		notify:  make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	sp, recs, err := openSpool(spoolDir, cfg.SpoolMaxBytes, w.logf)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	w.sp = sp
	w.cols, w.casts = eventColumnNames, eventCasts
	if !s.ownClock {
		w.cols = slices.Delete(slices.Clone(eventColumnNames), recordedAtColumn, recordedAtColumn+1)
		w.casts = slices.Delete(slices.Clone(eventCasts), recordedAtColumn, recordedAtColumn+1)
	}
	w.chainID = chainID
	newID := func() string { return newChainID(chainPrefix) }
	if w.chainID == "" {
		w.chainID, err = chainIDFile(spoolDir, newID)
		if err != nil {
			sp.close()
			return nil, fmt.Errorf("audit: %w", err)
		}
	}
	if recs, err = w.setAsideFenced(ctx, spoolDir, recs, chainID != "", newID); err != nil {
		sp.close()
		return nil, err
	}
	w.countHeldFiles(spoolDir)
	if err := w.loadHead(ctx, recs); err != nil {
		sp.close()
		return nil, err
	}
	if w.ensuresPartitions = ensurePartitions; ensurePartitions {
		w.ensurePartitions()
	}
	if !cfg.noTree {
		w.startTree()
	}
	go w.run()
	return w, nil
}

// loadHead finds where the chain stands: its last row in Postgres, or the
// last spooled record when that is later. Spooled records are delivered
// first.
func (w *writer) loadHead(ctx context.Context, recs []*sealed) error {
	w.headHash = make([]byte, proof.HashSize)
	err := w.s.ctl.QueryRow(ctx,
		`SELECT seq, hash FROM audit_events WHERE chain_id = $1 ORDER BY seq DESC LIMIT 1`, w.chainID,
	).Scan(&w.headSeq, &w.headHash)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain head")
	}
	var cpSeq int64
	err = w.s.ctl.QueryRow(ctx,
		`SELECT signature, created_at, seq FROM audit_checkpoints WHERE chain_id = $1 ORDER BY id DESC LIMIT 1`, w.chainID,
	).Scan(&w.lastSig, &w.lastCP, &cpSeq)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read last checkpoint")
	}
	w.sinceCP = w.headSeq - cpSeq
	if w.lastCP.IsZero() && w.headSeq == 0 {
		w.lastCP = w.cfg.Clock() // the first interval runs from the first start
	}
	// A chain with rows and no checkpoint was left by an earlier process
	// of this node that died before its first one (SIGKILL, power loss):
	// lastCP stays zero, so the first cycle signs those rows, once the
	// spool is delivered, instead of an interval after this start.
	for _, r := range recs {
		if r.ChainID == w.chainID && r.Seq > w.headSeq {
			w.headSeq, w.headHash = r.Seq, r.Hash
		}
	}
	w.pending = recs
	w.pendingN.Store(int64(len(w.pending)))
	if len(recs) > 0 {
		w.logf("audit: delivering spooled events", "count", len(recs), "chain_id", w.chainID)
	}
	_, err = w.s.ctl.Exec(ctx,
		`INSERT INTO audit_chains (chain_id, node, key_id) VALUES ($1, $2, $3) ON CONFLICT (chain_id) DO NOTHING`,
		w.chainID, w.cfg.Node, proof.KeyID(w.key.Public().(ed25519.PublicKey)))
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "register chain")
	}
	return nil
}

func (w *writer) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

func (w *writer) close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.closing)
		w.releaseWaiters() // producers waiting for room learn that it closed
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("audit: close: %w", ctx.Err())
	}
}

func (w *writer) run() {
	defer close(w.done)
	defer w.sp.close()
	defer w.stopTree()
	tick := time.NewTicker(min(w.cfg.RetryInterval, w.cfg.CheckpointInterval))
	defer tick.Stop()
	for {
		select {
		case <-w.notify:
		case <-tick.C:
			if w.ensuresPartitions && time.Since(w.lastEnsure) >= partitionCheckInterval {
				w.ensurePartitions()
			}
		case <-w.closing:
			w.cycle(true)
			w.finish()
			return
		}
		w.cycle(false)
	}
}

// cycle delivers what is pending and commits queued requests until the
// queue is empty or no progress can be made; then it signs a checkpoint if
// one is due.
func (w *writer) cycle(force bool) {
	for {
		if len(w.pending) > 0 {
			w.deliver(force)
		}
		batch := w.take()
		if len(batch) == 0 {
			break
		}
		if !w.commit(batch) {
			break
		}
	}
	w.maybeCheckpoint()
}

// finish runs after Close: whatever is still queued goes to Postgres or
// the spool; a final checkpoint marks a clean end when all is delivered.
func (w *writer) finish() {
	for {
		batch := w.take()
		if len(batch) == 0 {
			break
		}
		if !w.commit(batch) {
			break
		}
	}
	if len(w.pending) > 0 {
		w.deliver(true)
	}
	w.mu.Lock()
	left := w.queue
	w.queue = nil
	w.queueN = 0
	w.releaseWaiters()
	w.mu.Unlock()
	for _, r := range left {
		if r.done != nil {
			r.done <- sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store closed")
			continue
		}
		// The spool is full and Postgres away: the log is the last place.
		w.cfg.Logger.Error("audit: event could not be committed or spooled before exit", "event", r.events)
	}
	if w.fenced.Load() != nil {
		w.logf("audit: closing a fenced chain; its held events stay in the spool", "chain_id", w.chainID, "held", len(w.pending))
	} else if len(w.pending) == 0 && w.headSeq > 0 {
		w.checkpoint(true)
	} else if len(w.pending) > 0 {
		w.logf("audit: closing with spooled events; they are delivered on the next start", "count", len(w.pending))
	}
}

// sealed is an event with its place in a chain: what one audit_events row
// holds.
type sealed struct {
	Event      sandgate.Event `json:"event"`
	ChainID    string         `json:"chain_id"`
	Seq        int64          `json:"seq"`
	RecordedAt time.Time      `json:"recorded_at"`
	Body       []byte         `json:"body"`
	PrevHash   []byte         `json:"prev_hash"`
	Hash       []byte         `json:"hash"`

	// payload is the event's canonical payload JSON when sealed in this
	// process. A record read back from the spool has it only in Body (or,
	// written by an older version, in Event.Payload).
	payload json.RawMessage
}
