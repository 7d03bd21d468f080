package audit

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sandgate/sandgate"
)

// request is one Emit (done == nil) or Record (done != nil).
type request struct {
	events []canonical
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
// its queue.
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
	pendingN  atomic.Int64 // len(pending), for QueueDepth

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

	broken            error // set when a commitWith outcome is unknown
	ensuresPartitions bool  // this writer keeps the month partitions ahead
	lastEnsure        time.Time

	// keyReady is set once this writer's key is registered for its node
	// and the trail records it (ensureKey).
	keyReady bool
	lastKey  KeyRecord
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
	if w.chainID == "" {
		w.chainID, err = chainIDFile(spoolDir, func() string { return newChainID(chainPrefix) })
		if err != nil {
			sp.close()
			return nil, fmt.Errorf("audit: %w", err)
		}
	}
	if err := w.loadHead(ctx, recs); err != nil {
		sp.close()
		return nil, err
	}
	if w.ensuresPartitions = ensurePartitions; ensurePartitions {
		w.ensurePartitions()
	}
	go w.run()
	return w, nil
}

// loadHead finds where the chain stands: its last row in Postgres, or the
// last spooled record when that is later. Spooled records are delivered
// first.
func (w *writer) loadHead(ctx context.Context, recs []*sealed) error {
	w.headHash = make([]byte, HashSize)
	err := w.s.pool.QueryRow(ctx,
		`SELECT seq, hash FROM audit_events WHERE chain_id = $1 ORDER BY seq DESC LIMIT 1`, w.chainID,
	).Scan(&w.headSeq, &w.headHash)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain head")
	}
	var cpSeq int64
	err = w.s.pool.QueryRow(ctx,
		`SELECT signature, created_at, seq FROM audit_checkpoints WHERE chain_id = $1 ORDER BY id DESC LIMIT 1`, w.chainID,
	).Scan(&w.lastSig, &w.lastCP, &cpSeq)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read last checkpoint")
	}
	w.sinceCP = w.headSeq - cpSeq
	if w.lastCP.IsZero() {
		w.lastCP = w.cfg.Clock() // the first interval runs from the first start
	}
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
	_, err = w.s.pool.Exec(ctx,
		`INSERT INTO audit_chains (chain_id, node, key_id) VALUES ($1, $2, $3) ON CONFLICT (chain_id) DO NOTHING`,
		w.chainID, w.cfg.Node, KeyID(w.key.Public().(ed25519.PublicKey)))
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "register chain")
	}
	return nil
}

// enqueue adds r to the queue; it returns false when the writer is closed.
func (w *writer) enqueue(r *request) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		if r.done == nil {
			// Never silently: the log keeps the event.
			w.cfg.Logger.Error("audit: event emitted after Close; not in the trail", "event", r.events)
		}
		return false
	}
	w.push(r)
	return true
}

// push appends r to the queue and wakes the writer. The caller holds mu,
// which push releases.
func (w *writer) push(r *request) {
	w.queue = append(w.queue, r)
	w.queueN += len(r.events)
	w.mu.Unlock()
	w.wake()
}

// wake tells the writer goroutine that the queue has work.
func (w *writer) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// enqueueWithin is enqueue for a producer that waits for room: while
// limit or more events are queued, or twice that many are queued or being
// committed, it waits for the writer to take or settle some, or for ctx.
// So a producer that calls it cannot outrun the trail by more than 2×limit
// events, however fast it answers. The batch being committed counts only
// against the larger bound: producers fill the queue while a commit runs
// and stall for what of it is left when the queue is full, not for all of
// it; and a writer that cannot commit, and puts its batch back, does not
// let them add more each time it tries.
func (w *writer) enqueueWithin(ctx context.Context, r *request, limit int) error {
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is closed")
		}
		if w.queueN < limit && w.queueN+w.inflight < 2*limit {
			w.push(r)
			return nil
		}
		if w.room == nil {
			w.room = make(chan struct{})
		}
		room := w.room
		w.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, ctx.Err(),
				"the audit trail is %d events behind and did not catch up in time", limit)
		}
	}
}

// settle records that the events taken for a commit are settled:
// committed, spooled, failed or put back in the queue (requeue counts
// those). It releases the producers waiting for room, as taking events
// from the queue does.
func (w *writer) settle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight = 0
	w.releaseWaiters()
}

// releaseWaiters wakes enqueueWithin's waiters to look again. The caller
// holds mu.
func (w *writer) releaseWaiters() {
	if w.room != nil {
		close(w.room)
		w.room = nil
	}
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

// partitionCheckInterval is how often a writer makes sure the month
// partitions ahead exist; partitionsAhead is how far ahead.
const (
	partitionCheckInterval = time.Hour
	partitionsAhead        = 3 * 31 * 24 * time.Hour
)

// ensurePartitions creates the month partitions of audit_events from this
// month to about three months ahead that do not exist yet. Failing is not
// fatal: rows no month partition covers go to the default partition.
func (w *writer) ensurePartitions() {
	w.lastEnsure = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := w.cfg.Clock()
	var created int
	err := w.s.pool.QueryRow(ctx, `SELECT audit_ensure_partitions($1, $2)`, now, now.Add(partitionsAhead)).Scan(&created)
	if err != nil {
		w.logf("audit: cannot create the month partitions ahead; new rows go to audit_events_default until it works", "err", err)
		return
	}
	if created > 0 {
		w.cfg.Logger.Info("audit: month partitions created", "count", created)
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

// take removes up to MaxBatch events' worth of requests from the queue,
// lingering FlushInterval for more when only lifecycle events came.
func (w *writer) take() []*request {
	var batch []*request
	n, sync := 0, false
	grab := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		taken := n
		i := 0
		for ; i < len(w.queue); i++ {
			r := w.queue[i]
			if len(batch) > 0 && (n+len(r.events) > w.cfg.MaxBatch || r.alone() || batch[0].alone()) {
				break
			}
			batch = append(batch, r)
			n += len(r.events)
			sync = sync || r.done != nil
		}
		w.queue = w.queue[i:]
		if len(w.queue) == 0 {
			w.queue = nil
		}
		if n > taken {
			w.queueN -= n - taken
			w.inflight += n - taken
			w.releaseWaiters()
		}
	}
	grab()
	if len(batch) == 0 || sync || w.cfg.FlushInterval <= 0 || n >= w.cfg.MaxBatch {
		return batch
	}
	deadline := time.NewTimer(w.cfg.FlushInterval)
	defer deadline.Stop()
	for !sync && n < w.cfg.MaxBatch {
		select {
		case <-w.notify:
			grab()
		case <-deadline.C:
			grab()
			return batch
		case <-w.closing:
			return batch
		}
	}
	return batch
}

// requeue puts batch back at the front of the queue, in order.
func (w *writer) requeue(batch []*request) {
	w.mu.Lock()
	w.queue = append(append([]*request(nil), batch...), w.queue...)
	for _, r := range batch {
		w.queueN += len(r.events)
		w.inflight -= len(r.events)
	}
	w.mu.Unlock()
}

// seal assigns the next seq numbers and hashes to events.
func (w *writer) seal(events []canonical) []*sealed {
	now := w.cfg.Clock()
	out := make([]*sealed, 0, len(events))
	for i := range events {
		c := &events[i]
		body := c.body(now)
		seq := w.headSeq + 1
		h := ChainHash(w.headHash, w.chainID, seq, body)
		out = append(out, &sealed{
			Event: c.Event, ChainID: w.chainID, Seq: seq, RecordedAt: pgTime(now),
			Body: body, PrevHash: w.headHash, Hash: h, payload: c.payload,
		})
		w.headSeq, w.headHash = seq, h
	}
	return out
}

func unavailable(err error) error {
	return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "audit trail cannot commit")
}

// commit writes batch to Postgres, or to the spool when Postgres is away.
// It returns false when it could do neither (the spool is full), leaving
// the lifecycle events queued.
func (w *writer) commit(batch []*request) bool {
	defer w.settle()
	if len(batch) == 1 && batch[0].key {
		w.registerNow(batch[0])
		return true
	}
	if len(batch) == 1 && batch[0].also != nil {
		w.commitWith(batch[0])
		return true
	}
	var all, emits []canonical
	var syncs, rest []*request
	for _, r := range batch {
		if r.done != nil && r.ctx != nil && r.ctx.Err() != nil {
			// The caller gave up and was told AUDIT-UNAVAILABLE: do not
			// record a decision it will not act on.
			r.done <- unavailable(r.ctx.Err())
			continue
		}
		all = append(all, r.events...)
		if r.done == nil {
			emits = append(emits, r.events...)
			rest = append(rest, r)
		} else {
			syncs = append(syncs, r)
		}
	}
	if len(all) == 0 {
		return true
	}
	failSyncs := func(err error) {
		for _, r := range syncs {
			r.done <- unavailable(err)
		}
	}
	if w.broken != nil {
		failSyncs(w.broken)
		w.requeue(rest)
		return false
	}
	if len(w.pending) > 0 {
		// Postgres is away (or the spool is not yet delivered): decisions
		// cannot be committed; lifecycle events join the spool.
		failSyncs(errors.New("postgres unreachable; events are being spooled"))
		return w.spoolEvents(emits, rest)
	}
	oldSeq, oldHash := w.headSeq, w.headHash
	recs := w.seal(all)
	err := w.insert(recs, false)
	if err == nil {
		w.ok()
		for _, r := range syncs {
			r.done <- nil
		}
		w.committed(int64(len(recs)))
		return true
	}
	committed, known := false, definitelyNotCommitted(err)
	if !known {
		// A broken connection leaves the outcome open; a fresh one may
		// settle it.
		committed, known = w.resolve(recs)
	}
	if committed {
		w.ok()
		for _, r := range syncs {
			r.done <- nil
		}
		w.committed(int64(len(recs)))
		return true
	}
	w.markDown(err)
	failSyncs(err)
	if known {
		w.headSeq, w.headHash = oldSeq, oldHash
		return w.spoolEvents(emits, rest)
	}
	// The commit may have happened: keep the batch exactly as sealed (the
	// decisions too) so that a redelivery is idempotent and the chain stays
	// gapless.
	w.logf("audit: commit outcome unknown; batch spooled for idempotent redelivery", "err", err, "events", len(recs))
	w.addPending(recs)
	return true
}

// commitWith commits a Record whose events go with a statement of its own
// (retention's DROP): both or neither. It is never spooled. When the
// outcome cannot be learned the writer stops taking events, since the
// chain's head is unknown.
func (w *writer) commitWith(r *request) {
	if r.ctx != nil && r.ctx.Err() != nil {
		r.done <- unavailable(r.ctx.Err())
		return
	}
	if len(w.pending) > 0 || w.broken != nil {
		r.done <- unavailable(cmp.Or(w.broken, errors.New("postgres unreachable; events are being spooled")))
		return
	}
	oldSeq, oldHash := w.headSeq, w.headHash
	recs := w.seal(r.events)
	err := w.insertWith(recs, false, r.also)
	if err == nil {
		r.done <- nil
		w.committed(int64(len(recs)))
		return
	}
	committed, known := false, definitelyNotCommitted(err)
	if !known {
		committed, known = w.resolve(recs)
	}
	switch {
	case committed:
		r.done <- nil
		w.committed(int64(len(recs)))
	case known:
		w.headSeq, w.headHash = oldSeq, oldHash
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && !errors.Is(err, errChainAdvanced) {
			// The statement itself was refused: say why, not "unavailable".
			r.done <- sandgate.WrapError(sandgate.CodeConflict, err, "refused by the database")
			return
		}
		r.done <- unavailable(err)
	default:
		w.broken = fmt.Errorf("the outcome of a commit is unknown (%v): restart to learn the chain's head", err)
		w.cfg.Logger.Error("audit: commit outcome unknown; this writer takes no more events", "err", err)
		r.done <- unavailable(w.broken)
	}
}

// spoolEvents seals lifecycle events into the spool. When the spool has no
// room it leaves them queued and returns false.
func (w *writer) spoolEvents(events []canonical, reqs []*request) bool {
	if len(events) == 0 {
		return true
	}
	if w.spoolFull.Load() || w.memOnly {
		w.requeue(reqs)
		return false
	}
	oldSeq, oldHash := w.headSeq, w.headHash
	recs := w.seal(events)
	if err := w.sp.append(recs); err != nil {
		w.headSeq, w.headHash = oldSeq, oldHash
		w.spoolFull.Store(true)
		if !errors.Is(err, errSpoolFull) {
			w.cfg.Logger.Error("audit: spool write failed; events kept in memory", "err", err)
		} else {
			w.cfg.Logger.Error("audit: spool full; events kept in memory and readiness fails", "max_bytes", w.cfg.SpoolMaxBytes)
		}
		w.requeue(reqs)
		return false
	}
	w.pending = append(w.pending, recs...)
	w.pendingN.Store(int64(len(w.pending)))
	return true
}

// addPending keeps sealed records for delivery, in the spool when it has
// room and in memory otherwise.
func (w *writer) addPending(recs []*sealed) {
	if !w.memOnly && !w.spoolFull.Load() {
		if err := w.sp.append(recs); err == nil {
			w.pending = append(w.pending, recs...)
			w.pendingN.Store(int64(len(w.pending)))
			return
		}
		w.spoolFull.Store(true)
	}
	w.memOnly = true
	w.pending = append(w.pending, recs...)
	w.pendingN.Store(int64(len(w.pending)))
}

// ok notes that Postgres took a batch with nothing pending: the spool is
// empty, so it has room again.
func (w *writer) ok() {
	w.spoolFull.Store(false)
	w.memOnly = false
	w.dbDown = false
}

func (w *writer) markDown(err error) {
	if !w.dbDown {
		w.cfg.Logger.Warn("audit: postgres unreachable; spooling lifecycle events", "err", err)
	}
	w.dbDown = true
	w.lastAttempt = time.Now()
}

// deliver sends pending records to Postgres in chain order. Unless force,
// a writer that found Postgres away waits RetryInterval between attempts.
func (w *writer) deliver(force bool) {
	if w.dbDown && !force && time.Since(w.lastAttempt) < w.cfg.RetryInterval && !w.syncWaiting() {
		return
	}
	var own int64
	for len(w.pending) > 0 {
		chunk := w.pending[:min(len(w.pending), w.cfg.MaxBatch)]
		if err := w.insert(chunk, true); err != nil {
			w.markDown(err)
			return
		}
		for _, r := range chunk {
			if r.ChainID == w.chainID {
				own++
			}
		}
		w.pending = w.pending[len(chunk):]
		w.pendingN.Store(int64(len(w.pending)))
	}
	w.pending = nil
	w.pendingN.Store(0)
	if err := w.sp.reset(); err != nil {
		w.cfg.Logger.Error("audit: cannot empty the delivered spool; it will be redelivered (idempotently)", "err", err)
	} else {
		w.spoolFull.Store(false)
	}
	w.memOnly = false
	if w.dbDown {
		w.cfg.Logger.Info("audit: postgres is back; spooled events delivered", "chain_id", w.chainID)
	}
	w.dbDown = false
	w.committed(own)
}

func (w *writer) syncWaiting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.queue {
		if r.done != nil {
			return true
		}
	}
	return false
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
	if len(w.pending) > 0 || w.headSeq == 0 {
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
		err := w.s.pool.QueryRow(ctx, `SELECT signature FROM audit_checkpoints WHERE chain_id = $1 ORDER BY id DESC LIMIT 1`, w.chainID).Scan(&sig)
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := w.s.pool.Exec(ctx, `INSERT INTO audit_checkpoints
		(chain_id, seq, head_hash, created_at, final, prev_signature, signature, key_id, public_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		w.chainID, w.headSeq, w.headHash, cp.CreatedAt, final, nilIfEmpty(w.lastSig), sig, cp.KeyID, []byte(pub))
	if err != nil {
		w.cpUncertain = !definitelyNotCommitted(err)
		w.markDown(err)
		return
	}
	w.lastSig = sig
	w.lastCP = cp.CreatedAt
	w.sinceCP = 0
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
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
	if len(w.pending) == 0 && w.headSeq > 0 {
		w.checkpoint(true)
	} else if len(w.pending) > 0 {
		w.logf("audit: closing with spooled events; they are delivered on the next start", "count", len(w.pending))
	}
}

// resolve asks Postgres, on a new connection, whether recs were
// committed; known is false when it cannot tell.
func (w *writer) resolve(recs []*sealed) (committed, known bool) {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.Event.ID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int
	if err := w.s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE event_id = ANY($1::text[]::uuid[])`, ids).Scan(&n); err != nil {
		return false, false
	}
	switch n {
	case len(recs):
		return true, true
	case 0:
		return false, true
	}
	return false, false
}

// definitelyNotCommitted reports whether err proves the statement did not
// commit: the server refused it, or nothing reached the server.
func definitelyNotCommitted(err error) bool {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	var before notCommitted
	if errors.As(err, &before) || errors.As(err, &pgErr) || errors.As(err, &connErr) {
		return true
	}
	return pgconn.SafeToRetry(err)
}

// stageSQL creates the per-connection staging table redeliveries are
// copied into; rows leave it at commit.
const stageSQL = `CREATE TEMP TABLE IF NOT EXISTS audit_stage (
	event_id uuid, chain_id text, seq bigint, recorded_at timestamptz, event_time timestamptz, type text,
	outcome text, correlation_id text, run_id text, decision_id text, container_id text, actor text,
	team text, node text, policy_revision text, exit_code integer, payload jsonb, body bytea,
	prev_hash bytea, hash bytea) ON COMMIT DELETE ROWS`

var eventColumnNames = []string{"event_id", "chain_id", "seq", "recorded_at", "event_time", "type",
	"outcome", "correlation_id", "run_id", "decision_id", "container_id", "actor", "team", "node",
	"policy_revision", "exit_code", "payload", "body", "prev_hash", "hash"}

// recordedAtColumn is recorded_at's place in eventColumnNames.
const recordedAtColumn = 3

// moveSQL moves staged rows (of cols) into the trail, skipping those whose
// event is there already: a redelivered record is the same sealed event,
// with the same event_id. Without recorded_at in cols the database stamps
// the rows as it takes them.
func moveSQL(cols []string) string {
	list := strings.Join(cols, ", ")
	return `INSERT INTO audit_events (` + list + `)
SELECT ` + list + ` FROM audit_stage s
WHERE NOT EXISTS (SELECT FROM audit_events e WHERE e.event_id = s.event_id)
ORDER BY seq`
}

// notCommitted marks an error that happened before COMMIT was sent: the
// transaction certainly did not commit.
type notCommitted struct{ err error }

func (e notCommitted) Error() string { return e.err.Error() }
func (e notCommitted) Unwrap() error { return e.err }

func textOrNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// insert writes recs in one transaction (one commit, synchronous). Fresh
// records, sealed on a head known to be in Postgres, cannot be there yet:
// they are copied straight into audit_events. A redelivery (spooled
// records, or a batch whose commit outcome was unknown) may be partly
// there: it is copied into a temporary staging table and moved with one
// INSERT … SELECT that skips the records already stored, so it is
// idempotent.
func (w *writer) insert(recs []*sealed, redelivery bool) error {
	return w.insertWith(recs, redelivery, nil)
}

// insertWith is insert that also runs also, when not nil, in the
// transaction after the rows.
func (w *writer) insertWith(recs []*sealed, redelivery bool, also func(context.Context, pgx.Tx) error) error {
	rows, err := w.eventRows(recs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !redelivery && also == nil && len(recs) <= smallBatch {
		return w.appendSmall(ctx, recs, rows)
	}
	conn, err := w.s.pool.Acquire(ctx)
	if err != nil {
		return notCommitted{fmt.Errorf("insert %d audit events: %w", len(recs), err)}
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return notCommitted{fmt.Errorf("insert %d audit events: %w", len(recs), err)}
	}
	step := func() error {
		if !redelivery {
			if err := w.copyFresh(ctx, tx, recs, rows); err != nil || also == nil {
				return err
			}
			return also(ctx, tx)
		}
		if _, err := tx.Exec(ctx, stageSQL); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_stage"}, w.cols, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, moveSQL(w.cols)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO audit_heads AS h (chain_id, seq, hash)
			SELECT DISTINCT ON (chain_id) chain_id, seq, hash FROM audit_stage ORDER BY chain_id, seq DESC
			ON CONFLICT (chain_id) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash WHERE h.seq < EXCLUDED.seq`)
		return err
	}
	if err := step(); err != nil {
		_ = tx.Rollback(ctx)
		return notCommitted{fmt.Errorf("insert %d audit events: %w", len(recs), err)}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit %d audit events: %w", len(recs), err)
	}
	return nil
}

// copyFresh copies fresh records (rows, as eventRows made them) into
// audit_events in tx and moves the chain's head.
func (w *writer) copyFresh(ctx context.Context, tx pgx.Tx, recs []*sealed, rows [][]any) error {
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_events"}, w.cols, pgx.CopyFromRows(rows)); err != nil {
		return err
	}
	return advanceHead(ctx, tx, recs)
}

// eventRows returns recs as rows of w.cols.
func (w *writer) eventRows(recs []*sealed) ([][]any, error) {
	rows := make([][]any, len(recs))
	for i, r := range recs {
		ev := r.Event
		id, err := uuid.Parse(ev.ID)
		if err != nil {
			return nil, notCommitted{fmt.Errorf("event_id %q: %w", ev.ID, err)}
		}
		var exit, payload any
		if ev.ExitCode != nil {
			exit = int32(*ev.ExitCode)
		}
		if r.payload != nil {
			payload = []byte(r.payload)
		} else {
			// Read back from the spool: the hashed body holds the payload
			// (records an older version spooled hold it in Event as well).
			p, err := payloadOf(r.Body)
			if err != nil {
				return nil, notCommitted{fmt.Errorf("event %s: payload of its body: %w", ev.ID, err)}
			}
			if p != nil {
				payload = []byte(p)
			}
		}
		row := []any{[16]byte(id), r.ChainID, r.Seq, r.RecordedAt, ev.Time, string(ev.Type),
			textOrNil(ev.Outcome), textOrNil(ev.CorrelationID), textOrNil(ev.RunID), textOrNil(ev.DecisionID),
			textOrNil(ev.ContainerID), textOrNil(ev.Actor), textOrNil(ev.Team), textOrNil(ev.Node),
			textOrNil(ev.PolicyRevision), exit, payload, r.Body, r.PrevHash, r.Hash}
		if len(w.cols) < len(row) {
			row = slices.Delete(row, recordedAtColumn, recordedAtColumn+1)
		}
		rows[i] = row
	}
	return rows, nil
}

// smallBatch is the most records appendSmall writes with one statement;
// larger batches go through COPY in a transaction.
const smallBatch = 32

// eventCasts are the parameter types of one row in appendSmall's VALUES.
var eventCasts = []string{"uuid", "text", "bigint", "timestamptz", "timestamptz", "text", "text", "text", "text",
	"text", "text", "text", "text", "text", "text", "integer", "jsonb", "bytea", "bytea", "bytea"}

// appendSmall writes a few fresh records (a decision, typically) with one
// statement in its own implicit transaction: a single round trip, so a
// decision's commit waits for as few wake-ups of a busy machine as it can.
// The head moves in the same statement, and rows are inserted only if it
// moved from the head they were sealed on.
func (w *writer) appendSmall(ctx context.Context, recs []*sealed, rows [][]any) error {
	first, last := recs[0], recs[len(recs)-1]
	var q strings.Builder
	args := make([]any, 0, 5+len(rows)*len(w.casts))
	args = append(args, last.ChainID, last.Seq, last.Hash, first.Seq-1, first.PrevHash)
	if first.Seq == 1 {
		q.WriteString(`WITH head AS (INSERT INTO audit_heads (chain_id, seq, hash) VALUES ($1, $2, $3)
			ON CONFLICT (chain_id) DO NOTHING RETURNING $4::bigint, $5::bytea)`)
	} else {
		q.WriteString(`WITH head AS (UPDATE audit_heads SET seq = $2, hash = $3
			WHERE chain_id = $1 AND seq = $4 AND hash = $5 RETURNING 1)`)
	}
	q.WriteString(" INSERT INTO audit_events (" + strings.Join(w.cols, ", ") + ") SELECT * FROM (VALUES ")
	for i, row := range rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteByte('(')
		for j, v := range row {
			if j > 0 {
				q.WriteString(", ")
			}
			args = append(args, v)
			fmt.Fprintf(&q, "$%d::%s", len(args), w.casts[j])
		}
		q.WriteByte(')')
	}
	q.WriteString(") AS v WHERE EXISTS (SELECT FROM head)")
	tag, err := w.s.pool.Exec(ctx, q.String(), args...)
	if err != nil {
		return fmt.Errorf("insert %d audit events: %w", len(recs), err)
	}
	if tag.RowsAffected() != int64(len(recs)) {
		return notCommitted{fmt.Errorf("chain %s at seq %d: %w", last.ChainID, first.Seq-1, errChainAdvanced)}
	}
	return nil
}

// errChainAdvanced is a fresh batch refused because its chain's head in
// Postgres is not the one it was sealed on: another process writes the
// same chain.
var errChainAdvanced = errors.New("the chain's head in Postgres moved past this writer's: another process writes the same chain ID")

// advanceHead moves the chain's head in audit_heads from the one recs were
// sealed on to their last, in recs' transaction; it refuses when the head
// is elsewhere, so two writers cannot fork a chain.
func advanceHead(ctx context.Context, tx pgx.Tx, recs []*sealed) error {
	first, last := recs[0], recs[len(recs)-1]
	if first.Seq == 1 {
		_, err := tx.Exec(ctx, `INSERT INTO audit_heads (chain_id, seq, hash) VALUES ($1, $2, $3)`, last.ChainID, last.Seq, last.Hash)
		return err
	}
	tag, err := tx.Exec(ctx, `UPDATE audit_heads SET seq = $2, hash = $3 WHERE chain_id = $1 AND seq = $4 AND hash = $5`,
		last.ChainID, last.Seq, last.Hash, first.Seq-1, first.PrevHash)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("chain %s at seq %d: %w", last.ChainID, first.Seq-1, errChainAdvanced)
	}
	return nil
}

// queueSnapshot returns the requests still queued (for tests and stats).
func (w *writer) queueSnapshot() []*request {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*request(nil), w.queue...)
}

// queuedEvents returns how many events wait for Postgres: those the queued
// requests hold and those sealed but not yet delivered (spooled, or kept
// in memory when the spool is full).
func (w *writer) queuedEvents() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.pendingN.Load()) + w.queueN
}

// queued returns how many requests wait for the writer.
func (w *writer) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}
