package audit

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/sandgatetest"
	"github.com/sandgate/sandgate/sinks"
	"github.com/sandgate/sandgate/sinks/sinkstest"
)

// trailEvent is one event's identity and place.
type trailEvent struct {
	ID    string
	Chain string
	Seq   int64
	Type  string
}

// trail returns every stored event, by chain and seq.
func trail(t testing.TB, db *sql.DB) []trailEvent {
	t.Helper()
	rows, err := db.Query(`SELECT event_id::text, chain_id, seq, type FROM audit_events ORDER BY chain_id, seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []trailEvent
	for rows.Next() {
		var e trailEvent
		if err := rows.Scan(&e.ID, &e.Chain, &e.Seq, &e.Type); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// checkDelivery checks that got holds exactly the events of want, each
// once (unless dups), in seq order within each chain.
func checkDelivery(t testing.TB, want, got []trailEvent, dups bool) {
	t.Helper()
	seen := map[string]int{}
	last := map[string]int64{}
	for i, e := range got {
		seen[e.ID]++
		if !dups && seen[e.ID] > 1 {
			t.Errorf("event %s (chain %s seq %d) delivered twice", e.ID, e.Chain, e.Seq)
		}
		if e.Seq <= last[e.Chain] && !dups {
			t.Errorf("delivery %d: chain %s seq %d after seq %d: out of order", i, e.Chain, e.Seq, last[e.Chain])
		}
		last[e.Chain] = max(last[e.Chain], e.Seq)
	}
	for _, e := range want {
		if seen[e.ID] == 0 {
			t.Errorf("event %s (chain %s seq %d, %s) never delivered", e.ID, e.Chain, e.Seq, e.Type)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("delivered %d distinct events, the trail has %d", len(seen), len(want))
	}
}

// fastBackoff retries every 20 ms: tests wait for a receiver that comes
// back, not for a real backoff.
func fastBackoff() retry.Backoff { return retry.NewConstant(20 * time.Millisecond) }

func startStreamer(t testing.TB, dsn string, sink StreamSink) *Streamer {
	t.Helper()
	s, err := StartStreamer(StreamConfig{
		DSN: dsn, Sinks: []StreamSink{sink}, PollInterval: 20 * time.Millisecond,
		Backoff: fastBackoff, Logger: testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func syslogSink(t testing.TB, name, addr string, batch int) StreamSink {
	t.Helper()
	f, err := sinks.Parse(fmt.Appendf(nil, `sinks: [{name: %s, type: syslog, timeout: 2s, syslog: {address: %q}}]`, name, addr))
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sinks.New(f.Sinks[0], "test")
	if err != nil {
		t.Fatal(err)
	}
	return StreamSink{Name: name, BatchSize: batch, LagWarning: time.Minute, Deliverer: snd}
}

// sdRE reads the event's identity from the structured data of a
// message rsyslog stored.
var sdRE = regexp.MustCompile(`^<\d+>1 \S+ \S+ sandgate - (\S+) \[sandgate@32473 event_id="([^"]+)" chain_id="([^"]+)" seq="(\d+)"`)

func rsyslogEvents(t testing.TB, r *sinkstest.Rsyslog) []trailEvent {
	t.Helper()
	var out []trailEvent
	for i, l := range sinkstest.Lines(r.RawFile()) {
		m := sdRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("rsyslog line %d is not a sandgate RFC 5424 message: %s", i, l)
		}
		seq, _ := strconv.ParseInt(m[4], 10, 64)
		out = append(out, trailEvent{ID: m[2], Chain: m[3], Seq: seq, Type: m[1]})
	}
	return out
}

func caughtUp(s *Streamer) bool {
	st := s.SinkStatus()[0]
	return st.Delivering && st.EventsBehind == 0 && st.LastError == ""
}

// emitMany records n lifecycle events and n/10 decisions (on the
// decision chain).
func emitMany(t testing.TB, st *Store, n int, run string) {
	t.Helper()
	for i := range n {
		st.Emit(lifecycle(i, run))
		if i%10 == 0 {
			if err := st.Record(context.Background(), sandgate.Event{Type: sandgate.EventAdmissionAllowed, RunID: run, Actor: "alice", Team: "payments"}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// waitStored waits until the trail holds at least n events.
func waitStored(t testing.TB, db *sql.DB, n int64) {
	t.Helper()
	sandgatetest.WaitFor(t, fmt.Sprintf("%d events stored", n), 20*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM audit_events`) >= n
	})
}

// TestStreamToRsyslogInOrder: the trail of two chains (lifecycle and
// decisions) reaches Debian's rsyslog whole, each event once, in seq
// order within each chain, and the cursors end at the chains' heads.
func TestStreamToRsyslogInOrder(t *testing.T) {
	r := sinkstest.Start(t, nil)
	dsn, db := newDB(t)
	st := testStore(t, dsn, func(c *Config) { c.DecisionChain = true })
	emitMany(t, st, 300, "run-a")
	s := startStreamer(t, dsn, syslogSink(t, "rsyslog", r.Addr(), 64))
	emitMany(t, st, 200, "run-b") // while it streams
	waitStored(t, db, 500+50)
	sandgatetest.WaitFor(t, "the sink to catch up", 30*time.Second, func() bool {
		return caughtUp(s) && int64(len(sinkstest.Lines(r.RawFile()))) == count(t, db, `SELECT count(*) FROM audit_events`)
	})
	want := trail(t, db)
	checkDelivery(t, want, rsyslogEvents(t, r), false)
	cursors, err := st.Reader().SinkCursors(context.Background(), "rsyslog")
	if err != nil {
		t.Fatal(err)
	}
	heads := map[string]int64{}
	for _, e := range want {
		heads[e.Chain] = e.Seq
	}
	if len(cursors) != len(heads) {
		t.Fatalf("cursors %v; heads %v", cursors, heads)
	}
	for _, c := range cursors {
		if heads[c.ChainID] != c.Seq {
			t.Errorf("cursor of %s at %d, head %d", c.ChainID, c.Seq, heads[c.ChainID])
		}
	}
	if got := s.SinkStatus()[0]; got.Delivered != uint64(len(want)) || got.Warning != "" {
		t.Errorf("status = %+v; want %d delivered, no warning", got, len(want))
	}
}

// TestStreamDeadReceiverCatchUp: rsyslog is killed; decisions still
// commit; the lag grows and the status warns; when rsyslog returns the
// sink delivers exactly the events it missed, in order.
func TestStreamDeadReceiverCatchUp(t *testing.T) {
	r := sinkstest.Start(t, nil)
	dsn, db := newDB(t)
	st := testStore(t, dsn, func(c *Config) { c.DecisionChain = true })
	emitMany(t, st, 50, "before")
	waitStored(t, db, 55)
	s := startStreamer(t, dsn, syslogSink(t, "siem", r.Addr(), 20))
	sandgatetest.WaitFor(t, "the sink to catch up", 30*time.Second, func() bool {
		return caughtUp(s) && int64(len(sinkstest.Lines(r.RawFile()))) == count(t, db, `SELECT count(*) FROM audit_events`)
	})
	before := len(sinkstest.Lines(r.RawFile()))

	r.Kill()
	emitMany(t, st, 200, "during") // Record commits with the receiver dead
	waitStored(t, db, int64(before)+220)
	sandgatetest.WaitFor(t, "the sink to report the failure and its lag", 20*time.Second, func() bool {
		got := s.SinkStatus()[0]
		return got.Failures > 0 && got.LastError != "" && got.EventsBehind >= 200 && got.Warning != ""
	})
	got := s.SinkStatus()[0]
	t.Logf("with the receiver dead: %d events behind, %.1f s, %d failed attempts; warning %q", got.EventsBehind, got.SecondsBehind, got.Failures, got.Warning)
	if n := len(sinkstest.Lines(r.RawFile())); n != before {
		t.Fatalf("rsyslog file grew from %d to %d while rsyslog was dead", before, n)
	}

	r.Start()
	sandgatetest.WaitFor(t, "the sink to catch up after the receiver returned", 30*time.Second, func() bool {
		return caughtUp(s) && int64(len(sinkstest.Lines(r.RawFile()))) >= count(t, db, `SELECT count(*) FROM audit_events`)
	})
	checkDelivery(t, trail(t, db), rsyslogEvents(t, r), false)
	if w := s.SinkStatus()[0].Warning; w != "" {
		t.Errorf("warning after catching up: %q", w)
	}
}

// hookReceiver is an HTTP receiver of a webhook sink in the sandgate
// format: it checks the signature and keeps what it got, in order.
type hookReceiver struct {
	srv     *httptest.Server
	keyFile string
	mu      sync.Mutex
	got     []trailEvent
	posts   int
}

func newHookReceiver(t testing.TB) *hookReceiver {
	t.Helper()
	key := []byte("sink-test-key-0123456789abcdef!!")
	h := &hookReceiver{keyFile: filepath.Join(t.TempDir(), "sink.key")}
	if err := os.WriteFile(h.keyFile, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if sandgate.SignHMAC(key, r.Header.Get(sinks.HeaderTimestamp), body) != r.Header.Get(sinks.HeaderSignature) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var recs []sandgate.AuditRecord
		if err := json.Unmarshal(body, &recs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.posts++
		for _, rec := range recs {
			h.got = append(h.got, trailEvent{ID: rec.ID, Chain: rec.ChainID, Seq: rec.Seq, Type: string(rec.Type)})
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) events() []trailEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

func (h *hookReceiver) sink(t testing.TB, name string, extra string) StreamSink {
	t.Helper()
	f, err := sinks.Parse(fmt.Appendf(nil, `sinks: [{name: %s, type: webhook, format: sandgate %s, webhook: {url: %q, secret_file: %q}}]`,
		name, extra, h.srv.URL, h.keyFile))
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sinks.New(f.Sinks[0], "test")
	if err != nil {
		t.Fatal(err)
	}
	sk := StreamSink{Name: name, BatchSize: f.Sinks[0].BatchSize, StartNewest: f.Sinks[0].Start == "newest", Deliverer: snd}
	for _, typ := range f.Sinks[0].Types {
		sk.Types = append(sk.Types, sandgate.EventType(typ))
	}
	return sk
}

// TestStreamRestartResumesAtCursor: a sink loop stopped and started
// again (a gateway restart) resumes at its cursor: the receiver gets
// every event once.
func TestStreamRestartResumesAtCursor(t *testing.T) {
	h := newHookReceiver(t)
	dsn, db := newDB(t)
	st := testStore(t, dsn, func(c *Config) { c.DecisionChain = true })
	emitMany(t, st, 100, "one")
	waitStored(t, db, 110)
	s1, err := StartStreamer(StreamConfig{DSN: dsn, Sinks: []StreamSink{h.sink(t, "hook", ", batch_size: 16")}, PollInterval: 20 * time.Millisecond, Backoff: fastBackoff, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sandgatetest.WaitFor(t, "the first loop to catch up", 20*time.Second, func() bool { return caughtUp(s1) })
	if err := s1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := len(h.events())
	emitMany(t, st, 100, "two")
	waitStored(t, db, int64(first)+110)
	s2 := startStreamer(t, dsn, h.sink(t, "hook", ", batch_size: 16"))
	sandgatetest.WaitFor(t, "the second loop to catch up", 20*time.Second, func() bool {
		return caughtUp(s2) && int64(len(h.events())) >= count(t, db, `SELECT count(*) FROM audit_events`)
	})
	checkDelivery(t, trail(t, db), h.events(), false)
}

// TestStreamOneGatewayDelivers: two streamers (two gateways) with the
// same sink: one holds the lock and delivers, the other stands by and
// reports the lag; when the first stops, the second takes over where the
// cursor stands.
func TestStreamOneGatewayDelivers(t *testing.T) {
	h := newHookReceiver(t)
	dsn, db := newDB(t)
	st := testStore(t, dsn, nil)
	emitMany(t, st, 40, "x")
	waitStored(t, db, 40)
	a, err := StartStreamer(StreamConfig{DSN: dsn, Sinks: []StreamSink{h.sink(t, "shared", "")}, PollInterval: 20 * time.Millisecond, Backoff: fastBackoff, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sandgatetest.WaitFor(t, "gateway A to deliver", 20*time.Second, func() bool { return caughtUp(a) })
	b := startStreamer(t, dsn, h.sink(t, "shared", ""))
	time.Sleep(200 * time.Millisecond) // several of B's polls
	if got := b.SinkStatus()[0]; got.Delivering || got.Delivered != 0 {
		t.Fatalf("gateway B delivers while A holds the lock: %+v", got)
	}
	emitMany(t, st, 40, "y")
	sandgatetest.WaitFor(t, "A to deliver the new events", 20*time.Second, func() bool {
		return caughtUp(a) && int64(len(h.events())) >= count(t, db, `SELECT count(*) FROM audit_events`)
	})
	if got := b.SinkStatus()[0]; got.Delivering || got.Delivered != 0 {
		t.Fatalf("gateway B delivered: %+v", got)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	emitMany(t, st, 40, "z")
	sandgatetest.WaitFor(t, "gateway B to take over", 20*time.Second, func() bool {
		return caughtUp(b) && int64(len(h.events())) >= count(t, db, `SELECT count(*) FROM audit_events`)
	})
	checkDelivery(t, trail(t, db), h.events(), false)
}

// TestStreamFilterAndStartNewest: a sink that starts at the newest
// events and takes only some types gets exactly those recorded after its
// start, and its cursor still passes every event.
func TestStreamFilterAndStartNewest(t *testing.T) {
	h := newHookReceiver(t)
	dsn, db := newDB(t)
	st := testStore(t, dsn, func(c *Config) { c.DecisionChain = true })
	emitMany(t, st, 30, "old")
	waitStored(t, db, 33)
	s := startStreamer(t, dsn, h.sink(t, "decisions", ", start: newest, types: [admission.allowed]"))
	sandgatetest.WaitFor(t, "the sink to start", 10*time.Second, func() bool { return caughtUp(s) })
	startAt := count(t, db, `SELECT count(*) FROM audit_events`)
	emitMany(t, st, 50, "new")
	waitStored(t, db, startAt+55)
	// The status can be a poll old: wait for what the receiver holds.
	sandgatetest.WaitFor(t, "the new decisions at the receiver", 20*time.Second, func() bool { return caughtUp(s) && len(h.events()) >= 5 })
	var want []trailEvent
	for _, e := range trail(t, db) {
		if e.Type == string(sandgate.EventAdmissionAllowed) {
			want = append(want, e)
		}
	}
	want = want[len(want)-5:] // the decisions of "new"
	checkDelivery(t, want, h.events(), false)
}

// TestStreamDatabaseAway: the sink's database connection is cut (the
// trail's own is not); the sink reports it, reconnects, takes its lock
// again and delivers everything, at least once, each chain in order
// after the cut.
func TestStreamDatabaseAway(t *testing.T) {
	h := newHookReceiver(t)
	requirePGSocket(t)
	dsn, db := newDB(t)
	p := newProxy(t, pgSocket)
	st := testStore(t, dsn, func(c *Config) { c.DecisionChain = true })
	emitMany(t, st, 60, "before")
	s := startStreamer(t, proxiedDSN(t, db, p), h.sink(t, "away", ", batch_size: 20"))
	sandgatetest.WaitFor(t, "the first events at the receiver", 20*time.Second, func() bool { return len(h.events()) > 0 })
	p.cut()
	emitMany(t, st, 60, "during")
	sandgatetest.WaitFor(t, "the sink to report the database away", 20*time.Second, func() bool {
		got := s.SinkStatus()[0]
		return got.LastError != "" && !got.Delivering
	})
	p.restore()
	sandgatetest.WaitFor(t, "the sink to catch up", 30*time.Second, func() bool {
		return caughtUp(s) && int64(len(h.events())) >= count(t, db, `SELECT count(*) FROM audit_events`)
	})
	checkDelivery(t, trail(t, db), h.events(), true)
}
