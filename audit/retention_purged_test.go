package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/sandgatetest"
)

// v7At is a UUIDv7 made at the clock's time, as the writer's IDs are in
// production (a test's clock is not the wall clock).
func v7At(clock func() time.Time) func() string {
	return func() string {
		u := uuid.Must(uuid.NewV7())
		var ms [8]byte
		binary.BigEndian.PutUint64(ms[:], uint64(clock().UnixMilli()))
		copy(u[0:6], ms[2:8])
		return u.String()
	}
}

// TestRetentionKnownAbsent: a gateway writes January to April 2025; the
// retention period (two months, with an archive directory) archives and
// drops January, recorded as a signed retention.applied event that
// names the range and its tree. The trail then verifies and says what
// was purged; inclusion proofs of kept events and consistency proofs from
// a tree size inside the purged range still check with x/mod's verifiers
// against notes signed before the purge; a proof or a receipt asked for
// a dropped event is SANDGATE-PURGED. A month dropped behind a forged,
// unsigned retention.applied is still a gap, and a kept row changed is
// still caught.
func TestRetentionKnownAbsent(t *testing.T) {
	dsn, db := newDB(t)
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2025, 1, 10, 12, 0, 0, 0, time.UTC)}
	open := func(noTree bool, trusted ...ed25519.PublicKey) *Store {
		return testStore(t, dsn, func(c *Config) {
			c.Clock, c.IDs = clock.Now, v7At(clock.Now)
			c.CheckpointEvery = 7
			c.CheckpointInterval = 24 * time.Hour
			c.Anchors.Pinned = trusted
			c.noTree = noTree
		})
	}
	// gw keeps its tree; old is a chain from before trees (no hashes
	// stored), whose tree the purge must store.
	gw, old := open(false), open(true)
	januaryRun := v7At(clock.Now)()
	write := func(month time.Month, n int, run string) {
		t.Helper()
		before := count(t, db, "SELECT count(*) FROM audit_checkpoints")
		clock.Set(time.Date(2025, month, 10, 12, 0, 0, 0, time.UTC))
		if month > time.January {
			sandgatetest.WaitFor(t, "checkpoints of the month before", 5*time.Second, func() bool {
				return count(t, db, "SELECT count(*) FROM audit_checkpoints") >= before+2
			})
		}
		for i := range n {
			for _, s := range []*Store{gw, old} {
				if err := s.Record(ctx, lifecycle(i, run)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	write(time.January, 12, januaryRun)
	write(time.February, 9, "run-feb")
	write(time.March, 5, "run-mar")
	write(time.April, 1, "run-apr")
	chain := gw.ChainID()
	var janID, febID string
	var janLast int64
	if err := db.QueryRow(`SELECT event_id::text FROM audit_events WHERE chain_id = $1 AND seq = 2`, chain).Scan(&janID); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT max(seq) FROM audit_events_2025_01 WHERE chain_id = $1`, chain).Scan(&janLast); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT event_id::text FROM audit_events WHERE chain_id = $1 AND seq = $2`, chain, janLast+2).Scan(&febID); err != nil {
		t.Fatal(err)
	}
	// The note of January's first checkpoint, signed before the purge.
	var janNote string
	var janSize int64
	if err := db.QueryRow(`SELECT seq, note FROM audit_checkpoints WHERE chain_id = $1 AND note IS NOT NULL ORDER BY seq LIMIT 1`, chain).Scan(&janSize, &janNote); err != nil {
		t.Fatal(err)
	}
	if janSize >= janLast {
		t.Fatalf("January's first checkpoint is at %d, its last row %d", janSize, janLast)
	}
	_, janCP, err := proof.OpenNote(janNote, mustVerifierKey(t, janNote, gw.PublicKey()))
	if err != nil {
		t.Fatal(err)
	}

	// The retention period: two months, so January (ending 1 February)
	// has expired on 10 April and February (ending 1 March) has not.
	admin := open(false, gw.PublicKey(), old.PublicKey())
	period, err := ParseRetentionPeriod("2mo")
	if err != nil {
		t.Fatal(err)
	}
	dry, err := admin.Retention().ApplyRetention(ctx, period, "", true, "ops")
	if err == nil || !isCode(err, sandgate.CodeConflict) || len(dry.Purged) != 0 {
		t.Fatalf("dry run without an archive = %+v, %v; want CONFLICT never archived", dry, err)
	}
	res, err := admin.Retention().ApplyRetention(ctx, period, t.TempDir(), false, "ops")
	if err != nil || len(res.Archived) != 1 || len(res.Purged) != 1 || !res.Purged[0].Dropped || res.Purged[0].Partition.Name != "audit_events_2025_01" {
		t.Fatalf("ApplyRetention = %+v, %v; want January archived and dropped", res, err)
	}
	if got := count(t, db, "SELECT count(*) FROM pg_class WHERE relname = 'audit_events_2025_01'"); got != 0 {
		t.Fatal("January's partition is still there")
	}
	// The event names the range and each chain's tree, including the
	// tree of the chain that had none stored.
	if got := count(t, db, `SELECT count(*) FROM audit_events, jsonb_array_elements(payload->'trees') tr
		WHERE type = 'retention.applied' AND (tr->>'tree_size')::bigint > 0 AND jsonb_array_length(tr->'frontier') > 0`); got != 2 {
		t.Fatalf("retention.applied records %d trees, want 2", got)
	}
	oldSize, err := storedTreeSize(ctx, admin.pool, old.ChainID())
	if err != nil || oldSize < 1 {
		t.Fatalf("the old chain's stored tree = %d, %v; the purge should have stored it", oldSize, err)
	}

	// The writers close, with final checkpoints over everything.
	for _, s := range []*Store{gw, old, admin} {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	trusted := func(c *Config) {
		c.Clock = clock.Now
		c.Anchors.Pinned = []ed25519.PublicKey{gw.PublicKey(), old.PublicKey(), admin.PublicKey()}
	}
	// Verify passes and says what was purged.
	ro := readOnly(t, dsn, trusted)
	rep, err := ro.Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
	if err != nil || !rep.OK {
		t.Fatalf("Verify after retention = %+v, %v", rep, err)
	}
	if len(rep.Purged) != 2 || rep.Purged[0].Partition != "audit_events_2025_01" || rep.Purged[0].EventID != res.Purged[0].EventID {
		t.Fatalf("Verify's purged ranges = %+v, want both chains' January", rep.Purged)
	}

	// Offline, on an export taken after the purge, too.
	var events, cps bytes.Buffer
	if err := ro.Reader().Export(ctx, sandgate.AuditFilter{}, sandgate.ExportJSONL, &events); err != nil {
		t.Fatal(err)
	}
	if err := ro.Reader().ExportCheckpoints(ctx, "", &cps); err != nil {
		t.Fatal(err)
	}
	if off, err := proof.VerifyExport(&events, &cps, gw.PublicKey(), old.PublicKey(), admin.PublicKey()); err != nil || !off.OK || len(off.Purged) != 2 {
		t.Fatalf("VerifyExport after retention = %+v, %v", off, err)
	}
	// Each chain's tree starts again from the recorded frontier, so the
	// notes after the purge are checked against the kept rows.
	var raw []byte
	if err := db.QueryRow(`SELECT payload FROM audit_events WHERE type = 'retention.applied'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var payload proof.ArchivedPayload
	if err := json.Unmarshal(raw, &payload); err != nil {
		t.Fatal(err)
	}
	trees := map[string]proof.PurgedTree{}
	for _, tr := range payload.Trees {
		trees[tr.ChainID] = tr
	}
	for _, c := range payload.Chains {
		if f, err := trees[c.ChainID].Tree(); err != nil || f.Size() != c.LastSeq {
			t.Errorf("chain %s: purge boundary at seq %d without its tree (%v)", c.ChainID, c.LastSeq, err)
		}
	}

	// Proofs: a kept event's inclusion, and consistency from January's
	// signed tree to the newest, both checked by x/mod's tlog.
	cp, err := ro.Proofs().Checkpoint(ctx, chain)
	if err != nil {
		t.Fatal(err)
	}
	root := tlog.Hash(cp.RootHash)
	incl, err := ro.Proofs().InclusionProof(ctx, febID, 0)
	if err != nil {
		t.Fatalf("inclusion of a kept event: %v", err)
	}
	if err := tlog.CheckRecord(toHashes(incl.Hashes), incl.TreeSize, root, incl.LeafIndex, tlog.RecordHash(incl.EventHash)); err != nil {
		t.Errorf("tlog.CheckRecord of a kept event: %v", err)
	}
	cons, err := ro.Proofs().ConsistencyProof(ctx, chain, janSize, 0)
	if err != nil {
		t.Fatalf("consistency across the purge: %v", err)
	}
	if !bytes.Equal(cons.FromRoot, janCP.Root[:]) {
		t.Errorf("the tree of %d is %x now, January's note signed %x", janSize, cons.FromRoot, janCP.Root[:])
	}
	if err := tlog.CheckTree(toHashes(cons.Hashes), cons.To, root, janSize, janCP.Root); err != nil {
		t.Errorf("tlog.CheckTree from January's note: %v", err)
	}
	// What was dropped is known-absent: 410, not 404.
	if _, err := ro.Proofs().InclusionProof(ctx, janID, 0); !isCode(err, sandgate.CodePurged) {
		t.Errorf("inclusion of a purged event: %v, want SANDGATE-PURGED", err)
	}
	if _, err := ro.Proofs().Receipt(ctx, januaryRun); !isCode(err, sandgate.CodePurged) {
		t.Errorf("receipt of a purged run: %v, want SANDGATE-PURGED", err)
	}
	if _, err := ro.Proofs().InclusionProof(ctx, v7At(time.Now)(), 0); !isCode(err, sandgate.CodeNotFound) {
		t.Errorf("inclusion of an event that never was, made after every purge: %v, want NOT-FOUND", err)
	}

	// A forged retention.applied (no checkpoint by a known key covers it)
	// for February, dropped behind retention's back: still a gap.
	var febLast int64
	var febHash string
	if err := db.QueryRow(`SELECT seq, encode(hash, 'hex') FROM audit_events_2025_02 WHERE chain_id = $1 ORDER BY seq DESC LIMIT 1`, chain).Scan(&febLast, &febHash); err != nil {
		t.Fatal(err)
	}
	forged := sandgate.Event{ID: v7At(clock.Now)(), Type: sandgate.EventRetentionApplied, Outcome: "dropped", Actor: "mallory",
		Payload: proof.ArchivedPayload{Partition: "audit_events_2025_02", From: time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC),
			Chains: []proof.PartitionChain{{ChainID: chain, FirstSeq: janLast + 1, LastSeq: febLast, LastHash: febHash}}}.AsMap()}
	forged.Time = clock.Now()
	fe, body, err := canonicalEvent(forged, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, proof.HashSize)
	if _, err := db.Exec(`INSERT INTO audit_events (event_id, chain_id, seq, recorded_at, event_time, type, outcome, actor, payload, body, prev_hash, hash)
		VALUES ($1, 'forger', 1, $2, $2, $3, 'dropped', 'mallory', $4, $5, $6, $7)`,
		fe.ID, clock.Now(), string(fe.Type), jsonOf(t, fe.Payload), body, zero, proof.ChainHash(zero, "forger", 1, body)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DROP TABLE audit_events_2025_02`); err != nil {
		t.Fatal(err)
	}
	// And a kept row of March changed, as a superuser would.
	if _, err := db.Exec(`ALTER TABLE audit_events DISABLE TRIGGER USER;
		UPDATE audit_events_2025_03 SET actor = 'mallory' WHERE chain_id = '` + chain + `' AND seq = (SELECT min(seq) FROM audit_events_2025_03 WHERE chain_id = '` + chain + `');
		ALTER TABLE audit_events ENABLE TRIGGER USER`); err != nil {
		t.Fatal(err)
	}
	ro = readOnly(t, dsn, trusted)
	rep, err = ro.Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := problemKinds(rep)
	if rep.OK || kinds[proof.ProblemSeqGap] == 0 || kinds[proof.ProblemBodyMismatch] == 0 || kinds[proof.ProblemUnsignedChain] == 0 {
		t.Fatalf("Verify with a forged drop and a changed row = %v; want seq_gap, body_mismatch and unsigned_chain", rep.Problems)
	}
	for _, p := range rep.Purged {
		if p.Partition == "audit_events_2025_02" {
			t.Errorf("the forged drop was honoured: %+v", p)
		}
	}
}

// mustVerifierKey is the note verifier key of pub for note's origin.
func mustVerifierKey(t *testing.T, note string, pub ed25519.PublicKey) string {
	t.Helper()
	k, err := proof.NoteVerifierKey(proof.NoteOrigin(note), pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestRetentionLoop: a gateway's retention loop drops an expired month
// on its own, archiving it first, and stops with its context.
func TestRetentionLoop(t *testing.T) {
	dsn, db := newDB(t)
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2025, 1, 10, 12, 0, 0, 0, time.UTC)}
	open := func() *Store {
		return testStore(t, dsn, func(c *Config) {
			c.Clock, c.IDs = clock.Now, v7At(clock.Now)
			c.CheckpointInterval = 24 * time.Hour
		})
	}
	gw := open()
	for i := range 5 {
		if err := gw.Record(ctx, lifecycle(i, "run-jan")); err != nil {
			t.Fatal(err)
		}
	}
	clock.Set(time.Date(2025, 2, 10, 12, 0, 0, 0, time.UTC))
	if err := gw.Record(ctx, lifecycle(5, "run-feb")); err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(ctx); err != nil { // a final checkpoint over both months
		t.Fatal(err)
	}
	clock.Set(time.Date(2025, 4, 10, 12, 0, 0, 0, time.UTC))
	loop := open()
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		loop.Retention().RetentionLoop(lctx, RetentionPeriod{Months: 2}, t.TempDir(), 20*time.Millisecond)
	}()
	sandgatetest.WaitFor(t, "January dropped by the loop", 10*time.Second, func() bool {
		return count(t, db, "SELECT count(*) FROM audit_events WHERE type = 'retention.applied' AND actor = 'sandgate:retention'") == 1
	})
	stop()
	<-done
	if got := count(t, db, "SELECT count(*) FROM pg_class WHERE relname IN ('audit_events_2025_01', 'audit_events_2025_02')"); got != 1 {
		t.Fatalf("%d of January and February remain, want February alone", got)
	}
}
