// Package audit is sandgate's tamper-evident, loss-free audit trail, in
// Postgres.
//
// A Store writes events through one writer goroutine per chain, which owns
// sequence numbers and hashes: hash = SHA-256(prev_hash ‖ len(chain_id) ‖
// chain_id ‖ seq ‖ body) over the exact canonical body bytes stored, with
// gapless seq. Lifecycle events (Emit) are group-committed; decisions
// (Record) wait for their commit with synchronous_commit on. While
// Postgres is away, lifecycle events are sealed into an fsync'd,
// checksummed local spool and delivered, idempotently by event_id, in chain
// order when it returns. Checkpoints signed with Ed25519 cover the chain
// head every N events or T seconds, also when idle, so a truncated tail is
// detectable. recorded_at is the database's clock. Each node's checkpoint
// key is registered when first used (audit_keys, and an event of the
// trail), with a cluster root's endorsement when the node has one.
//
// The rest has a type each, over the Store's pool: Reader (queries,
// exports), Verifier (the live trail fed to package proof's verifier,
// which trusts keys from configured anchors, never the registry alone),
// Proofs (checkpoint notes, proofs, cosignatures, receipts, witness
// alarms), Retention (archive, purge) and Takeover (a dead node's
// chains). Everything that checks the trail without a database (canonical
// form, notes, trees, offline verify, receipts, the witness) is package
// audit/proof. A Streamer (stream.go) delivers the trail to audit sinks (a
// SIEM), at least once and in order per chain, from a cursor per sink
// kept in Postgres.
//
// The runs the API serves are package runstore's, which shares the Store's
// database handle (DB). The two are the packages that import gorm and pgx
// (what they do alike is package pgstore's): here gorm for queries, pgx
// directly for the writer's batched multi-row inserts.
package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/pgstore"
)

// Config configures a Store. DSN is required; a writing Store also needs
// SpoolDir and SigningKeyFile.
type Config struct {
	// DSN is the Postgres connection string (URL or keyword/value).
	DSN string
	// ReadOnly opens the trail for queries, export and verify only: no
	// writer, no spool, no signing key needed. Emit and Record then fail.
	ReadOnly bool
	// SpoolDir holds the local spool, its lock and the persisted chain ID.
	// One writing process per directory.
	SpoolDir string
	// SpoolMaxBytes caps the spool file (default 256 MiB). A full spool
	// makes Ready fail; further events wait in memory, never dropped.
	SpoolMaxBytes int64
	// SigningKeyFile is the Ed25519 checkpoint key (PEM PKCS #8),
	// generated with mode 0600 when absent.
	SigningKeyFile string
	// Node names this gateway; it is stored on events that carry none.
	Node string
	// ChainID names this writer's chain. Empty means the one persisted in
	// SpoolDir, created as Node plus a random suffix on first start.
	ChainID string
	// CheckpointEvery signs a checkpoint after this many events (default
	// 1000).
	CheckpointEvery int
	// CheckpointInterval signs one at least this often, also when idle
	// (default 10 s). Verify flags a chain whose newest checkpoint is older
	// than twice this and not final.
	CheckpointInterval time.Duration
	// FlushInterval lets a batch of lifecycle events wait this long for
	// company before it is committed (default 0: commit as soon as the
	// previous commit is done, which batches under load by itself). A
	// Record never waits for it.
	FlushInterval time.Duration
	// MaxBatch caps the events in one commit (default 1000). Larger
	// batches commit more events per second, but a decision committed on
	// the other chain shares the machine with a longer COPY: at 2000 the
	// decision p99 under 20,000 lifecycle events/s was 8.6 ms open-loop and
	// 12.7 ms at saturation, at 1000 7.9 and 9.6 ms, while the sustained
	// rate fell from about 30,000 to 28,000 events/s (docs/benchmarks.md).
	MaxBatch int
	// RetryInterval is how often a writer whose Postgres is away tries it
	// again (default 1 s).
	RetryInterval time.Duration
	// DecisionChain gives Record its own chain, writer and connection
	// (chain ID: ChainID + "-decisions", or persisted in
	// SpoolDir/decisions), so an admission decision never waits behind a
	// batch of lifecycle events. Each chain stays gapless; order between
	// the two chains is by time only. Off, Record and Emit share one chain
	// and a decision is committed in queue order with the events before it.
	DecisionChain bool
	// MaxBacklog is how many events may wait for the writer before Queue
	// waits for room (default 64); with the batch being committed, at
	// most twice as many. It bounds how far a producer that answers after
	// Queue (a review) can get ahead of the trail: memory, and the events
	// a crash could take with it. Emit is not bounded. Small is better for
	// latency: when the trail is the bottleneck, producers stall for the
	// part of a commit the queue outlasts, which grows with the bound (under
	// wrk, p99 21.7 ms at 64, 24.2 at 128, 30.6 at 512; docs/benchmarks.md).
	MaxBacklog int
	// MaxConns caps the connection pool of request traffic: queries,
	// exports, proofs, and the run store over DB (default 8).
	MaxConns int32
	// ControlConns caps the pool of the node's own work, which request
	// traffic never takes a connection of: the trail's writers, their
	// checkpoints and trees, closing a dead node's chains, and the node
	// registry's heartbeat over ControlDB (default 6; a writing Store
	// only).
	ControlConns int32
	// Clock and IDs are injected for tests (defaults: time.Now, UUIDv7).
	// recorded_at is the database's clock; a writer with an injected Clock
	// stamps its rows' recorded_at with that clock instead, which the
	// database accepts only from the role that owns the trail (tests that
	// write months gone by).
	Clock sandgate.Clock
	IDs   sandgate.IDSource
	// Logger receives operational messages (default slog.Default()).
	Logger *slog.Logger
	// MaskKey keys the hashes that replace secrets in payloads (see
	// LoadMaskKey). Empty means a key derived from the signing key, so
	// hashes stay comparable across restarts without another secret to
	// manage, but not across gateways or a rotation of the signing key.
	MaskKey []byte
	// Anchors are what Verify trusts checkpoint keys from
	// (proof.ResolveTrust): pinned keys, cluster root keys, the local
	// node's key. A writing Store whose anchors name no local key, or its
	// own, counts its own (SigningKeyFile, Node) as the key it signs
	// with. Without any anchor in use, nothing is trusted and Verify
	// reports it.
	Anchors proof.Anchors
	// Witnesses are the verifier keys of the witnesses the operator
	// pinned ("name+hash+base64"): only their cosignatures are stored
	// and served, and only their alarms are a known witness's.
	Witnesses []string
	// Endorsement, when set, is a cluster root key's endorsement of this
	// node's signing key (sandgate audit endorse-key): the writer records
	// it in the trail (audit.key_endorsed) with its key's registration, so
	// verifiers that trust the root trust the key. Open refuses one of
	// another key or node.
	Endorsement *proof.Endorsement
	// PreviousSigningKeyFile, when set, is the node's previous checkpoint
	// key: the first time the new key is registered it is recorded as a
	// rotation endorsed by this one (sandgate audit rotate-key).
	PreviousSigningKeyFile string

	// noTree leaves the chains' Merkle trees alone (no tree hashes, no
	// checkpoint notes): for the benchmark that measures what the tree
	// costs.
	noTree bool
	// treeUnstored computes the trees and signs the notes but stores no
	// tree hashes: for the benchmark that tells the writer's share of the
	// cost from Postgres's.
	treeUnstored bool
}

func (c *Config) setDefaults() {
	if c.SpoolMaxBytes <= 0 {
		c.SpoolMaxBytes = 256 << 20
	}
	if c.CheckpointEvery <= 0 {
		c.CheckpointEvery = 1000
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = 10 * time.Second
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.MaxBacklog <= 0 {
		c.MaxBacklog = 64
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 8
	}
	if c.ControlConns <= 0 {
		c.ControlConns = 6
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.IDs == nil {
		c.IDs = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration Open cannot work with.
func (c Config) Validate() error {
	if c.DSN == "" {
		return errors.New("audit: DSN is required")
	}
	if c.ReadOnly {
		return nil
	}
	if c.SpoolDir == "" {
		return errors.New("audit: SpoolDir is required for a writing store")
	}
	if c.SigningKeyFile == "" {
		return errors.New("audit: SigningKeyFile is required for a writing store")
	}
	for _, k := range c.Witnesses {
		if _, err := proof.NewCosignatureVerifier(k); err != nil {
			return fmt.Errorf("audit: witness key %q: %w", k, err)
		}
	}
	if c.SpoolMaxBytes > 0 && c.SpoolMaxBytes < 4096 {
		return errors.New("audit: SpoolMaxBytes must be at least 4096")
	}
	return nil
}

// Store is the audit trail's writer: its chains, their spools and
// checkpoints, on a connection pool to the trail. It implements
// sandgate.Recorder. What else is done with the trail has a type of its
// own, sharing the pool: Reader (queries, exports, the key registry, sink
// cursors), Verifier (verify), Proofs (checkpoints, proofs, cosignatures,
// receipts, witness alarms), Retention (partitions, archive, purge) and
// Takeover (a dead node's chains closed). It is safe for concurrent use.
type Store struct {
	*trailDB
	key      ed25519.PrivateKey
	prevKey  ed25519.PrivateKey // the node's previous key, to endorse a rotation
	ownClock bool               // Config.Clock was injected: the writer stamps recorded_at
	maskKey  []byte
	w        *writer
	dw       *writer // Record's writer: w, or its own with DecisionChain

	reader    *Reader
	verifier  *Verifier
	proofs    *Proofs
	retention *Retention
	takeover  *Takeover

	// status is DatabaseStatus's last answer, shared for dbStatusTTL.
	status dbStatus

	closeOnce sync.Once
	closeErr  error
}

// trailDB is what every part of the trail works with: the configuration
// and the database handles (a pgx pool, and gorm over it), and the reads
// several parts share.
type trailDB struct {
	cfg   Config
	pool  *pgxpool.Pool
	sqlDB *sql.DB
	db    *gorm.DB
	// ctl is the pool of the node's own work (Config.ControlConns): the
	// writers, closing a dead node's chains, and the registry (ctlDB).
	// Request traffic, on pool, cannot starve the trail's commits or the
	// heartbeat. The same as pool when read-only.
	ctl   *pgxpool.Pool
	ctlDB *sql.DB
	// downAt is when a writer last found Postgres away (Unix ns): a
	// request pool's connection idle since before then is pinged before
	// it is used, since it may have died with the outage.
	downAt atomic.Int64
}

var _ sandgate.Recorder = (*Store)(nil)

// Reader answers queries of the trail (also read-only: audit query and
// export work with a role that may only SELECT).
func (s *Store) Reader() *Reader { return s.reader }

// Verifier checks the trail with the Store's anchors.
func (s *Store) Verifier() *Verifier { return s.verifier }

// Proofs answers the transparency-log questions (sandgate.AuditProofs).
func (s *Store) Proofs() *Proofs { return s.proofs }

// Retention archives and drops months of the trail.
func (s *Store) Retention() *Retention { return s.retention }

// Takeover closes a dead node's chains.
func (s *Store) Takeover() *Takeover { return s.takeover }

// Auditors is the trail as the API serves auditors (sandgate.AuditTrail):
// the Reader's queries and exports, the Verifier's verify, the Store's
// readiness and where its database stands (DatabaseStatus, which the
// gateway's /readyz reports).
func (s *Store) Auditors() sandgate.AuditTrail {
	return auditors{Reader: s.reader, Verifier: s.verifier, store: s}
}

type auditors struct {
	*Reader
	*Verifier
	store *Store
}

func (a auditors) Ready(ctx context.Context) error { return a.store.Ready(ctx) }

func (a auditors) DatabaseStatus(ctx context.Context) (string, error) {
	return a.store.DatabaseStatus(ctx)
}

// Open connects to Postgres and, unless cfg.ReadOnly, loads (or creates)
// the signing key, opens the spool, finds where this chain stands (its
// last stored row, or the last spooled one if later) and starts the
// writer. The schema must exist: run migrations.Up first. Postgres must
// answer at Open, since the chain's head is there.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ownClock := cfg.Clock != nil
	cfg.setDefaults()
	pcfg, err := parsePoolConfig(cfg.DSN)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = cfg.MaxConns
	tdb := &trailDB{cfg: cfg}
	pcfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		// pgx's own rule, and a connection idle since before the trail's
		// writers last found Postgres away.
		return p.IdleDuration > time.Second || time.Since(time.Unix(0, tdb.downAt.Load())) < p.IdleDuration
	}
	if pcfg.ConnConfig.RuntimeParams == nil {
		pcfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	// Decisions must be durable before the caller acts on them, whatever
	// the server's default is.
	pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "sandgate"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("audit: connect: %w", err)
	}
	tdb.pool, tdb.ctl = pool, pool
	s := &Store{trailDB: tdb, ownClock: ownClock}
	defer s.parts()
	s.sqlDB = stdlib.OpenDBFromPool(pool)
	if s.db, err = pgstore.Gorm(s.sqlDB, cfg.Clock); err != nil {
		s.closeDB()
		return nil, fmt.Errorf("audit: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		s.closeDB()
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "audit database unreachable")
	}
	if cfg.ReadOnly {
		return s, nil
	}
	if err := s.openControl(ctx, pcfg); err != nil {
		s.closeDB()
		return nil, err
	}
	if err := s.checkSchema(ctx); err != nil {
		s.closeDB()
		return nil, err
	}
	s.key, err = proof.LoadSigningKey(cfg.SigningKeyFile, true)
	if err != nil {
		s.closeDB()
		return nil, fmt.Errorf("audit: %w", err)
	}
	if cfg.PreviousSigningKeyFile != "" {
		if s.prevKey, err = proof.LoadSigningKey(cfg.PreviousSigningKeyFile, false); err != nil {
			s.closeDB()
			return nil, fmt.Errorf("audit: previous %w", err)
		}
	}
	if e := cfg.Endorsement; e != nil && (!e.Key().Equal(s.key.Public()) || e.Node != cfg.Node) {
		s.closeDB()
		return nil, fmt.Errorf("audit: the key endorsement is of key %s for node %q; this node signs with key %s as node %q",
			e.KeyID, e.Node, proof.KeyID(s.key.Public().(ed25519.PublicKey)), cfg.Node)
	}
	own := s.key.Public().(ed25519.PublicKey)
	if l := s.cfg.Anchors.Local; l == nil || (l.Key.Equal(own) && l.Node == cfg.Node) {
		s.cfg.Anchors.Local = &proof.LocalKey{Node: cfg.Node, Key: own, File: cfg.SigningKeyFile, Signing: true}
	}
	s.maskKey = cfg.MaskKey
	if len(s.maskKey) == 0 {
		m := hmac.New(sha256.New, s.key.Seed())
		m.Write([]byte("sandgate-mask-key-v1"))
		s.maskKey = m.Sum(nil)
	}
	s.w, err = startWriter(ctx, s, cfg.SpoolDir, cfg.ChainID, cfg.Node, true)
	if err != nil {
		s.closeDB()
		return nil, err
	}
	s.dw = s.w
	if cfg.DecisionChain {
		id := ""
		if cfg.ChainID != "" {
			id = cfg.ChainID + "-decisions"
		}
		s.dw, err = startWriter(ctx, s, filepath.Join(cfg.SpoolDir, "decisions"), id, cfg.Node+"-decisions", false)
		if err != nil {
			_ = s.w.close(ctx)
			s.closeDB()
			return nil, err
		}
	}
	return s, nil
}

// openControl opens the pool of the node's own work, configured as the
// request pool but for its size.
func (s *Store) openControl(ctx context.Context, pcfg *pgxpool.Config) error {
	ccfg := pcfg.Copy()
	ccfg.MaxConns = s.cfg.ControlConns
	ccfg.ConnConfig.RuntimeParams["application_name"] = pcfg.ConnConfig.RuntimeParams["application_name"] + "-control"
	ctl, err := pgxpool.NewWithConfig(ctx, ccfg)
	if err != nil {
		return fmt.Errorf("audit: connect: %w", err)
	}
	s.ctl, s.ctlDB = ctl, stdlib.OpenDBFromPool(ctl)
	return nil
}

func (s *Store) closeDB() {
	if s.sqlDB != nil {
		s.sqlDB.Close()
	}
	if s.ctl != s.pool {
		if s.ctlDB != nil {
			s.ctlDB.Close()
		}
		s.ctl.Close()
	}
	s.pool.Close()
}

// Close stops accepting events, commits (or spools) everything queued,
// writes a final checkpoint when the chain is fully in Postgres, and
// closes the connections. It gives up waiting when ctx ends.
func (s *Store) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		if s.dw != nil && s.dw != s.w {
			s.closeErr = s.dw.close(ctx)
		}
		if s.w != nil {
			if err := s.w.close(ctx); s.closeErr == nil {
				s.closeErr = err
			}
		}
		s.closeDB()
	})
	return s.closeErr
}

// ChainID returns this Store's (lifecycle) writer chain ("" when
// read-only).
func (s *Store) ChainID() string {
	if s.w == nil {
		return ""
	}
	return s.w.chainID
}

// PublicKey returns the public half of the checkpoint signing key, for
// auditors (nil when read-only). EncodePublicKey turns it into PEM.
func (s *Store) PublicKey() ed25519.PublicKey {
	if s.key == nil {
		return nil
	}
	return s.key.Public().(ed25519.PublicKey)
}

// DB returns the database handle the Store uses (its connection pool,
// with synchronous commit on), for the run store (runstore.New) and
// migrations. It is closed with the Store.
func (s *Store) DB() *sql.DB { return s.sqlDB }

// ControlDB returns a handle on the pool of the node's own work
// (Config.ControlConns), for the node registry's heartbeat: request
// traffic, which goes through DB, cannot take its connections. It is
// DB for a read-only Store, and closed with the Store.
func (s *Store) ControlDB() *sql.DB {
	if s.ctlDB == nil {
		return s.sqlDB
	}
	return s.ctlDB
}

// Emit queues a lifecycle event for the next group commit. It does not
// wait and never drops the event: when Postgres is away the event is
// spooled, and when the spool is full it waits in memory (Ready then
// fails, so the gateway stops admitting). Events without an ID, time or
// node get them here.
func (s *Store) Emit(ev sandgate.Event) {
	s.fill(&ev)
	if s.w == nil {
		s.cfg.Logger.Error("audit: event emitted to a read-only store", "event", ev)
		return
	}
	s.w.enqueue(&request{events: []proof.Canonical{s.prepare(ev)}})
}

// Queue queues a lifecycle event for the next group commit, like Emit,
// but first waits while Config.MaxBacklog events already wait for the
// writer (or twice as many with those being committed). It returns
// AUDIT-UNAVAILABLE if ctx ends first (the trail has fallen behind:
// Postgres is slow, or away with the spool full), and the event is then
// not queued. While Postgres is away and the spool has room,
// events are spooled as they come and Queue does not wait.
func (s *Store) Queue(ctx context.Context, ev sandgate.Event) error {
	if s.w == nil {
		return sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is read-only")
	}
	return s.w.enqueueWithin(ctx, &request{events: []proof.Canonical{s.prepare(ev)}}, s.cfg.MaxBacklog)
}

// Record commits events durably, in order, with synchronous commit, and
// returns only then. It returns AUDIT-UNAVAILABLE when it cannot: Postgres
// away, events still waiting in the spool, or ctx done. The caller must
// then not act on what they describe. If ctx ends before the events are
// sealed they are not written; if it ends while their commit is in flight
// they may still be stored.
func (s *Store) Record(ctx context.Context, events ...sandgate.Event) error {
	if len(events) == 0 {
		return nil
	}
	if s.w == nil {
		return sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is read-only")
	}
	evs := make([]proof.Canonical, len(events))
	for i, ev := range events {
		evs[i] = s.prepare(ev)
	}
	return s.await(ctx, &request{events: evs, done: make(chan error, 1), ctx: ctx})
}

// await queues a Record's request on the decision writer and waits for
// its commit, or for ctx.
func (s *Store) await(ctx context.Context, r *request) error {
	if !s.dw.enqueue(r) {
		return sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is closed")
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, ctx.Err(), "audit commit did not finish in time")
	}
}

// prepare fills ev in and puts it in canonical form, in the producer's
// goroutine: what every event goes through before it is queued.
func (s *Store) prepare(ev sandgate.Event) proof.Canonical {
	s.fill(&ev)
	return proof.MustCanonicalize(ev, s.cfg.Logger)
}

// fill gives ev the ID, time and node it lacks. An ID that is not a UUID
// (the column's type) is replaced, the producer's kept in the payload.
func (s *Store) fill(ev *sandgate.Event) {
	if ev.ID == "" {
		ev.ID = s.cfg.IDs()
	} else if _, err := uuid.Parse(ev.ID); err != nil {
		p := make(map[string]any, len(ev.Payload)+1)
		for k, v := range ev.Payload {
			p[k] = v
		}
		p["producer_event_id"] = ev.ID
		ev.Payload = p
		ev.ID = s.cfg.IDs()
	}
	if ev.Time.IsZero() {
		ev.Time = s.cfg.Clock()
	}
	if ev.Node == "" {
		ev.Node = s.cfg.Node
	}
}

// QueueDepth returns how many events wait to be committed (both chains):
// queued for their writer, or sealed and waiting for Postgres in the spool
// or in memory. The gateway exports it as sandgate_audit_queue_depth.
func (s *Store) QueueDepth() int {
	if s.w == nil {
		return 0
	}
	n := s.w.queuedEvents()
	if s.dw != s.w {
		n += s.dw.queuedEvents()
	}
	return n
}

// SpoolBytes returns the size of the local spool files (both chains):
// events sealed while Postgres was away and not yet delivered.
func (s *Store) SpoolBytes() int64 {
	if s.w == nil {
		return 0
	}
	n := s.w.sp.bytes.Load()
	if s.dw != s.w {
		n += s.dw.sp.bytes.Load()
	}
	return n
}

// SpoolCounts returns, since the Store opened (both chains): the events
// sealed into the spool (Postgres away, or a commit's outcome unknown),
// those a redelivery inserted into the trail, and those it found there
// already (a commit whose outcome was unknown had landed; they are not
// inserted twice). The gateway exports them as
// sandgate_audit_spooled_events_total,
// sandgate_audit_redelivered_events_total and
// sandgate_audit_redelivered_present_total.
func (s *Store) SpoolCounts() (spooled, redelivered, present int64) {
	if s.w == nil {
		return 0, 0, 0
	}
	for _, w := range []*writer{s.w, s.dw} {
		spooled += w.spooledN.Load()
		redelivered += w.redeliveredN.Load()
		present += w.alreadyN.Load()
		if s.dw == s.w {
			break
		}
	}
	return spooled, redelivered, present
}

// Ready reports whether a Record can commit now: Postgres answers and the
// spool has room. Otherwise it returns AUDIT-UNAVAILABLE with the reason.
func (s *Store) Ready(ctx context.Context) error {
	if s.w != nil {
		if s.w.isClosed() {
			return sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is closed")
		}
		for _, w := range []*writer{s.w, s.dw} {
			if err := w.behind.Load(); err != nil {
				return sandgate.WrapError(sandgate.CodeAuditUnavailable, *err, "the audit trail in Postgres is missing acknowledged events")
			}
		}
		if err := s.FenceStatus().Err(); err != nil {
			return err
		}
		if s.w.spoolFull.Load() || s.dw.spoolFull.Load() {
			return sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit spool is full (%d bytes): waiting for Postgres to take the spooled events", s.cfg.SpoolMaxBytes)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "audit database unreachable")
	}
	return nil
}

// newChainID returns node plus a random suffix.
func newChainID(node string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	if node == "" {
		node = "node"
	}
	return node + "-" + hex.EncodeToString(b[:])
}

// OpenDB opens dsn as a database/sql handle (pgx driver) and checks that
// it answers: what migrations.Up and migrations.Status take.
func OpenDB(ctx context.Context, dsn string) (*sql.DB, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, sandgate.WrapError(sandgate.CodeUnavailable, err, "database unreachable")
	}
	return db, nil
}

// parts makes the Store's parts, sharing its pool: once Open has set
// everything they use (the anchors and witnesses of the configuration).
func (s *Store) parts() {
	s.reader = &Reader{s.trailDB}
	s.verifier = &Verifier{s.trailDB}
	s.proofs = &Proofs{trailDB: s.trailDB, writer: s, witnesses: map[string]bool{}}
	for _, k := range s.cfg.Witnesses {
		s.proofs.witnesses[k] = true
	}
	s.retention = &Retention{trailDB: s.trailDB, writer: s}
	s.takeover = &Takeover{trailDB: s.trailDB, writer: s}
}

// Reader answers queries of the trail: events, exports, checkpoints, the
// key registry, sinks' cursors.
type Reader struct{ *trailDB }

// Verifier checks the live trail (VerifyTrail).
type Verifier struct{ *trailDB }

// Proofs answers transparency-log questions about the trail: checkpoint
// notes, inclusion and consistency proofs, witnesses' cosignatures and
// alarms, run receipts. It implements sandgate.AuditProofs.
type Proofs struct {
	*trailDB
	writer *Store // records witness alarms; its chain is the default
	// witnesses are Config.Witnesses; alarmMu makes one witness alarm at
	// a time count against the bounds.
	witnesses map[string]bool
	alarmMu   sync.Mutex
}

// Retention archives and drops months of the trail (partitions,
// archives, purge, the retention period's loop), recording what it does
// through the writer.
type Retention struct {
	*trailDB
	writer *Store
}

// Takeover closes the chains of a node a survivor took over, signing
// with the survivor's key.
type Takeover struct {
	*trailDB
	writer *Store
}
