package audit

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// TestConcurrentWritersKeepOrderAndChain: many producers emitting and
// recording at once get one gapless chain, each producer's events in the
// order it sent them, and verify passes.
func TestConcurrentWritersKeepOrderAndChain(t *testing.T) {
	for _, tt := range []struct {
		name          string
		decisionChain bool
	}{{"one chain", false}, {"decision chain", true}} {
		t.Run(tt.name, func(t *testing.T) { testConcurrentWriters(t, tt.decisionChain) })
	}
}

func testConcurrentWriters(t *testing.T, decisionChain bool) {
	dsn, db := newDB(t)
	s := testStore(t, dsn, func(c *Config) { c.CheckpointEvery = 100; c.MaxBatch = 64; c.DecisionChain = decisionChain })
	const producers, each = 8, 150
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := fmt.Sprintf("run-%d", p)
			for i := range each {
				ev := lifecycle(i, run)
				if i%10 == 0 {
					ev.Type = sandgate.EventAdmissionAllowed
					if err := s.Record(context.Background(), ev); err != nil {
						t.Errorf("Record: %v", err)
					}
					continue
				}
				s.Emit(ev)
			}
		}()
	}
	wg.Wait()
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	total := int64(producers * each)
	if got := count(t, db, "SELECT count(*) FROM audit_events WHERE "+notKeyEvents); got != total {
		t.Fatalf("rows = %d, want %d", got, total)
	}
	wantChains := int64(1)
	if decisionChain {
		wantChains = 2
		if got := count(t, db, "SELECT count(*) FROM audit_events WHERE chain_id = $1 AND "+notKeyEvents, s.ChainID()); got != total*9/10 {
			t.Errorf("lifecycle chain rows = %d, want %d", got, total*9/10)
		}
	}
	if got := count(t, db, "SELECT count(DISTINCT chain_id) FROM audit_events"); got != wantChains {
		t.Fatalf("chains = %d, want %d", got, wantChains)
	}
	if got := count(t, db, "SELECT count(*) FROM (SELECT chain_id FROM audit_events GROUP BY chain_id HAVING max(seq) <> count(*)) x"); got != 0 {
		t.Fatalf("%d chains with gaps", got)
	}
	// Each producer's events appear in its order.
	if got := count(t, db, `SELECT count(*) FROM (
		SELECT (payload->>'i')::int - lag((payload->>'i')::int) OVER (PARTITION BY run_id, chain_id ORDER BY seq) AS d
		FROM audit_events) x WHERE d <= 0`); got != 0 {
		t.Fatalf("%d events out of their producer's order", got)
	}
	rep, err := readOnly(t, dsn, func(c *Config) { c.Anchors.Pinned = append(c.Anchors.Pinned, s.PublicKey()) }).Verifier().Verify(context.Background(), sandgate.VerifyRange{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if !rep.OK || rep.Checked != total+1 { // and the key's registration
		t.Fatalf("Verify = ok %v checked %d, problems %v", rep.OK, rep.Checked, rep.Problems)
	}
	if got := count(t, db, "SELECT count(*) FROM audit_checkpoints WHERE final"); got != wantChains {
		t.Fatalf("final checkpoints = %d, want one per chain", got)
	}
}

// TestRecordGivenUpIsNotWritten: a decision whose caller stopped waiting
// before it was sealed is not recorded (the caller was told
// AUDIT-UNAVAILABLE and will not act on it).
func TestRecordGivenUpIsNotWritten(t *testing.T) {
	dsn, db := newDB(t)
	s := testStore(t, dsn, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Record(ctx, sandgate.Event{Type: sandgate.EventAdmissionAllowed, RunID: "gave-up"})
	if !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Fatalf("Record with a done context = %v, want AUDIT-UNAVAILABLE", err)
	}
	if err := s.Record(context.Background(), sandgate.Event{Type: sandgate.EventAdmissionAllowed, RunID: "kept"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := count(t, db, "SELECT count(*) FROM audit_events WHERE run_id = 'gave-up'"); got != 0 {
		t.Errorf("abandoned decision stored %d times", got)
	}
	// The kept decision, then the key's registration before the final
	// checkpoint.
	if got := count(t, db, "SELECT max(seq) FROM audit_events"); got != 2 {
		t.Errorf("max seq = %d, want 2 (no hole for the abandoned decision)", got)
	}
}

// TestSecondWriterOnOneChainIsRefused: two processes configured with the
// same chain ID cannot fork it. Each seals on the head it knows; the
// database refuses the batch whose head has moved, at seq 1 and later.
func TestSecondWriterOnOneChainIsRefused(t *testing.T) {
	dsn, db := newDB(t)
	a := testStore(t, dsn, func(c *Config) { c.ChainID = "shared" })
	b := testStore(t, dsn, func(c *Config) { c.ChainID = "shared" })
	ctx := context.Background()
	if err := a.Record(ctx, lifecycle(0, "run-a")); err != nil {
		t.Fatalf("first writer: %v", err)
	}
	if err := b.Record(ctx, lifecycle(0, "run-b")); !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Fatalf("second writer at seq 1: %v, want AUDIT-UNAVAILABLE", err)
	}
	if err := a.Record(ctx, lifecycle(1, "run-a")); err != nil {
		t.Fatalf("first writer again: %v", err)
	}
	if got := count(t, db, "SELECT count(*) FROM audit_events WHERE chain_id = 'shared'"); got != 2 {
		t.Fatalf("rows = %d, want 2 (the first writer's)", got)
	}
	// A writer that starts now sees seq 2 as the head; the first moves
	// the chain on, so the newcomer's next batch is refused too.
	c := testStore(t, dsn, func(c *Config) { c.ChainID = "shared" })
	if err := a.Record(ctx, lifecycle(2, "run-a")); err != nil {
		t.Fatalf("first writer: %v", err)
	}
	if err := c.Record(ctx, lifecycle(0, "run-c")); !isCode(err, sandgate.CodeAuditUnavailable) {
		t.Fatalf("late writer past seq 1: %v, want AUDIT-UNAVAILABLE", err)
	}
	for _, s := range []*Store{a, b, c} {
		_ = s.Close(ctx)
	}
	rep, err := readOnly(t, dsn, nil).Verifier().Verify(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	if kinds := problemKinds(rep); kinds[proof.ProblemSeqOrder] > 0 || kinds[proof.ProblemPrevHashMismatch] > 0 || kinds[proof.ProblemHashMismatch] > 0 {
		t.Fatalf("the chain was forked: %v", rep.Problems)
	}
}
