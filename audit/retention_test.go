package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/sandgatetest"
)

// fakeClock is a settable clock shared by stores.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// TestRetentionArchiveThenPurge: two chains write through January, February
// and March 2025. Purge refuses a month never archived; Archive writes a
// month that verifies offline and records audit.archived; Purge then drops
// it in one transaction with retention.applied, and the trail still
// verifies online and as an export, from the boundary retention recorded.
// A month changed after its archive is refused, and a month dropped behind
// retention's back is reported.
func TestRetentionArchiveThenPurge(t *testing.T) {
	dsn, db := newDB(t)
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2025, 1, 10, 12, 0, 0, 0, time.UTC)}
	open := func(trusted ...ed25519.PublicKey) *Store {
		return testStore(t, dsn, func(c *Config) {
			c.Clock = clock.Now
			c.CheckpointEvery = 7
			c.CheckpointInterval = 24 * time.Hour
			c.Anchors.Pinned = trusted
		})
	}
	a, b := open(), open()
	write := func(month time.Month, n int) {
		t.Helper()
		before := count(t, db, "SELECT count(*) FROM audit_checkpoints")
		clock.Set(time.Date(2025, month, 10, 12, 0, 0, 0, time.UTC))
		// A day past the interval: each writer signs its head at its next
		// tick, so the month before is under a checkpoint.
		if month > time.January {
			sandgatetest.WaitFor(t, "checkpoints of the month before", 5*time.Second, func() bool {
				return count(t, db, "SELECT count(*) FROM audit_checkpoints") >= before+2
			})
		}
		for i := range n {
			for _, s := range []*Store{a, b} {
				if err := s.Record(ctx, lifecycle(i, "run-"+month.String())); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	write(time.January, 12)
	write(time.February, 9)
	write(time.March, 5)
	write(time.April, 1) // and checkpoints over March
	// The operator's store (sandgate audit archive|purge) trusts both
	// gateways' keys and writes a chain of its own.
	admin := open(a.PublicKey(), b.PublicKey())
	parts, err := admin.Retention().Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int64{}
	for _, p := range parts {
		rows[p.Name] = p.Rows
	}
	// January also holds each gateway's key registration, written before
	// its first checkpoint (after seven events).
	if rows["audit_events_2025_01"] != 26 || rows["audit_events_2025_02"] != 18 || rows["audit_events_2025_03"] != 10 {
		t.Fatalf("partition rows = %v, want 26, 18 and 10 in January to March", rows)
	}

	// Nothing archived: purge refuses and drops nothing.
	if _, err := admin.Retention().Purge(ctx, time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC), false, "ops"); !isCode(err, sandgate.CodeConflict) || !strings.Contains(err.Error(), "never archived") {
		t.Fatalf("Purge before any archive: %v, want CONFLICT never archived", err)
	}
	if _, err := admin.Retention().Archive(ctx, "audit_events_2025_04", t.TempDir(), "ops"); !isCode(err, sandgate.CodeConflict) {
		t.Fatalf("Archive of the current month: %v, want CONFLICT", err)
	}
	if _, err := admin.Retention().Archive(ctx, "audit_events_default", t.TempDir(), "ops"); !isCode(err, sandgate.CodeInvalidRequest) {
		t.Fatalf("Archive of the default partition: %v, want INVALID-REQUEST", err)
	}

	dir := t.TempDir()
	m, err := admin.Retention().Archive(ctx, "audit_events_2025_01", dir, "ops")
	if err != nil {
		t.Fatalf("Archive January: %v", err)
	}
	if m.Rows != 26 || len(m.Chains) != 2 || m.Chains[0].FirstSeq != 1 || m.Chains[0].LastSeq != 13 {
		t.Fatalf("manifest = %+v, want 26 rows, two chains of seq 1–13", m.Partition)
	}
	rep, err := proof.VerifyArchive(filepath.Join(dir, "audit_events_2025_01"), a.PublicKey(), b.PublicKey())
	if err != nil || !rep.OK {
		t.Fatalf("VerifyArchive = %+v, %v", rep, err)
	}
	// Archiving again into the same place finds the archive standing and
	// records nothing new; one that no longer verifies is not overwritten.
	if _, err := admin.Retention().Archive(ctx, "audit_events_2025_01", dir, "ops"); err != nil {
		t.Fatalf("second Archive into the same directory: %v", err)
	}
	if got := count(t, db, "SELECT count(*) FROM audit_events WHERE type = 'audit.archived'"); got != 1 {
		t.Fatalf("audit.archived events = %d, want 1", got)
	}
	other := t.TempDir()
	if _, err := admin.Retention().Archive(ctx, "audit_events_2025_02", other, "ops"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "audit_events_2025_02", proof.ArchiveEventsFile), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Retention().Archive(ctx, "audit_events_2025_02", other, "ops"); !isCode(err, sandgate.CodeConflict) {
		t.Fatalf("Archive over a damaged archive: %v, want CONFLICT", err)
	}
	// Purge checks the newest archive of a month where it can read it.
	if _, err := admin.Retention().Purge(ctx, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), true, "ops"); !isCode(err, sandgate.CodeConflict) || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("dry run with February's archive damaged: %v, want CONFLICT does not verify", err)
	}
	if _, err := admin.Retention().Archive(ctx, "audit_events_2025_02", dir, "ops"); err != nil {
		t.Fatal(err)
	}

	// Up to March: January and February are archived, March is not.
	res, err := admin.Retention().Purge(ctx, time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC), true, "ops")
	if !isCode(err, sandgate.CodeConflict) || len(res) != 2 || res[0].Dropped || res[1].Partition.Name != "audit_events_2025_02" {
		t.Fatalf("dry run to April = %+v, %v; want January and February checked, then March refused", res, err)
	}
	res, err = admin.Retention().Purge(ctx, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), false, "ops")
	if err != nil || len(res) != 2 || !res[0].Dropped || !res[1].Dropped {
		t.Fatalf("Purge January and February = %+v, %v", res, err)
	}
	if got := count(t, db, "SELECT count(*) FROM pg_class WHERE relname IN ('audit_events_2025_01', 'audit_events_2025_02')"); got != 0 {
		t.Fatal("January's or February's partition is still there")
	}
	if got := count(t, db, "SELECT count(*) FROM audit_events WHERE type = 'retention.applied' AND event_id = $1 AND payload->>'partition' = 'audit_events_2025_01'", res[0].EventID); got != 1 {
		t.Fatal("no retention.applied event for January")
	}

	// The trail verifies from the boundaries retention recorded, online
	// and as an export with its checkpoints.
	for _, s := range []*Store{a, b, admin} {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ro := readOnly(t, dsn, func(c *Config) {
		c.Clock = clock.Now
		c.Anchors.Pinned = []ed25519.PublicKey{a.PublicKey(), b.PublicKey(), admin.PublicKey()}
	})
	rep, err = ro.Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
	if err != nil || !rep.OK {
		t.Fatalf("Verify after purge = %+v, %v", rep, err)
	}
	var events, cps bytes.Buffer
	if err := ro.Reader().Export(ctx, sandgate.AuditFilter{}, sandgate.ExportJSONL, &events); err != nil {
		t.Fatal(err)
	}
	if err := ro.Reader().ExportCheckpoints(ctx, "", &cps); err != nil {
		t.Fatal(err)
	}
	rep, err = proof.VerifyExport(&events, &cps, a.PublicKey(), b.PublicKey(), admin.PublicKey())
	if err != nil || !rep.OK {
		t.Fatalf("VerifyExport after purge = %+v, %v", rep, err)
	}

	// March archived, then a row slipped into it: refused.
	admin = open(a.PublicKey(), b.PublicKey(), admin.PublicKey())
	if _, err := admin.Retention().Archive(ctx, "audit_events_2025_03", dir, "ops"); err != nil {
		t.Fatalf("Archive March: %v", err)
	}
	if _, err := db.Exec(`INSERT INTO audit_events (event_id, chain_id, seq, recorded_at, event_time, type, body, prev_hash, hash)
		VALUES (gen_random_uuid(), 'intruder', 1, '2025-03-20', '2025-03-20', 't', '\x7b7d', sha256(''), sha256(''))`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Retention().Purge(ctx, time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC), false, "ops"); !isCode(err, sandgate.CodeConflict) || !strings.Contains(err.Error(), "changed since it was archived") {
		t.Fatalf("Purge of a changed month: %v, want CONFLICT changed since archived", err)
	}

	// A month dropped without purge shows as missing rows.
	if _, err := db.Exec(`DROP TABLE audit_events_2025_03`); err != nil {
		t.Fatal(err)
	}
	rep, err = ro.Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	if problemKinds(rep)[proof.ProblemSeqGap] == 0 {
		t.Fatalf("Verify after a silent DROP = %v, want seq_gap", rep.Problems)
	}
}

// TestVerifyArchiveCatchesTampering: an archive whose events file was
// edited, or whose manifest claims other rows, does not verify.
func TestVerifyArchiveCatchesTampering(t *testing.T) {
	dsn, db := newDB(t)
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2025, 5, 10, 12, 0, 0, 0, time.UTC)}
	s := testStore(t, dsn, func(c *Config) { c.Clock = clock.Now; c.CheckpointEvery = 3 })
	for i := range 6 {
		if err := s.Record(ctx, lifecycle(i, "run-1")); err != nil {
			t.Fatal(err)
		}
	}
	// Checkpoints at 4 (three events and the key's registration) and 7.
	sandgatetest.WaitFor(t, "the checkpoint at seq 7", 5*time.Second, func() bool {
		return count(t, db, "SELECT count(*) FROM audit_checkpoints WHERE seq = 7") == 1
	})
	clock.Set(time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	if _, err := s.Retention().Archive(ctx, "audit_events_2025_05", dir, "ops"); err != nil {
		t.Fatal(err)
	}
	arch := filepath.Join(dir, "audit_events_2025_05")
	path := filepath.Join(arch, proof.ArchiveEventsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Replace(data, []byte(`"run-1"`), []byte(`"run-2"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := proof.VerifyArchive(arch, s.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	kinds := problemKinds(rep)
	if rep.OK || kinds[proof.ProblemArchiveMismatch] == 0 || kinds[proof.ProblemBodyMismatch]+kinds[proof.ProblemHashMismatch] == 0 {
		t.Fatalf("VerifyArchive of an edited archive = %v, want archive_mismatch and a hash or body problem", rep.Problems)
	}
}

// TestRetentionAdoptsDefaultPartitionRows: rows that landed in
// audit_events_default because their month had no partition (the writers
// could not create it in time) are moved into that month's partition once
// it is made, row for row, so retention archives and purges them like any
// other month; the trail verifies before and after.
func TestRetentionAdoptsDefaultPartitionRows(t *testing.T) {
	dsn, db := newDB(t)
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2025, 3, 10, 12, 0, 0, 0, time.UTC)}
	// The writer makes March's partition at start; dropping it (empty
	// still) is what a writer that never got to make it leaves.
	s := testStore(t, dsn, func(c *Config) { c.Clock = clock.Now; c.CheckpointEvery = 4 })
	if _, err := db.Exec(`DROP TABLE audit_events_2025_03`); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := s.Record(ctx, lifecycle(i, "run-default")); err != nil {
			t.Fatal(err)
		}
	}
	clock.Set(time.Date(2025, 4, 2, 12, 0, 0, 0, time.UTC))
	if err := s.Close(ctx); err != nil { // a final checkpoint over March
		t.Fatal(err)
	}
	inDefault := count(t, db, `SELECT count(*) FROM audit_events_default`)
	if inDefault < 8 {
		t.Fatalf("rows in audit_events_default = %d, want March's 8 or more", inDefault)
	}
	var before string
	if err := db.QueryRow(`SELECT string_agg(encode(hash, 'hex'), ',' ORDER BY chain_id, seq) FROM audit_events`).Scan(&before); err != nil {
		t.Fatal(err)
	}

	admin := testStore(t, dsn, func(c *Config) {
		c.Clock = clock.Now
		c.Anchors.Pinned = []ed25519.PublicKey{s.PublicKey()}
	})
	dir := t.TempDir()
	m, err := admin.Retention().Archive(ctx, "audit_events_2025_03", dir, "ops")
	if err != nil {
		t.Fatalf("Archive March, whose rows were in the default partition: %v", err)
	}
	if m.Rows != inDefault {
		t.Errorf("archived %d rows of March, want the %d that were in the default partition", m.Rows, inDefault)
	}
	if got := count(t, db, `SELECT count(*) FROM audit_events_default`); got != 0 {
		t.Errorf("rows left in audit_events_default = %d, want 0", got)
	}
	var after string
	if err := db.QueryRow(`SELECT string_agg(encode(hash, 'hex'), ',' ORDER BY chain_id, seq) FROM audit_events WHERE tableoid = 'audit_events_2025_03'::regclass`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("March's partition holds other rows than the default partition did:\nbefore %s\nafter  %s", before, after)
	}
	// The partition is append-only like every other, also for its owner.
	for _, stmt := range []string{"DELETE FROM audit_events_2025_03", "UPDATE audit_events_2025_03 SET actor = 'x'", "TRUNCATE audit_events_2025_03", "TRUNCATE audit_events_default"} {
		if _, err := db.Exec(stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", stmt, err)
		}
	}
	res, err := admin.Retention().Purge(ctx, time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC), false, "ops")
	if err != nil || len(res) != 1 || !res[0].Dropped {
		t.Fatalf("Purge March = %+v, %v", res, err)
	}
	if err := admin.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ro := readOnly(t, dsn, func(c *Config) {
		c.Clock = clock.Now
		c.Anchors.Pinned = []ed25519.PublicKey{s.PublicKey(), admin.PublicKey()}
	})
	rep, err := ro.Verifier().Verify(ctx, sandgate.VerifyRange{})
	if err != nil || !rep.OK {
		t.Fatalf("Verify after purging the adopted month = %+v, %v", rep, err)
	}
}
