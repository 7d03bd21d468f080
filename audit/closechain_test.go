package audit

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestCloseChainsOf has node b close the chain of node a, which stopped
// without a final checkpoint: b signs a final checkpoint of a's head with
// its own key and records audit.chain_closed in its chain; a second call
// finds nothing to close; the trail verifies with both nodes' keys pinned
// (a's chain is no longer stale).
func TestCloseChainsOf(t *testing.T) {
	dsn, db := newDB(t)
	ctx := context.Background()
	a := testStore(t, dsn, func(c *Config) {
		c.Node, c.CheckpointEvery, c.CheckpointInterval = "node-a", 1000, time.Hour
	})
	for i := range 3 {
		if err := a.Record(ctx, lifecycle(i, "run-a")); err != nil {
			t.Fatal(err)
		}
	}
	b := testStore(t, dsn, func(c *Config) {
		c.Node, c.CheckpointInterval = "node-b", 20*time.Millisecond
	})
	if err := b.Record(ctx, lifecycle(0, "run-b")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Takeover().CloseChainsOf(ctx, "node-a", "self"); err == nil {
		t.Error("a node closed its own chain")
	}
	closed, err := b.Takeover().CloseChainsOf(ctx, "node-a", "node-a stopped heartbeating")
	if err != nil {
		t.Fatal(err)
	}
	if len(closed) != 1 || closed[0].ChainID != a.ChainID() || closed[0].Seq != 3 || closed[0].KeyID != proof.KeyID(b.PublicKey()) {
		t.Fatalf("closed = %+v, want a's chain at seq 3 signed with b's key", closed)
	}
	if n := count(t, db, `SELECT count(*) FROM audit_checkpoints WHERE chain_id = $1 AND final AND key_id = $2`, a.ChainID(), closed[0].KeyID); n != 1 {
		t.Errorf("%d final checkpoints of a's chain by b's key, want 1", n)
	}
	sandgatetest.WaitFor(t, "audit.chain_closed in b's chain", 10*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM audit_events WHERE chain_id = $1 AND type = $2
			AND payload->>'chain_id' = $3 AND payload->>'signed_by_node' = 'node-b'`,
			b.ChainID(), string(sandgate.EventAuditChainClosed), a.ChainID()) == 1
	})
	again, err := b.Takeover().CloseChainsOf(ctx, "node-a", "again")
	if err != nil || len(again) != 0 {
		t.Fatalf("second close = %+v, %v; want nothing to close", again, err)
	}
	rep, err := readOnly(t, dsn, trusting(a.PublicKey(), b.PublicKey())).Verifier().Verify(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Errorf("verify after the close: %+v", rep.Problems)
	}
}
