package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestParseDSN checks which DSNs get target_session_attrs=read-write and
// which servers each names.
func TestParseDSN(t *testing.T) {
	tests := []struct {
		name      string
		dsn       string
		readWrite bool
		servers   string
	}{
		{"one host", "host=127.0.0.1 port=5432 dbname=sandgate", false, "127.0.0.1:5432"},
		{"socket", "host=/var/run/postgresql dbname=sandgate", false, "/var/run/postgresql/.s.PGSQL.5432"},
		{"hosts, read-write by default", "host=a,b port=5432,5433 dbname=sandgate sslmode=disable", true, "a:5432, b:5433"},
		{"hosts, one port for all", "host=a,b port=6000 dbname=sandgate sslmode=disable", true, "a:6000, b:6000"},
		{"hosts, read-write given", "host=a,b port=5432,5433 target_session_attrs=read-write", true, "a:5432, b:5433"},
		{"hosts, any given", "host=a,b port=5432,5433 target_session_attrs=any", false, "a:5432, b:5433"},
		{"URL with hosts", "postgres://u@a:5432,b:5433/sandgate?sslmode=disable", true, "a:5432, b:5433"},
		{"URL with read-write", "postgresql://u@a:5432,b:5433/sandgate?target_session_attrs=read-write", true, "a:5432, b:5433"},
		{"sslmode prefer tries each twice, listed once", "host=a,b port=5432,5433", true, "a:5432, b:5433"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseDSN(tt.dsn)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.ValidateConnect != nil; got != tt.readWrite {
				t.Errorf("read-write = %v, want %v", got, tt.readWrite)
			}
			if got := strings.Join(servers(&cfg.Config), ", "); got != tt.servers {
				t.Errorf("servers = %q, want %q", got, tt.servers)
			}
			pcfg, err := parsePoolConfig(tt.dsn)
			if err != nil {
				t.Fatal(err)
			}
			if got := pcfg.ConnConfig.ValidateConnect != nil; got != tt.readWrite {
				t.Errorf("pool: read-write = %v, want %v", got, tt.readWrite)
			}
		})
	}
	if _, err := ParseDSN("host=a,b port=1,2,3"); err == nil {
		t.Error("three ports for two hosts parsed")
	}
	if _, err := ParseDSN("host=a target_session_attrs=sometimes"); err == nil {
		t.Error("an unknown target_session_attrs parsed")
	}
}

// failoverDrill is what TestFailover* observe while a writer rides a
// failover.
type failoverDrill struct {
	emitted   atomic.Int64
	refused   atomic.Int64 // Records answered AUDIT-UNAVAILABLE
	committed atomic.Int64 // Records that committed
	mu        sync.Mutex
	ids       []string  // every event Emitted or Recorded with success
	refusedAt time.Time // the first refusal
	okAt      time.Time // the first commit after a refusal
}

// TestFailoverSynchronousReplica crashes the primary under a Store that
// emits lifecycle events and records decisions through a multi-host DSN,
// then promotes the synchronous replica: while no server takes writes,
// Record fails closed with AUDIT-UNAVAILABLE and Database names both
// servers; lifecycle events are spooled; after the promotion every event
// emitted and every decision acknowledged is in the trail exactly once,
// the chain verifies, and Database names the new primary.
func TestFailoverSynchronousReplica(t *testing.T) {
	for _, form := range []string{"keyword", "url"} {
		t.Run(form, func(t *testing.T) {
			r := audittest.NewReplicated(t, true)
			dsn := r.DSN("sandgate")
			if form == "url" {
				dsn = r.URL("sandgate")
			}
			s := testStore(t, dsn, func(c *Config) {
				c.RetryInterval = 50 * time.Millisecond
				c.DecisionChain = true
				c.CheckpointInterval = time.Second
			})
			ctx := context.Background()
			st, err := s.Database(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Primary != r.Primary.Addr() || st.ReadOnly || len(st.Servers) != 2 {
				t.Fatalf("before: database = %+v, want primary %s of two", st, r.Primary.Addr())
			}

			var d failoverDrill
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { // lifecycle events, as running containers make them
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
					ev := lifecycle(i, fmt.Sprintf("run-%d", i/4))
					ev.ID = s.cfg.IDs()
					s.Emit(ev)
					d.emitted.Add(1)
					d.mu.Lock()
					d.ids = append(d.ids, ev.ID)
					d.mu.Unlock()
				}
			}()
			go func() { // admission decisions
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					ev := sandgate.Event{ID: s.cfg.IDs(), Type: sandgate.EventAdmissionAllowed, RunID: fmt.Sprintf("adm-%d", i), Outcome: "allowed"}
					rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					err := s.Record(rctx, ev)
					cancel()
					switch {
					case err == nil:
						d.committed.Add(1)
						d.mu.Lock()
						d.ids = append(d.ids, ev.ID)
						if !d.refusedAt.IsZero() && d.okAt.IsZero() {
							d.okAt = time.Now()
						}
						d.mu.Unlock()
					case sandgate.ErrorCodeOf(err) == sandgate.CodeAuditUnavailable:
						d.refused.Add(1)
						d.mu.Lock()
						if d.refusedAt.IsZero() {
							d.refusedAt = time.Now()
						}
						d.mu.Unlock()
					default:
						t.Errorf("Record: %v, want nil or AUDIT-UNAVAILABLE", err)
					}
				}
			}()

			sandgatetest.WaitFor(t, "decisions before the crash", 30*time.Second, func() bool { return d.committed.Load() >= 20 })
			r.Primary.Crash(t)
			crashed := time.Now()
			sandgatetest.WaitFor(t, "a refused decision", 30*time.Second, func() bool { return d.refused.Load() > 0 })
			if err := s.Ready(ctx); sandgate.ErrorCodeOf(err) != sandgate.CodeAuditUnavailable {
				t.Errorf("Ready with no primary = %v, want AUDIT-UNAVAILABLE", err)
			}
			_, err = s.Database(ctx)
			if sandgate.ErrorCodeOf(err) != sandgate.CodeAuditUnavailable ||
				!strings.Contains(err.Error(), r.Primary.Addr()) || !strings.Contains(err.Error(), r.Replica.Addr()) {
				t.Errorf("Database with no primary = %v, want AUDIT-UNAVAILABLE naming both servers", err)
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				t.Errorf("Database: %v is a server's error, want a connection error", err)
			}
			sandgatetest.WaitFor(t, "events spooled", 30*time.Second, func() bool { return s.SpoolBytes() > 0 })
			time.Sleep(300 * time.Millisecond) // a gap of some length, with events in it

			r.Promote(t)
			promoted := time.Now()
			sandgatetest.WaitFor(t, "the writer to reach the new primary", 30*time.Second, func() bool { return s.Ready(ctx) == nil })
			before := d.committed.Load()
			sandgatetest.WaitFor(t, "decisions after the promotion", 30*time.Second, func() bool { return d.committed.Load() >= before+20 })
			close(stop)
			wg.Wait()
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			spooled, redelivered, present := s.SpoolCounts()
			t.Logf("primary crashed → promoted %v, promoted → first decision committed %v (decisions refused for %v); emitted %d, decisions committed %d, refused %d; spooled %d, redelivered %d, found present %d",
				promoted.Sub(crashed).Round(time.Millisecond), d.okAt.Sub(promoted).Round(time.Millisecond),
				d.okAt.Sub(d.refusedAt).Round(time.Millisecond), d.emitted.Load(), d.committed.Load(), d.refused.Load(),
				spooled, redelivered, present)
			if spooled == 0 || redelivered+present != spooled {
				t.Errorf("spooled %d, redelivered %d + found present %d: want every spooled event delivered", spooled, redelivered, present)
			}

			db := audittest.OpenDB(t, r.Replica.DSN("sandgate"))
			var stored, distinct int64
			if err := db.QueryRow(`SELECT count(*), count(DISTINCT event_id) FROM audit_events WHERE event_id = ANY($1::uuid[])`, d.ids).Scan(&stored, &distinct); err != nil {
				t.Fatal(err)
			}
			if stored != int64(len(d.ids)) || distinct != stored {
				t.Errorf("stored %d events (%d distinct) of %d emitted or acknowledged: want each once", stored, distinct, len(d.ids))
			}
			after := readOnly(t, r.Replica.DSN("sandgate"), trusting(s.PublicKey()))
			st, err = after.Database(ctx)
			if err != nil || st.Primary != r.Replica.Addr() || st.ReadOnly {
				t.Errorf("after: database = %+v, %v; want primary %s", st, err, r.Replica.Addr())
			}
			rep, err := after.Verifier().Verify(ctx, sandgate.VerifyRange{})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK {
				t.Errorf("verify after the failover: %+v", rep.Problems)
			}
		})
	}
}

// TestFailoverReplicaBehind promotes a replica that missed commits the
// primary acknowledged (asynchronous replication, the replica down while
// they were made): the writer must not deliver its next events on top of
// the gap. Readiness names the problem and decisions are refused.
func TestFailoverReplicaBehind(t *testing.T) {
	r := audittest.NewReplicated(t, false)
	s := testStore(t, r.DSN("sandgate"), func(c *Config) { c.RetryInterval = 50 * time.Millisecond })
	ctx := context.Background()
	record := func(i int) error {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return s.Record(rctx, sandgate.Event{Type: sandgate.EventAdmissionAllowed, RunID: fmt.Sprint("run-", i), Outcome: "allowed"})
	}
	for i := range 5 {
		if err := record(i); err != nil {
			t.Fatal(err)
		}
	}
	r.Replica.Stop(t)
	for i := 5; i < 10; i++ { // acknowledged by the primary alone
		if err := record(i); err != nil {
			t.Fatal(err)
		}
	}
	r.Primary.Crash(t)
	r.Replica.Start(t)
	r.Promote(t)
	for i := range 3 {
		s.Emit(lifecycle(i, "after"))
	}
	sandgatetest.WaitFor(t, "readiness to name the lost events", 30*time.Second, func() bool {
		err := s.Ready(ctx)
		return err != nil && errors.Is(err, errTrailBehind)
	})
	if err := record(99); sandgate.ErrorCodeOf(err) != sandgate.CodeAuditUnavailable {
		t.Errorf("Record on a trail that lost events = %v, want AUDIT-UNAVAILABLE", err)
	}
	db := audittest.OpenDB(t, r.Replica.DSN("sandgate"))
	if n := count(t, db, `SELECT count(*) FROM audit_events WHERE `+notKeyEvents+` AND run_id = 'after'`); n != 0 {
		t.Errorf("%d events delivered over the gap, want 0", n)
	}
}

// TestDatabaseStatusShared: readiness's database check is asked by anyone
// who can reach a gateway, and each answer costs a connection of its own.
// Many callers at once share one answer for dbStatusTTL: the connections
// opened are at most one per TTL that passed, not one per caller. Once
// the TTL is over, the next caller asks again and sees Postgres gone.
func TestDatabaseStatusShared(t *testing.T) {
	requirePGSocket(t)
	_, db := newDB(t)
	p := newProxy(t, pgSocket)
	s := testStore(t, proxiedDSN(t, db, p), nil)
	ctx := context.Background()
	if _, err := s.DatabaseStatus(ctx); err != nil {
		t.Fatal(err)
	}
	before, start := p.connections(), time.Now()
	var wg sync.WaitGroup
	lines := make([]string, 64)
	errs := make([]error, 64)
	for i := range lines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines[i], errs[i] = s.DatabaseStatus(ctx)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i := range lines {
		if errs[i] != nil || !strings.HasPrefix(lines[i], "primary 127.0.0.1:") {
			t.Fatalf("caller %d: %q %v", i, lines[i], errs[i])
		}
	}
	if opened, most := p.connections()-before, 1+int(elapsed/dbStatusTTL); opened > most {
		t.Errorf("64 callers in %v opened %d connections, want at most %d", elapsed, opened, most)
	}
	p.cut()
	time.Sleep(dbStatusTTL + 100*time.Millisecond) // the shared answer is over
	if _, err := s.DatabaseStatus(ctx); !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Errorf("with Postgres away: %v, want AUDIT-UNAVAILABLE", err)
	}
}
