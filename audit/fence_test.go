package audit

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestFenceRefusesAClosedChain: node a is cut off from the database with
// events in its spool; node b closes a's chains (as a survivor does) and
// so fences them. When a reaches the database again, its spooled events
// and everything it records after are refused by the database: a's
// chain ends where b closed it, a reports itself fenced (Ready, the
// FenceStatus with who fenced it and how many events it holds), a
// decision is refused, and the trail verifies. Before the fence a
// returning node delivered its spool past the closing checkpoint.
func TestFenceRefusesAClosedChain(t *testing.T) {
	requirePGSocket(t)
	dsn, db := newDB(t)
	ctx := context.Background()
	p := newProxy(t, pgSocket)
	a := testStore(t, proxiedDSN(t, db, p), func(c *Config) {
		c.Node, c.CheckpointEvery, c.CheckpointInterval = "node-a", 1000, time.Hour
	})
	for i := range 3 {
		if err := a.Record(ctx, lifecycle(i, "run-a")); err != nil {
			t.Fatal(err)
		}
	}
	p.cut()
	for i := range 4 {
		a.Emit(lifecycle(10+i, "run-a-cut-off"))
	}
	sandgatetest.WaitFor(t, "a to spool its events", 10*time.Second, func() bool { return a.w.pendingN.Load() == 4 })

	b := testStore(t, dsn, func(c *Config) { c.Node, c.CheckpointInterval = "node-b", 20*time.Millisecond })
	if err := b.Record(ctx, lifecycle(0, "run-b")); err != nil {
		t.Fatal(err)
	}
	closed, err := b.Takeover().CloseChainsOf(ctx, "node-a", "node-a stopped heartbeating")
	if err != nil || len(closed) != 1 || closed[0].Seq != 3 {
		t.Fatalf("closed = %+v %v, want a's chain at seq 3", closed, err)
	}

	p.restore()
	a.Emit(lifecycle(20, "run-a-after"))
	sandgatetest.WaitFor(t, "a to learn it is fenced", 10*time.Second, func() bool { return a.FenceStatus().Fenced != nil })
	sandgatetest.WaitFor(t, "a to hold the event emitted after", 10*time.Second, func() bool { return a.FenceStatus().Held == 5 })
	st := a.FenceStatus()
	if st.Fenced.ChainID != a.ChainID() || st.Fenced.Seq != 3 || st.Fenced.FencedBy != "node-b" {
		t.Errorf("fence = %+v, want a's chain at seq 3 by node-b", st.Fenced)
	}
	if err := a.Ready(ctx); !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Errorf("a's Ready = %v, want AUDIT-UNAVAILABLE naming the fence", err)
	}
	if err := a.Record(ctx, lifecycle(30, "run-a-decision")); !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Errorf("a decision on a fenced chain = %v, want AUDIT-UNAVAILABLE", err)
	}
	time.Sleep(100 * time.Millisecond) // a's retry interval is 20 ms: give it rounds to try
	if n := count(t, db, `SELECT max(seq) FROM audit_events WHERE chain_id = $1`, a.ChainID()); n != 3 {
		t.Errorf("a's chain reaches seq %d in the trail; want 3, where b fenced it", n)
	}
	if n := count(t, db, `SELECT count(*) FROM audit_checkpoints WHERE chain_id = $1 AND seq > 3`, a.ChainID()); n != 0 {
		t.Errorf("%d checkpoints of a's chain past the fence", n)
	}
	rep, err := readOnly(t, dsn, trusting(a.PublicKey(), b.PublicKey())).Verifier().Verify(ctx, sandgate.VerifyRange{})
	if err != nil || !rep.OK {
		t.Errorf("verify: %v %+v", err, rep.Problems)
	}
}

// TestFenceRefusesEveryPath: with a chain fenced at its head, the
// database refuses a row past it (one INSERT, the writer's COPY, its
// redelivery through the staging table, and a Record), a checkpoint that
// is not the closing one, and a change of the fence; it takes the final
// checkpoint at the fence.
func TestFenceRefusesEveryPath(t *testing.T) {
	dsn, db := newDB(t)
	ctx := context.Background()
	a := testStore(t, dsn, func(c *Config) { c.Node = "node-a" })
	for i := range 2 {
		if err := a.Record(ctx, lifecycle(i, "run-a")); err != nil {
			t.Fatal(err)
		}
	}
	chain := a.ChainID()
	if _, err := db.Exec(`SELECT audit_fence_node('node-a', 'node-b', 'test')`); err != nil {
		t.Fatal(err)
	}
	var seq int64
	var hash []byte
	if err := db.QueryRow(`SELECT seq, hash FROM audit_events WHERE chain_id = $1 ORDER BY seq DESC LIMIT 1`, chain).Scan(&seq, &hash); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, sql string }{
		{"a row past the fence", `INSERT INTO audit_events (event_id, chain_id, seq, event_time, type, body, prev_hash, hash)
			VALUES (gen_random_uuid(), $1, $2 + 1, now(), 'container.exited', '\x00', $3, '\x00')`},
		{"a checkpoint that is not final", `INSERT INTO audit_checkpoints (chain_id, seq, head_hash, created_at, final, signature, key_id, public_key)
			VALUES ($1, $2, $3, now(), false, '\x00', 'k', '\x00')`},
		{"a final checkpoint past the fence", `INSERT INTO audit_checkpoints (chain_id, seq, head_hash, created_at, final, signature, key_id, public_key)
			VALUES ($1, $2 + 1, $3, now(), true, '\x00', 'k', '\x00')`},
		{"a change of the fence", `UPDATE audit_fences SET seq = $2 + 10 WHERE chain_id = $1 AND $3::bytea IS NOT NULL`},
	} {
		if _, err := db.Exec(tc.sql, chain, seq, hash); err == nil {
			t.Errorf("%s was taken", tc.name)
		}
	}
	// The writer's own statements: COPY of a fresh batch, and the
	// redelivery of one that follows the fence.
	recs := make([]*sealed, 40)
	prev := hash
	for i := range recs {
		c := a.prepare(lifecycle(100+i, "run-a-past"))
		body := c.Body(time.Now())
		s := seq + 1 + int64(i)
		recs[i] = &sealed{Event: c.Event, ChainID: chain, Seq: s, RecordedAt: proof.CanonicalTime(time.Now()), Body: body,
			PrevHash: prev, Hash: proof.ChainHash(prev, chain, s, body), payload: c.PayloadJSON()}
		prev = recs[i].Hash
	}
	if err := a.w.insert(recs, false); !isFenced(err) {
		t.Errorf("COPY of 40 rows past the fence = %v, want the fence's refusal", err)
	}
	if err := a.w.insert(recs, true); !isFenced(err) {
		t.Errorf("a redelivery past the fence = %v, want the fence's refusal", err)
	}
	// A fresh commit through the writer.
	if err := a.Record(ctx, lifecycle(5, "run-a")); !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Errorf("a fresh commit past the fence = %v, want AUDIT-UNAVAILABLE", err)
	}
	if a.FenceStatus().Fenced == nil {
		t.Error("the writer does not know it is fenced")
	}
	if n := count(t, db, `SELECT count(*) FROM audit_events WHERE chain_id = $1`, chain); n != seq {
		t.Errorf("%d rows in the fenced chain, want %d", n, seq)
	}
	if _, err := db.Exec(`INSERT INTO audit_checkpoints (chain_id, seq, head_hash, created_at, final, signature, key_id, public_key)
		VALUES ($1, $2, $3, now(), true, '\x00', 'k', '\x00')`, chain, seq, hash); err != nil {
		t.Errorf("the closing checkpoint at the fence was refused: %v", err)
	}
}

// TestFencedChainSetAsideAtStart: a node whose chain was fenced while it
// was down keeps the spool it held aside (fenced-<chain>.log), begins a
// new chain that records again, and reports the records it holds.
func TestFencedChainSetAsideAtStart(t *testing.T) {
	requirePGSocket(t)
	_, db := newDB(t)
	ctx := context.Background()
	p := newProxy(t, pgSocket)
	dir := t.TempDir()
	cfg := Config{
		DSN: proxiedDSN(t, db, p), SpoolDir: filepath.Join(dir, "spool"), SigningKeyFile: filepath.Join(dir, "key"),
		Node: "node-a", Logger: testLogger(), RetryInterval: 20 * time.Millisecond, CheckpointInterval: time.Hour,
	}
	a, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Record(ctx, lifecycle(0, "run-a")); err != nil {
		t.Fatal(err)
	}
	old := a.ChainID()
	p.cut()
	a.Emit(lifecycle(1, "run-a-cut-off"))
	a.Emit(lifecycle(2, "run-a-cut-off"))
	sandgatetest.WaitFor(t, "a to spool", 10*time.Second, func() bool { return a.w.pendingN.Load() == 2 })
	closeCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_ = a.Close(closeCtx)
	cancel()
	if _, err := db.Exec(`SELECT audit_fence_node('node-a', 'node-b', 'test')`); err != nil {
		t.Fatal(err)
	}
	p.restore()

	a2, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close(ctx)
	if a2.ChainID() == old {
		t.Fatalf("the restarted node writes its fenced chain %s again", old)
	}
	if err := a2.Record(ctx, lifecycle(3, "run-a-new")); err != nil {
		t.Fatalf("the new chain does not record: %v", err)
	}
	st := a2.FenceStatus()
	kept := filepath.Join(cfg.SpoolDir, fencedPrefix+old+".log")
	if st.Fenced != nil || st.Held != 2 || len(st.HeldFiles) != 1 || st.HeldFiles[0] != kept {
		t.Errorf("fence status = %+v, want not fenced, 2 held in %s", st, kept)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the fenced spool was not kept: %v", err)
	}
	if n := count(t, db, `SELECT count(*) FROM audit_events WHERE chain_id = $1`, old); n != 1 {
		t.Errorf("the fenced chain holds %d rows, want 1", n)
	}
}
