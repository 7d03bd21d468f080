package runstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
)

// TestTakeOverExactlyOnce has eight survivors take one lapsed node over at
// once, each on its own Store: exactly one gets it, with the dead node's
// unfinished runs and open sessions, which are then the survivor's; a
// finished run stays the dead node's.
func TestTakeOverExactlyOnce(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	ctx := context.Background()
	s := testStore(t, dsn, nil)
	if err := s.RegisterNode(ctx, sandgate.Node{Name: "dead", DockerHost: "tcp://10.0.0.9:2376", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	mk := func(id string, st sandgate.State) {
		t.Helper()
		r := &sandgate.Run{ID: id, Principal: "alice", Team: "payments", Node: "dead", State: st, Spec: sandgate.RunSpec{Image: "x"}}
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	mk("r-running", sandgate.StateRunning)
	mk("r-pending", sandgate.StatePending)
	mk("r-done", sandgate.StateFinished)
	ss := &sandgate.Session{ID: "s-1", Team: "payments", Node: "dead", State: sandgate.SessionOpen, CreatedAt: time.Now(), LastActiveAt: time.Now()}
	if err := s.CreateSession(ctx, ss); err != nil {
		t.Fatal(err)
	}
	// Not lapsed yet: nobody may take it.
	if _, ok, err := s.TakeOver(ctx, "dead", "early", time.Minute); err != nil || ok {
		t.Fatalf("TakeOver of a fresh node = %v, %v; want refused", ok, err)
	}
	time.Sleep(1100 * time.Millisecond)
	var mu sync.Mutex
	var winners []string
	var got sandgate.Takeover
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := testStore(t, dsn, nil)
			name := fmt.Sprintf("survivor-%d", i)
			tk, ok, err := st.TakeOver(ctx, "dead", name, time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				mu.Lock()
				winners, got = append(winners, name), tk
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d survivors took the node over (%v), want exactly 1", len(winners), winners)
	}
	if len(got.Runs) != 2 || len(got.Sessions) != 1 || got.Dead.DockerHost != "tcp://10.0.0.9:2376" {
		t.Fatalf("takeover = %+v, want 2 runs, 1 session and the dead node's daemon", got)
	}
	for id, node := range map[string]string{"r-running": winners[0], "r-pending": winners[0], "r-done": "dead"} {
		r, err := s.GetRun(ctx, id)
		if err != nil || r.Node != node {
			t.Errorf("run %s: node %q (%v), want %q", id, r.Node, err, node)
		}
	}
	nodes, err := s.ListNodes(ctx, time.Second)
	if err != nil || len(nodes) != 1 || nodes[0].State != sandgate.NodeGone || nodes[0].TakenOverBy != winners[0] {
		t.Fatalf("ListNodes = %+v, %v; want the dead node gone, taken over by %s", nodes, err, winners[0])
	}
	// Its heartbeat answers that it was taken; registering again revives it.
	if err := s.Heartbeat(ctx, sandgate.Node{Name: "dead"}); !isCode(err, sandgate.CodeNotFound) {
		t.Errorf("Heartbeat of a node taken over = %v, want NOT-FOUND", err)
	}
	if err := s.RegisterNode(ctx, sandgate.Node{Name: "dead"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, sandgate.Node{Name: "dead", Running: 3}); err != nil {
		t.Errorf("Heartbeat after registering again: %v", err)
	}
}

// TestClaimIdempotencyKeyRace claims one key for eight run IDs at once:
// one claim wins, and every other caller is told the winner's run ID.
func TestClaimIdempotencyKeyRace(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	ctx := context.Background()
	var mu sync.Mutex
	won := map[string]bool{}
	named := map[string]int{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := testStore(t, dsn, nil)
			id := fmt.Sprintf("run-%d", i)
			held, _, err := st.ClaimIdempotencyKey(ctx, "alice", "k-1", id, "d1")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if held == "" {
				won[id] = true
			} else {
				named[held]++
			}
		}()
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d claims won (%v), want 1", len(won), won)
	}
	for id := range won {
		if named[id] != 7 {
			t.Errorf("the other callers were told %v, want run %s 7 times", named, id)
		}
		// The winner's run is created under its claim; a release after
		// that is refused for another run ID.
		s := testStore(t, dsn, nil)
		if err := s.CreateRun(ctx, &sandgate.Run{ID: id, Principal: "alice", IdempotencyKey: "k-1", Spec: sandgate.RunSpec{Image: "x"}}); err != nil {
			t.Fatalf("CreateRun under its own claim: %v", err)
		}
		if err := s.ReleaseIdempotencyKey(ctx, "alice", "k-1", "run-other"); err != nil {
			t.Fatal(err)
		}
		if held, digest, _ := s.ClaimIdempotencyKey(ctx, "alice", "k-1", "run-late", "d2"); held != id || digest != "d1" {
			t.Errorf("a late claim was told %q (digest %q), want %s and the winner's digest", held, digest, id)
		}
	}
}

// TestReserveSlotAcrossNodes holds a team to two runs and 1000 MB over
// two nodes reserving at once.
func TestReserveSlotAcrossNodes(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	ctx := context.Background()
	limits := sandgate.SlotLimits{TeamRuns: 2, TeamMemoryMB: 1000}
	var mu sync.Mutex
	ok := 0
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := testStore(t, dsn, nil)
			_, fits, err := st.ReserveSlot(ctx, sandgate.Slot{RunID: fmt.Sprintf("r%d", i), Team: "payments", Node: fmt.Sprintf("n%d", i%2), MemoryMB: 400}, limits)
			if err != nil {
				t.Error(err)
				return
			}
			if fits {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 2 {
		t.Fatalf("%d reservations fit, want 2", ok)
	}
	s := testStore(t, dsn, nil)
	if _, fits, _ := s.ReserveSlot(ctx, sandgate.Slot{RunID: "other", Team: "search", Node: "n0"}, limits); !fits {
		t.Error("another team was refused")
	}
	load, err := s.NodeSlots(ctx)
	if err != nil || load["n0"]+load["n1"] != 3 {
		t.Fatalf("NodeSlots = %v, %v; want 3 slots", load, err)
	}
	if err := s.ReleaseNodeSlots(ctx, "n0", []string{"other"}); err != nil {
		t.Fatal(err)
	}
	if load, _ = s.NodeSlots(ctx); load["n0"] != 1 {
		t.Errorf("after ReleaseNodeSlots n0 holds %d slots, want 1 (the kept one)", load["n0"])
	}
}

// TestClaimIdempotencyKeyAbandoned: a claim whose run was never stored
// (its node died mid-admission) holds the key for ClaimTimeout, then the
// next request takes it; a claim whose run exists holds it for the whole
// window.
func TestClaimIdempotencyKeyAbandoned(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	s := testStore(t, dsn, func(c *Config) { c.Clock = func() time.Time { return now } })
	for _, tc := range []struct {
		key    string
		stored bool
	}{{"abandoned", false}, {"stored", true}} {
		if held, _, err := s.ClaimIdempotencyKey(ctx, "alice", tc.key, tc.key+"-1", ""); err != nil || held != "" {
			t.Fatalf("first claim of %s: %q, %v", tc.key, held, err)
		}
		if tc.stored {
			if err := s.CreateRun(ctx, &sandgate.Run{ID: tc.key + "-1", Principal: "alice", IdempotencyKey: tc.key, Spec: sandgate.RunSpec{Image: "x"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	now = now.Add(ClaimTimeout / 2)
	for _, key := range []string{"abandoned", "stored"} {
		if held, _, _ := s.ClaimIdempotencyKey(ctx, "alice", key, key+"-2", ""); held != key+"-1" {
			t.Errorf("claim of %s within the timeout: held %q, want %s-1", key, held, key)
		}
	}
	now = now.Add(ClaimTimeout)
	if held, _, _ := s.ClaimIdempotencyKey(ctx, "alice", "abandoned", "abandoned-3", ""); held != "" {
		t.Errorf("an abandoned claim past the timeout still held by %q", held)
	}
	if held, _, _ := s.ClaimIdempotencyKey(ctx, "alice", "stored", "stored-3", ""); held != "stored-1" {
		t.Errorf("a stored run's key past the claim timeout: held %q, want stored-1", held)
	}
}

// TestTakeOverFencesChains: the takeover's transaction fences the dead
// node's chains (its own and its decision chain) at their heads, for the
// survivor, and no other node's; the fenced node's row can still be told
// the events it holds.
func TestTakeOverFencesChains(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	db := audittest.OpenDB(t, dsn)
	ctx := context.Background()
	s := testStore(t, dsn, nil)
	for _, n := range []string{"dead", "alive"} {
		if err := s.RegisterNode(ctx, sandgate.Node{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		chain, node string
		head        int64
	}{{"dead-1", "dead", 7}, {"dead-decisions-1", "dead", 2}, {"dead-empty", "dead", 0}, {"alive-1", "alive", 4}} {
		if _, err := db.Exec(`INSERT INTO audit_chains (chain_id, node, key_id) VALUES ($1, $2, 'k')`, c.chain, c.node); err != nil {
			t.Fatal(err)
		}
		if c.head > 0 {
			if _, err := db.Exec(`INSERT INTO audit_heads (chain_id, seq, hash) VALUES ($1, $2, decode(repeat('00', 32), 'hex'))`, c.chain, c.head); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(1100 * time.Millisecond)
	tk, ok, err := s.TakeOver(ctx, "dead", "survivor", time.Second)
	if err != nil || !ok {
		t.Fatalf("TakeOver = %v %v", ok, err)
	}
	if tk.ChainsFenced != 3 {
		t.Errorf("ChainsFenced = %d, want 3", tk.ChainsFenced)
	}
	rows, err := db.Query(`SELECT chain_id, seq, fenced_by FROM audit_fences ORDER BY chain_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var chain, by string
		var seq int64
		if err := rows.Scan(&chain, &seq, &by); err != nil {
			t.Fatal(err)
		}
		got[chain] = fmt.Sprintf("%d by %s", seq, by)
	}
	want := map[string]string{"dead-1": "7 by survivor", "dead-decisions-1": "2 by survivor", "dead-empty": "0 by survivor"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fences = %v, want %v", got, want)
	}
	if err := s.ReportHeld(ctx, "dead", 5); err != nil {
		t.Fatal(err)
	}
	nodes, err := s.ListNodes(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Name == "dead" && (n.HeldEvents != 5 || n.State != sandgate.NodeGone) {
			t.Errorf("dead node = %+v, want gone holding 5 events", n)
		}
	}
}
