package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/sandgatetest"
)

const pgSocket = "/var/run/postgresql/.s.PGSQL.5432"

// TestPostgresStoppedMidStream: with the connection to Postgres cut,
// lifecycle events are spooled and decisions refused; when it returns
// every event is delivered exactly once, in one gapless chain, also across
// a restart of the writer with events still in the spool.
func TestPostgresStoppedMidStream(t *testing.T) {
	requirePGSocket(t)
	_, db := newDB(t)
	p := newProxy(t, pgSocket)
	dsn := proxiedDSN(t, db, p)
	dir := t.TempDir()
	spoolDir := filepath.Join(dir, "spool")
	mod := func(c *Config) {
		c.SpoolDir = spoolDir
		c.SigningKeyFile = filepath.Join(dir, "key")
		c.CheckpointEvery = 25
	}
	s := testStore(t, dsn, mod)
	rows := func() int64 { return count(t, db, "SELECT count(*) FROM audit_events WHERE "+notKeyEvents) }

	for i := range 50 {
		s.Emit(lifecycle(i, "before"))
	}
	sandgatetest.WaitFor(t, "the first events", 10*time.Second, func() bool { return rows() == 50 })

	p.cut()
	for i := range 100 {
		s.Emit(lifecycle(i, "during"))
	}
	sandgatetest.WaitFor(t, "events in the spool", 10*time.Second, func() bool {
		st, err := os.Stat(filepath.Join(spoolDir, spoolFile))
		return err == nil && st.Size() > 0 && len(s.w.queueSnapshot()) == 0
	})
	err := s.Record(context.Background(), sandgate.Event{Type: sandgate.EventAdmissionAllowed, RunID: "refused"})
	if !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Fatalf("Record with Postgres away = %v, want AUDIT-UNAVAILABLE", err)
	}
	if err := s.Ready(context.Background()); !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Fatalf("Ready with Postgres away = %v, want AUDIT-UNAVAILABLE", err)
	}
	s.Emit(lifecycle(100, "during")) // the spool keeps taking lifecycle events
	sandgatetest.WaitFor(t, "the last event in the spool", 10*time.Second, func() bool { return len(s.w.queueSnapshot()) == 0 })
	if got := rows(); got != 50 {
		t.Fatalf("rows while cut = %d, want 50", got)
	}
	// The last append may still be under way: the two agree once it is done.
	sandgatetest.WaitFor(t, "SpoolBytes to match the spool file", 10*time.Second, func() bool {
		got := s.SpoolBytes()
		return got > 0 && got == fileSize(t, filepath.Join(spoolDir, spoolFile))
	})

	p.restore()
	sandgatetest.WaitFor(t, "spooled events delivered", 10*time.Second, func() bool { return rows() == 151 })
	sandgatetest.WaitFor(t, "the spool emptied", 10*time.Second, func() bool { return s.SpoolBytes() == 0 })
	if n := s.QueueDepth(); n != 0 {
		t.Errorf("QueueDepth after delivery = %d, want 0", n)
	}
	if err := s.Record(context.Background(), sandgate.Event{Type: sandgate.EventAdmissionAllowed, RunID: "after"}); err != nil {
		t.Fatalf("Record after restore: %v", err)
	}

	// Cut again and stop the writer with events in the spool; the next
	// writer on the same spool continues the chain and delivers them.
	p.cut()
	for i := range 30 {
		s.Emit(lifecycle(i, "restart"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	p.restore()
	s2 := testStore(t, dsn, mod)
	if s2.ChainID() != s.ChainID() {
		t.Fatalf("restarted writer chain %q, want %q", s2.ChainID(), s.ChainID())
	}
	sandgatetest.WaitFor(t, "events spooled before the restart", 10*time.Second, func() bool { return rows() == 182 })
	s2.Emit(lifecycle(0, "after-restart"))
	if err := s2.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// 183 events and the key's registration, before the first checkpoint.
	if got := count(t, db, "SELECT count(DISTINCT event_id) FROM audit_events"); got != 184 {
		t.Errorf("distinct events = %d, want 184 (each exactly once)", got)
	}
	if got := count(t, db, "SELECT count(*) FROM audit_events WHERE run_id = 'refused'"); got != 0 {
		t.Errorf("the refused decision was stored %d times", got)
	}
	if got := count(t, db, "SELECT max(seq) FROM audit_events"); got != 184 {
		t.Errorf("max seq = %d, want 184 (gapless)", got)
	}
	rep, err := readOnly(t, dsn, func(c *Config) { c.Anchors.Pinned = append(c.Anchors.Pinned, s.PublicKey()) }).Verifier().Verify(context.Background(), sandgate.VerifyRange{})
	if err != nil || !rep.OK {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	if st, err := os.Stat(filepath.Join(spoolDir, spoolFile)); err != nil || st.Size() != 0 {
		t.Errorf("spool after delivery: %v, %v; want empty", st, err)
	}
	// The tree followed the redeliveries: the final note's root is the
	// RFC 6962 root of the chain's hashes.
	leaves := chainHashes(t, db, s.ChainID())
	cp, err := readOnly(t, dsn, nil).Proofs().Checkpoint(context.Background(), s.ChainID())
	if err != nil || cp.TreeSize != int64(len(leaves)) || !bytes.Equal(cp.RootHash, rfc6962Root(leaves)) {
		t.Errorf("tree after redelivery: size %d root %x (%v), want %d %x", cp.TreeSize, cp.RootHash, err, len(leaves), rfc6962Root(leaves))
	}
}

// TestSpoolFullStopsReadinessNeverDrops: a full spool makes Ready fail;
// the events wait in memory and all arrive when Postgres returns.
func TestSpoolFullStopsReadinessNeverDrops(t *testing.T) {
	requirePGSocket(t)
	_, db := newDB(t)
	p := newProxy(t, pgSocket)
	s := testStore(t, proxiedDSN(t, db, p), func(c *Config) { c.SpoolMaxBytes = 8192 })
	if err := s.Ready(context.Background()); err != nil {
		t.Fatalf("Ready = %v", err)
	}
	p.cut()
	for i := range 200 {
		s.Emit(lifecycle(i, "full"))
	}
	sandgatetest.WaitFor(t, "the spool to fill", 10*time.Second, func() bool { return s.w.spoolFull.Load() })
	// The writer takes the queue and puts it back each time it retries, so
	// a look may fall in between; the events show once it is back.
	sandgatetest.WaitFor(t, "QueueDepth to show the events waiting in memory", 10*time.Second, func() bool { return s.QueueDepth() > 0 })
	if err := s.Ready(context.Background()); !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Fatalf("Ready with a full spool = %v, want AUDIT-UNAVAILABLE", err)
	}
	p.restore()
	sandgatetest.WaitFor(t, "all events delivered", 10*time.Second, func() bool {
		return count(t, db, "SELECT count(*) FROM audit_events") == 200
	})
	sandgatetest.WaitFor(t, "readiness", 10*time.Second, func() bool { return s.Ready(context.Background()) == nil })
}

// TestSpoolCutShortRecord: a spool whose last record was cut short (a
// crash mid-write) keeps every record before it, saves the damaged bytes
// aside and takes new records after the good ones.
func TestSpoolCutShortRecord(t *testing.T) {
	tests := []struct {
		name string
		cut  func(size int64) int64 // new size
		want int
	}{
		{"header cut", func(n int64) int64 { return n - 1 - int64(len(spoolFrame(t, 3))) + 4 }, 2},
		{"payload cut", func(n int64) int64 { return n - 3 }, 2},
		{"intact", func(n int64) int64 { return n }, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sp, recs, err := openSpool(dir, 1<<20, t.Logf)
			if err != nil || len(recs) != 0 {
				t.Fatalf("openSpool = %v, %v", recs, err)
			}
			var all []*sealed
			for i := 1; i <= 3; i++ {
				r := testSealed(i)
				all = append(all, r)
				if err := sp.append([]*sealed{r}); err != nil {
					t.Fatal(err)
				}
			}
			sp.close()
			path := filepath.Join(dir, spoolFile)
			st, _ := os.Stat(path)
			if err := os.Truncate(path, tt.cut(st.Size())); err != nil {
				t.Fatal(err)
			}
			sp, recs, err = openSpool(dir, 1<<20, t.Logf)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer sp.close()
			// As JSON: a payload's numbers come back as json.Number.
			asJSON := func(recs []*sealed) string { data, _ := json.Marshal(recs); return string(data) }
			if diff := cmp.Diff(asJSON(all[:tt.want]), asJSON(recs)); diff != "" {
				t.Fatalf("records kept (-want +got):\n%s", diff)
			}
			saved, _ := filepath.Glob(path + ".corrupt-*")
			if wantSaved := tt.want < 3; (len(saved) == 1) != wantSaved {
				t.Errorf("saved damaged tails = %v, want one: %v", saved, wantSaved)
			}
			// A new record follows the good ones and survives a reopen.
			if err := sp.append([]*sealed{testSealed(9)}); err != nil {
				t.Fatal(err)
			}
			sp.close()
			sp, recs, err = openSpool(dir, 1<<20, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.close()
			if len(recs) != tt.want+1 || recs[tt.want].Seq != 9 {
				t.Errorf("after append: %d records, last %+v", len(recs), recs[len(recs)-1])
			}
		})
	}
}

// TestSpoolLockedPerProcess: a second writer on the same spool is refused.
func TestSpoolLockedPerProcess(t *testing.T) {
	dir := t.TempDir()
	sp, _, err := openSpool(dir, 1<<20, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	if _, _, err := openSpool(dir, 1<<20, t.Logf); err == nil {
		t.Fatal("second openSpool on a locked spool succeeded")
	}
}

func testSealed(seq int) *sealed {
	ev, body, _ := canonicalEvent(lifecycle(seq, "spool"), time.Unix(1700000000, 0))
	ev.ID = "0190f5d2-0000-7000-8000-00000000000" + string(rune('0'+seq%10))
	prev := make([]byte, proof.HashSize)
	return &sealed{Event: ev, ChainID: "c", Seq: int64(seq), RecordedAt: time.Unix(1700000000, 0).UTC(),
		Body: body, PrevHash: prev, Hash: proof.ChainHash(prev, "c", int64(seq), body)}
}

func spoolFrame(t *testing.T, seq int) []byte {
	t.Helper()
	b, err := encodeFrames([]*sealed{testSealed(seq)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// requirePGSocket needs the local Postgres socket the proxy forwards to:
// a failure in CI (CI=true), a skip elsewhere.
func requirePGSocket(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(pgSocket); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the local Postgres socket is required (CI=true): %v", err)
		}
		t.Skipf("no local Postgres socket for the proxy: %v", err)
	}
}

// TestSpooledPayloadDelivered: a record read back from the spool has its
// payload only in its body, and one spooled by an older version has it in
// its event as well; both are delivered with the payload column equal to
// the body's payload, and an event without a payload with none.
func TestSpooledPayloadDelivered(t *testing.T) {
	dsn, db := newDB(t)
	s := testStore(t, dsn, nil)
	at := time.Date(2026, 11, 22, 16, 0, 0, 0, time.UTC)
	prev := make([]byte, proof.HashSize)
	var recs []*sealed
	for i, ev := range []sandgate.Event{lifecycle(1, "spooled"), lifecycle(2, "spooled-old"), {Type: sandgate.EventContainerStarted, RunID: "spooled-bare"}} {
		ev.ID = fmt.Sprintf("0190f5d2-0000-7000-8000-00000000000%d", i)
		ev.Time = at
		payload := ev.Payload
		c, err := proof.Canonicalize(ev)
		if err != nil {
			t.Fatal(err)
		}
		body := c.Body(at)
		h := proof.ChainHash(prev, "legacy", int64(i+1), body)
		r := &sealed{Event: c.Event, ChainID: "legacy", Seq: int64(i + 1), RecordedAt: at, Body: body, PrevHash: prev, Hash: h}
		if i == 1 {
			r.Event.Payload = payload // as an older version spooled it
		}
		// Through the spool's encoding and back, as a restart reads it.
		frames, err := encodeFrames([]*sealed{r})
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.CreateTemp(t.TempDir(), "spool")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(frames); err != nil {
			t.Fatal(err)
		}
		back, _, err := readSpool(f)
		f.Close()
		if err != nil || len(back) != 1 {
			t.Fatalf("readSpool = %v, %v", back, err)
		}
		recs = append(recs, back[0])
		prev = h
	}
	if err := s.w.insert(recs, true); err != nil {
		t.Fatal(err)
	}
	if got := count(t, db, `SELECT count(*) FROM audit_events WHERE chain_id = 'legacy'
		AND payload = (convert_from(body, 'UTF8')::jsonb) -> 'payload'`); got != 2 {
		t.Errorf("rows whose payload column is their body's payload = %d, want 2", got)
	}
	if got := count(t, db, `SELECT count(*) FROM audit_events WHERE run_id = 'spooled-bare' AND payload IS NULL`); got != 1 {
		t.Errorf("event without a payload stored with one")
	}
}

// TestSpooledEventRecordedAtDelivery: an event spooled while Postgres was
// away keeps its event_time and the body its writer sealed, while
// recorded_at is the database's clock when the spool was delivered; the
// chain verifies.
func TestSpooledEventRecordedAtDelivery(t *testing.T) {
	requirePGSocket(t)
	_, db := newDB(t)
	p := newProxy(t, pgSocket)
	dsn := proxiedDSN(t, db, p)
	s := testStore(t, dsn, nil)
	happened := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	p.cut()
	ev := lifecycle(0, "spooled")
	ev.Time = happened
	s.Emit(ev)
	sandgatetest.WaitFor(t, "the event in the spool", 10*time.Second, func() bool { return s.SpoolBytes() > 0 })
	var restored time.Time
	if err := db.QueryRow(`SELECT now()`).Scan(&restored); err != nil {
		t.Fatal(err)
	}
	p.restore()
	sandgatetest.WaitFor(t, "the spool delivered", 10*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM audit_events WHERE run_id = 'spooled'`) == 1
	})
	var recordedAt, eventTime time.Time
	var body []byte
	if err := db.QueryRow(`SELECT recorded_at, event_time, body FROM audit_events WHERE run_id = 'spooled'`).Scan(&recordedAt, &eventTime, &body); err != nil {
		t.Fatal(err)
	}
	var b struct {
		RecordedAt time.Time `json:"recorded_at"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatal(err)
	}
	if !eventTime.Equal(happened) {
		t.Errorf("event_time = %s, want the producer's %s", eventTime, happened)
	}
	if !recordedAt.After(restored) {
		t.Errorf("recorded_at = %s, want the database's clock at delivery, after %s", recordedAt, restored)
	}
	if !b.RecordedAt.Before(restored) {
		t.Errorf("the body says it was sealed at %s, want before Postgres came back (%s)", b.RecordedAt, restored)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := readOnly(t, dsn, trusting(s.PublicKey())).Verifier().VerifyTrail(context.Background(), sandgate.VerifyRange{})
	if err != nil || !rep.OK {
		t.Fatalf("VerifyTrail = %+v, %v", rep, err)
	}
}
