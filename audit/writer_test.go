package audit

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sandgate/sandgate"
)

// TestConcurrentWritersKeepOrderAndChain: many producers emitting and
// recording at once get one gapless chain, each producer's events in the
// order it sent them, and verify passes.
func TestConcurrentWritersKeepOrderAndChain(t *testing.T) {
	dsn, db := newDB(t)
	s := testStore(t, dsn, func(c *Config) { c.CheckpointEvery = 100; c.MaxBatch = 64 })
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
	chain := s.ChainID()
	total := int64(producers * each)
	if got := count(t, db, "SELECT count(*) FROM audit_events WHERE chain_id = $1", chain); got != total {
		t.Fatalf("rows = %d, want %d", got, total)
	}
	if got := count(t, db, "SELECT max(seq) FROM audit_events WHERE chain_id = $1", chain); got != total {
		t.Fatalf("max seq = %d, want %d (gapless)", got, total)
	}
	// Each producer's events appear in its order.
	if got := count(t, db, `SELECT count(*) FROM (
		SELECT (payload->>'i')::int - lag((payload->>'i')::int) OVER (PARTITION BY run_id ORDER BY seq) AS d
		FROM audit_events) x WHERE d <> 1`); got != 0 {
		t.Fatalf("%d events out of their producer's order", got)
	}
	rep, err := readOnly(t, dsn, func(c *Config) { c.TrustedKeys = append(c.TrustedKeys, s.PublicKey()) }).Verify(context.Background(), sandgate.VerifyRange{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if !rep.OK || rep.Checked != total {
		t.Fatalf("Verify = ok %v checked %d, problems %v", rep.OK, rep.Checked, rep.Problems)
	}
	if got := count(t, db, "SELECT count(*) FROM audit_checkpoints WHERE chain_id = $1 AND final", chain); got != 1 {
		t.Fatalf("final checkpoints = %d, want 1", got)
	}
}
