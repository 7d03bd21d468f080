package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sethvargo/go-retry"

	"github.com/sandgate/sandgate"
)

// SinkDeliverer sends a batch of records to one receiver and returns nil
// only once the receiver acknowledged all of them (package sinks'
// Sender). It is called from one goroutine.
type SinkDeliverer interface {
	Deliver(ctx context.Context, recs []sandgate.AuditRecord) error
	Close() error
}

// StreamSink is one receiver the Streamer delivers the trail to.
type StreamSink struct {
	// Name keys the sink's cursor and its advisory lock.
	Name string
	// BatchSize is the most events read and sent at once (default 100).
	BatchSize int
	// Types sends only these event types (empty: all). The others are
	// passed over: the cursor moves past them.
	Types []sandgate.EventType
	// StartNewest starts a sink that has no cursor yet at the chains'
	// heads instead of their first events.
	StartNewest bool
	// LagWarning is how far behind the sink may fall before its status
	// carries a warning (default 1m).
	LagWarning time.Duration
	Deliverer  SinkDeliverer
}

// StreamConfig configures a Streamer.
type StreamConfig struct {
	// DSN is the trail's database. Each sink opens one connection of its
	// own, apart from the Store's pool: a sink never takes a connection
	// an admission needs.
	DSN   string
	Sinks []StreamSink
	// PollInterval is how often a caught-up sink looks for new events,
	// and a standing-by one for its lock (default 1s).
	PollInterval time.Duration
	// Backoff returns the waits between attempts at one batch (default
	// exponential from 250 ms, capped at 30 s, jittered, without end);
	// tests inject short ones.
	Backoff func() retry.Backoff
	Clock   sandgate.Clock
	Logger  *slog.Logger
}

// Streamer delivers the trail to each configured sink, at least once and
// in order, from Postgres itself (not from the writer's memory): each
// sink has a cursor per chain in audit_sink_cursors, moved only after its
// receiver acknowledged a batch. One goroutine per sink reads, sends and
// moves the cursor; it shares nothing with admissions but the database.
// Of several gateways, the one that holds a sink's advisory lock delivers
// it and the others stand by.
//
// Order: each chain is gapless and its rows become visible in seq order
// (one writer commits them, one transaction after another), so a cursor
// "seq N of chain C" means exactly "every event of C up to N". Reading
// seq > N per chain can therefore never skip an event that commits late,
// which a global (recorded_at, event_id) cursor could: recorded_at is a
// transaction's start, and a transaction that started earlier may commit
// later. Between chains (nodes, and each node's decision chain), a batch
// is merged by recorded_at, so a receiver sees the trail in time order
// to within the commits in flight.
type Streamer struct {
	loops  []*sinkLoop
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartStreamer starts a loop per sink. It does not wait for Postgres:
// each loop connects, and connects again, by itself.
func StartStreamer(cfg StreamConfig) (*Streamer, error) {
	if cfg.DSN == "" {
		return nil, errors.New("audit: streamer: DSN is required")
	}
	if _, err := pgx.ParseConfig(cfg.DSN); err != nil {
		return nil, fmt.Errorf("audit: streamer: parse DSN: %w", err)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func() retry.Backoff {
			return retry.WithCappedDuration(30*time.Second, retry.WithJitterPercent(20, retry.NewExponential(250*time.Millisecond)))
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Streamer{cancel: cancel}
	seen := map[string]bool{}
	for _, sk := range cfg.Sinks {
		if sk.Name == "" || seen[sk.Name] || sk.Deliverer == nil {
			cancel()
			return nil, fmt.Errorf("audit: streamer: sink %q: a unique name and a deliverer are required", sk.Name)
		}
		seen[sk.Name] = true
		if sk.BatchSize <= 0 {
			sk.BatchSize = 100
		}
		if sk.LagWarning <= 0 {
			sk.LagWarning = time.Minute
		}
		l := &sinkLoop{cfg: cfg, sink: sk, log: cfg.Logger.With("sink", sk.Name)}
		l.st.Name = sk.Name
		s.loops = append(s.loops, l)
	}
	for _, l := range s.loops {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			l.run(ctx)
		}()
	}
	return s, nil
}

// Close stops every loop (a batch in flight is abandoned: it is sent
// again by whoever delivers the sink next), releases the locks and
// closes the deliverers. It waits for the loops, at most until ctx ends.
func (s *Streamer) Close(ctx context.Context) error {
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("audit: streamer: close: %w", ctx.Err())
	}
	var errs []error
	for _, l := range s.loops {
		errs = append(errs, l.sink.Deliverer.Close())
	}
	return errors.Join(errs...)
}

// SinkStatus returns where each sink stands, in configuration order.
func (s *Streamer) SinkStatus() []sandgate.SinkStatus {
	out := make([]sandgate.SinkStatus, len(s.loops))
	for i, l := range s.loops {
		out[i] = l.status()
	}
	return out
}

// queryTimeout bounds each of a sink's statements (and its connect): a
// database that stops answering ends the session, which reports it and
// starts again, rather than leaving the sink waiting unseen.
const queryTimeout = 30 * time.Second

// sinkLoop owns one sink's delivery from start to end: its connection,
// its lock, its cursors and its status.
type sinkLoop struct {
	cfg  StreamConfig
	sink StreamSink
	log  *slog.Logger

	// Owned by the loop's goroutine.
	conn         *pgx.Conn
	lastLag      time.Time
	failingFrom  time.Time
	lastLogged   string
	lastLoggedAt time.Time

	mu sync.Mutex
	st sandgate.SinkStatus
}

func (l *sinkLoop) status() sandgate.SinkStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st
	switch {
	case st.LastError != "":
		st.Warning = fmt.Sprintf("sink %s is failing (%d events, %.0f s behind): %s", st.Name, st.EventsBehind, st.SecondsBehind, st.LastError)
	case st.SecondsBehind > l.sink.LagWarning.Seconds():
		st.Warning = fmt.Sprintf("sink %s is %d events, %.0f s behind (more than %v)", st.Name, st.EventsBehind, st.SecondsBehind, l.sink.LagWarning)
	}
	return st
}

func (l *sinkLoop) update(f func(st *sandgate.SinkStatus)) {
	l.mu.Lock()
	f(&l.st)
	l.mu.Unlock()
}

// lockKey is the sink's advisory lock, hashed by Postgres.
func (l *sinkLoop) lockKey() string { return "sandgate.audit_sink:" + l.sink.Name }

// run holds sessions until ctx ends: connect, take the lock or stand by,
// deliver until something fails, and start again after a pause.
func (l *sinkLoop) run(ctx context.Context) {
	for ctx.Err() == nil {
		err := l.session(ctx)
		l.closeConn()
		l.update(func(st *sandgate.SinkStatus) { st.Delivering = false })
		if ctx.Err() != nil {
			return
		}
		// Once a minute for the same failure: a database that is away
		// fails every session, each poll interval.
		if msg := err.Error(); msg != l.lastLogged || time.Since(l.lastLoggedAt) >= time.Minute {
			l.log.Warn("audit sink: delivery interrupted; starting again", "err", err)
			l.lastLogged, l.lastLoggedAt = msg, time.Now()
		}
		l.update(func(st *sandgate.SinkStatus) { st.LastError = err.Error() })
		sleep(ctx, l.cfg.PollInterval)
	}
}

func (l *sinkLoop) closeConn() {
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.conn.Close(ctx) // the session's end releases the lock
		cancel()
		l.conn = nil
	}
}

// session connects, waits for the sink's lock (reporting the lag
// meanwhile), and delivers while it holds it.
func (l *sinkLoop) session(ctx context.Context) error {
	pc, err := pgx.ParseConfig(l.cfg.DSN)
	if err != nil {
		return err
	}
	if pc.RuntimeParams == nil {
		pc.RuntimeParams = map[string]string{}
	}
	pc.RuntimeParams["application_name"] = "sandgate-sink-" + l.sink.Name
	cctx, cancel := context.WithTimeout(ctx, queryTimeout)
	l.conn, err = pgx.ConnectConfig(cctx, pc)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	for {
		var locked bool
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		err := l.conn.QueryRow(qctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, l.lockKey()).Scan(&locked)
		cancel()
		if err != nil {
			return fmt.Errorf("take the sink's lock: %w", err)
		}
		if locked {
			break
		}
		// Another gateway delivers this sink: report how far behind it
		// is, as everyone sees it, and wait for the lock.
		if _, err := l.read(ctx, 1); err != nil {
			return err
		}
		l.update(func(st *sandgate.SinkStatus) { st.LastError = "" })
		if !sleep(ctx, l.cfg.PollInterval) {
			return ctx.Err()
		}
	}
	l.log.Info("audit sink: delivering")
	if err := l.start(ctx); err != nil {
		return err
	}
	for first := true; ; first = false {
		n, err := l.step(ctx)
		if err != nil {
			return err
		}
		if first {
			// Delivering once the start position is taken and the lag
			// read: a status that says so is true.
			l.update(func(st *sandgate.SinkStatus) { st.Delivering = true })
		}
		if n < l.sink.BatchSize && !sleep(ctx, l.cfg.PollInterval) {
			return ctx.Err()
		}
	}
}

// start records the sink's start position the first time it runs: the
// marker row (the empty chain ID), and with StartNewest every chain at its head.
func (l *sinkLoop) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	return pgx.BeginFunc(ctx, l.conn, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO audit_sink_cursors (sink, chain_id, seq) VALUES ($1, '', 0) ON CONFLICT DO NOTHING`, l.sink.Name)
		if err != nil {
			return fmt.Errorf("start the sink's cursor: %w", err)
		}
		if tag.RowsAffected() == 0 || !l.sink.StartNewest {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO audit_sink_cursors (sink, chain_id, seq)
			SELECT $1, chain_id, seq FROM audit_heads ON CONFLICT DO NOTHING`, l.sink.Name)
		if err != nil {
			return fmt.Errorf("start the sink at the chains' heads: %w", err)
		}
		return nil
	})
}

// pendingQuery reads, for every chain with events past the sink's
// cursor, the chain's head and up to $2 of those events in seq order.
const pendingQuery = `SELECT h.chain_id, h.seq, coalesce(c.seq, 0), ` + prefixedEventColumns + `
	FROM audit_heads h
	LEFT JOIN audit_sink_cursors c ON c.sink = $1 AND c.chain_id = h.chain_id
	CROSS JOIN LATERAL (
		SELECT * FROM audit_events e
		WHERE e.chain_id = h.chain_id AND e.seq > coalesce(c.seq, 0)
		ORDER BY e.seq LIMIT $2
	) e
	WHERE h.seq > coalesce(c.seq, 0)
	ORDER BY h.chain_id, e.seq`

const prefixedEventColumns = `e.event_id, e.chain_id, e.seq, e.recorded_at, e.event_time, e.type, e.outcome,
	e.correlation_id, e.run_id, e.decision_id, e.container_id, e.actor, e.team, e.node, e.policy_revision,
	e.exit_code, e.payload, e.body, e.prev_hash, e.hash`

// pending is what read found: each chain's next events, oldest first.
type pending struct {
	chains map[string][]sandgate.AuditRecord
}

// read fetches up to limit events past the cursor of each chain and
// updates the lag in the status.
func (l *sinkLoop) read(ctx context.Context, limit int) (pending, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := l.conn.Query(ctx, pendingQuery, l.sink.Name, limit)
	if err != nil {
		return pending{}, fmt.Errorf("read the trail: %w", err)
	}
	defer rows.Close()
	p := pending{chains: map[string][]sandgate.AuditRecord{}}
	behind := int64(0)
	var oldest time.Time
	for rows.Next() {
		var (
			chain     string
			head, cur int64
			r         eventRow
		)
		if err := rows.Scan(&chain, &head, &cur, &r.EventID, &r.ChainID, &r.Seq, &r.RecordedAt, &r.EventTime, &r.Type,
			&r.Outcome, &r.CorrelationID, &r.RunID, &r.DecisionID, &r.ContainerID, &r.Actor, &r.Team, &r.Node,
			&r.PolicyRevision, &r.ExitCode, &r.Payload, &r.Body, &r.PrevHash, &r.Hash); err != nil {
			return pending{}, fmt.Errorf("read the trail: %w", err)
		}
		if _, ok := p.chains[chain]; !ok {
			behind += head - cur
			if oldest.IsZero() || r.RecordedAt.Before(oldest) {
				oldest = r.RecordedAt
			}
		}
		p.chains[chain] = append(p.chains[chain], r.record())
	}
	if err := rows.Err(); err != nil {
		return pending{}, fmt.Errorf("read the trail: %w", err)
	}
	secs := 0.0
	if !oldest.IsZero() {
		secs = max(0, l.cfg.Clock().Sub(oldest).Seconds())
	}
	l.lastLag = time.Now()
	l.update(func(st *sandgate.SinkStatus) { st.EventsBehind, st.SecondsBehind = behind, secs })
	return p, nil
}

// merge takes up to n events from the chains' lists in recorded_at order
// (chain and seq breaking ties), always the next of some chain, so what
// it takes is a prefix of each chain.
func merge(p pending, n int) []sandgate.AuditRecord {
	chains := make([]string, 0, len(p.chains))
	for c := range p.chains {
		chains = append(chains, c)
	}
	slices.Sort(chains)
	next := make(map[string]int, len(chains))
	var out []sandgate.AuditRecord
	for len(out) < n {
		best := ""
		for _, c := range chains {
			i := next[c]
			if i >= len(p.chains[c]) {
				continue
			}
			if best == "" || p.chains[c][i].RecordedAt.Before(p.chains[best][next[best]].RecordedAt) {
				best = c
			}
		}
		if best == "" {
			break
		}
		out = append(out, p.chains[best][next[best]])
		next[best]++
	}
	return out
}

// step delivers one batch: read, merge, filter, send until acknowledged,
// move the cursors. It returns how many events it moved past.
func (l *sinkLoop) step(ctx context.Context) (int, error) {
	p, err := l.read(ctx, l.sink.BatchSize)
	if err != nil {
		return 0, err
	}
	batch := merge(p, l.sink.BatchSize)
	if len(batch) == 0 {
		// Caught up, and the database answers: whatever failed before
		// (a lost connection) is over.
		l.update(func(st *sandgate.SinkStatus) { st.LastError = "" })
		return 0, nil
	}
	send := batch
	if len(l.sink.Types) > 0 {
		send = make([]sandgate.AuditRecord, 0, len(batch))
		for _, r := range batch {
			if slices.Contains(l.sink.Types, r.Type) {
				send = append(send, r)
			}
		}
	}
	if len(send) > 0 {
		if err := l.deliver(ctx, send); err != nil {
			return 0, err
		}
	}
	if err := l.advance(ctx, batch); err != nil {
		return 0, err
	}
	l.update(func(st *sandgate.SinkStatus) {
		st.Delivered += uint64(len(send))
		st.EventsBehind = max(0, st.EventsBehind-int64(len(batch)))
	})
	return len(batch), nil
}

// deliver sends the batch until the receiver acknowledges it, with
// backoff, for as long as it takes; meanwhile the lag is read again every
// second or so, which also notices a lost database connection (and with
// it the lock).
func (l *sinkLoop) deliver(ctx context.Context, batch []sandgate.AuditRecord) error {
	return retry.Do(ctx, l.cfg.Backoff(), func(ctx context.Context) error {
		err := l.sink.Deliverer.Deliver(ctx, batch)
		if err == nil {
			if !l.failingFrom.IsZero() {
				l.log.Info("audit sink: the receiver is back", "failing_for", time.Since(l.failingFrom).Round(time.Millisecond))
				l.failingFrom = time.Time{}
			}
			l.update(func(st *sandgate.SinkStatus) { st.LastError = "" })
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if l.failingFrom.IsZero() {
			l.failingFrom = time.Now()
			l.log.Warn("audit sink: delivery failed; retrying with backoff", "err", err)
		}
		l.update(func(st *sandgate.SinkStatus) { st.Failures++; st.LastError = err.Error() })
		if time.Since(l.lastLag) >= time.Second {
			if _, rerr := l.read(ctx, 1); rerr != nil {
				return rerr // not retryable: the session starts again
			}
		}
		return retry.RetryableError(err)
	})
}

// advance moves the cursor of each chain in batch to its last event, in
// one statement, on the connection that holds the lock.
func (l *sinkLoop) advance(ctx context.Context, batch []sandgate.AuditRecord) error {
	last := map[string]sandgate.AuditRecord{}
	for _, r := range batch {
		last[r.ChainID] = r
	}
	var (
		chains, ids []string
		seqs        []int64
		times       []time.Time
	)
	for c, r := range last {
		chains, ids, seqs, times = append(chains, c), append(ids, r.ID), append(seqs, r.Seq), append(times, r.RecordedAt)
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	_, err := l.conn.Exec(ctx, `INSERT INTO audit_sink_cursors (sink, chain_id, seq, event_id, recorded_at, updated_at)
		SELECT $1, c, s, e, r, now() FROM unnest($2::text[], $3::bigint[], $4::uuid[], $5::timestamptz[]) AS t(c, s, e, r)
		ON CONFLICT (sink, chain_id) DO UPDATE
		SET seq = excluded.seq, event_id = excluded.event_id, recorded_at = excluded.recorded_at, updated_at = excluded.updated_at
		WHERE audit_sink_cursors.seq < excluded.seq`, l.sink.Name, chains, seqs, ids, times)
	if err != nil {
		return fmt.Errorf("move the sink's cursor (the batch is sent again): %w", err)
	}
	return nil
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// SinkCursor is one row of audit_sink_cursors.
type SinkCursor struct {
	ChainID string `json:"chain_id"`
	Seq     int64  `json:"seq"`
}

// SinkCursors returns a sink's cursors (not its start marker), for tests
// and operators.
func (s *Reader) SinkCursors(ctx context.Context, sink string) ([]SinkCursor, error) {
	rows, err := s.pool.Query(ctx, `SELECT chain_id, seq FROM audit_sink_cursors WHERE sink = $1 AND chain_id <> '' ORDER BY chain_id`, sink)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[SinkCursor])
}
