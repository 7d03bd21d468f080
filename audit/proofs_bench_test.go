package audit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate/audit/proof"
)

// emitRun is BenchmarkEmitThroughput's measure: 8 producers emit total
// events into a fresh database; the rate at which the last is committed.
func emitRun(b *testing.B, total int, noTree bool) float64 {
	return emitRunWith(b, total, func(c *Config) { c.noTree = noTree })
}

// emitRunWith is emitRun with the store's config adjusted by mod.
func emitRunWith(b *testing.B, total int, mod func(*Config)) float64 {
	const producers = 8
	dsn, _ := newDB(b)
	s := testStore(b, dsn, mod)
	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < total; i += producers {
				s.Emit(benchEvent(i))
			}
		}()
	}
	wg.Wait()
	if err := s.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	return float64(total) / time.Since(start).Seconds()
}

// BenchmarkEmitThroughputTree compares the sustained lifecycle rate with
// the Merkle tree maintained (stored hashes computed by the writer and
// stored by its builder, a note signed at each checkpoint, every 1000
// events) and without, in the same process: SANDGATE_BENCH_ROUNDS rounds
// (default 7) of 100,000 events each way, back to back in alternating
// order, so that the machine's drift falls on both. It reports the median
// of each and the median of the rounds' ratios.
func BenchmarkEmitThroughputTree(b *testing.B) {
	rounds := envInt("SANDGATE_BENCH_ROUNDS", 7)
	const total = 100_000
	for b.Loop() {
		var with, without, ratios []float64
		for r := range rounds {
			var wr, wo float64
			if r%2 == 0 {
				wr = emitRun(b, total, false)
				wo = emitRun(b, total, true)
			} else {
				wo = emitRun(b, total, true)
				wr = emitRun(b, total, false)
			}
			with, without, ratios = append(with, wr), append(without, wo), append(ratios, wr/wo)
			b.Logf("round %d: with tree %.0f events/s, without %.0f: %.3f", r+1, wr, wo, wr/wo)
		}
		med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
		b.ReportMetric(med(with), "tree-events/s")
		b.ReportMetric(med(without), "no-tree-events/s")
		b.ReportMetric(med(ratios), "ratio")
	}
}

// BenchmarkEmitThroughputTreeParts tells where the tree's cost lies:
// rounds of 100,000 events with the tree maintained whole, with the tree
// computed and its notes signed but no hash stored (the writer's share),
// and without a tree, in rotating order. It reports each way's median rate
// and the medians of the two ratios to the rate without a tree.
func BenchmarkEmitThroughputTreeParts(b *testing.B) {
	rounds := envInt("SANDGATE_BENCH_ROUNDS", 7)
	const total = 100_000
	modes := []struct {
		name string
		mod  func(*Config)
	}{
		{"tree", func(*Config) {}},
		{"unstored", func(c *Config) { c.treeUnstored = true }},
		{"none", func(c *Config) { c.noTree = true }},
	}
	for b.Loop() {
		rates := map[string][]float64{}
		var whole, writer []float64
		for r := range rounds {
			got := map[string]float64{}
			for i := range modes {
				m := modes[(i+r)%len(modes)]
				got[m.name] = emitRunWith(b, total, m.mod)
				rates[m.name] = append(rates[m.name], got[m.name])
			}
			whole = append(whole, got["tree"]/got["none"])
			writer = append(writer, got["unstored"]/got["none"])
			b.Logf("round %d: tree %.0f, unstored %.0f, none %.0f events/s: %.3f %.3f", r+1,
				got["tree"], got["unstored"], got["none"], got["tree"]/got["none"], got["unstored"]/got["none"])
		}
		med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
		b.ReportMetric(med(rates["tree"]), "tree-events/s")
		b.ReportMetric(med(rates["unstored"]), "unstored-events/s")
		b.ReportMetric(med(rates["none"]), "no-tree-events/s")
		b.ReportMetric(med(whole), "tree-ratio")
		b.ReportMetric(med(writer), "unstored-ratio")
	}
}

// bigTree stores a chain's tree of n leaves straight into
// audit_tree_hashes (the leaves are made-up event hashes), a checkpoint
// note over it, and sample events rows at spread-out seqs whose hashes are
// the leaves: what an inclusion proof reads. It returns the chain, the
// sample event IDs with their seqs, and the root.
func bigTree(b *testing.B, s *Store, n int64, samples int) (string, map[string]int64, tlog.Hash) {
	ctx := context.Background()
	chain := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	stored := make([]tlog.Hash, 0, tlog.StoredHashCount(n))
	r := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	leaf := func(i int64) []byte {
		var buf [8]byte
		binary.BigEndian.PutUint64(buf[:], uint64(i))
		h := sha256.Sum256(buf[:])
		return h[:]
	}
	for i := range n {
		hs, err := tlog.StoredHashesForRecordHash(i, proof.LeafHash(leaf(i)), r)
		if err != nil {
			b.Fatal(err)
		}
		stored = append(stored, hs...)
	}
	start := time.Now()
	// As the writer stores them: a run of stored hashes per batch of
	// 1000 events.
	var rows [][]any
	for i := int64(0); i < n; i += 1000 {
		from, to := tlog.StoredHashIndex(0, i), tlog.StoredHashCount(min(i+1000, n))
		rows = append(rows, treeRow(chain, from, stored[from:to]))
	}
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"audit_tree_hashes"}, treeColumns, pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
	b.Logf("stored %d tree hashes of %d leaves in %v", len(stored), n, time.Since(start))
	root, err := tlog.TreeHash(n, r)
	if err != nil {
		b.Fatal(err)
	}
	msg, err := proof.SignNote(s.key, proof.Origin("bench", chain), n, root)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO audit_checkpoints (chain_id, seq, head_hash, created_at, signature, key_id, public_key, note)
		VALUES ($1, $2, $3, now(), '\x00', 'k', '\x00', $4)`, chain, n, leaf(n-1), msg); err != nil {
		b.Fatal(err)
	}
	ids := map[string]int64{}
	for k := range samples {
		seq := 1 + int64(k)*(n/int64(samples)) + int64(k%7)
		id := uuid.Must(uuid.NewV7()).String()
		if _, err := s.pool.Exec(ctx, `INSERT INTO audit_events (event_id, chain_id, seq, event_time, type, body, prev_hash, hash)
			VALUES ($1, $2, $3, now(), 'bench', '\x7b7d', $4, $5)`, id, chain, seq, make([]byte, 32), leaf(seq-1)); err != nil {
			b.Fatal(err)
		}
		ids[id] = seq
	}
	return chain, ids, root
}

// BenchmarkProofLatency1M measures the inclusion and consistency proofs the
// Store answers for a chain of 1,000,000 events (SANDGATE_BENCH_LEAVES):
// each answer is checked with tlog, and the p50 and p99 of 2000 of each
// reported. An answer is the event looked up, the checkpoint note and its
// cosignatures read, and the proof's stored hashes read in one query.
func BenchmarkProofLatency1M(b *testing.B) {
	n := int64(envInt("SANDGATE_BENCH_LEAVES", 1_000_000))
	const requests = 2000
	for b.Loop() {
		dsn, _ := newDB(b)
		s := testStore(b, dsn, nil)
		chain, ids, root := bigTree(b, s, n, 500)
		ctx := context.Background()
		var keys []string
		for id := range ids {
			keys = append(keys, id)
		}
		incl := make([]time.Duration, requests)
		cons := make([]time.Duration, requests)
		for i := range requests {
			id := keys[i%len(keys)]
			t0 := time.Now()
			p, err := s.Proofs().InclusionProof(ctx, id, 0)
			incl[i] = time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			if err := tlog.CheckRecord(toHashes(p.Hashes), n, root, p.LeafIndex, proof.LeafHash(p.EventHash)); err != nil {
				b.Fatalf("inclusion of %d: %v", p.Seq, err)
			}
			from := 1 + int64(i)*(n/requests)
			t0 = time.Now()
			c, err := s.Proofs().ConsistencyProof(ctx, chain, from, 0)
			cons[i] = time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			if err := tlog.CheckTree(toHashes(c.Hashes), n, root, from, tlog.Hash(c.FromRoot)); err != nil {
				b.Fatalf("consistency from %d: %v", from, err)
			}
		}
		pct := func(lat []time.Duration, p float64) float64 {
			slices.Sort(lat)
			return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
		}
		b.ReportMetric(pct(incl, 0.50), "inclusion-p50-ms")
		b.ReportMetric(pct(incl, 0.99), "inclusion-p99-ms")
		b.ReportMetric(pct(cons, 0.50), "consistency-p50-ms")
		b.ReportMetric(pct(cons, 0.99), "consistency-p99-ms")
	}
}

// BenchmarkTreeAddLeaves is the tree builder's hasher per event, which
// used to be the writer's own share of the tree: a leaf's stored hashes
// from the in-memory frontier, the frontier kept small, and the run
// handed to the storer (here a goroutine that drops it), in batches of
// 1000 as under load; plus one note root per batch. The writer itself
// now only hands each batch's hashes over (writer-ns/event).
func BenchmarkTreeAddLeaves(b *testing.B) {
	w := &writer{chainID: "bench-chain"}
	tb := &treeBuilder{w: w, in: make(chan treeMsg, 1024), rows: make(chan []any, 1024), st: proof.NewFrontier()}
	w.tree = tb
	go func() {
		for range tb.rows {
			tb.pending.Done()
		}
	}()
	const batch = 1000
	recs := make([]*sealed, batch)
	for i := range recs {
		h := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		recs[i] = &sealed{ChainID: w.chainID, Hash: h[:]}
	}
	var handing time.Duration
	b.ResetTimer()
	seq := int64(0)
	for i := 0; i < b.N; i += batch {
		for _, r := range recs {
			seq++
			r.Seq = seq
		}
		t0 := time.Now()
		w.addLeaves(recs)
		m := <-tb.in
		handing += time.Since(t0)
		tb.add(m.first, m.hashes)
		if _, err := tb.st.Root(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((b.Elapsed()-handing).Nanoseconds())/float64(seq), "ns/event")
	b.ReportMetric(float64(handing.Nanoseconds())/float64(seq), "writer-ns/event")
}

// BenchmarkTreeCatchUp measures how fast a writer builds the tree of a
// chain that has none (a trail from before migration 9): 200,000 events
// (SANDGATE_BENCH_CATCHUP) written with the tree off, then a writer with
// it on closes, and its final checkpoint reads and stores them all.
func BenchmarkTreeCatchUp(b *testing.B) {
	n := envInt("SANDGATE_BENCH_CATCHUP", 200_000)
	for b.Loop() {
		dsn, _ := newDB(b)
		dir := b.TempDir()
		mod := func(c *Config) { c.SpoolDir, c.SigningKeyFile = dir+"/spool", dir+"/key" }
		s := testStore(b, dsn, func(c *Config) { mod(c); c.noTree = true })
		for i := range n {
			s.Emit(benchEvent(i))
		}
		if err := s.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		s = testStore(b, dsn, mod)
		start := time.Now()
		if err := s.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		cp, err := readOnly(b, dsn, nil).Proofs().Checkpoint(context.Background(), s.ChainID())
		if err != nil || cp.TreeSize < int64(n) {
			b.Fatalf("after catch-up: %+v %v", cp, err)
		}
		b.ReportMetric(elapsed.Seconds(), "catch-up-s")
		b.ReportMetric(float64(cp.TreeSize)/elapsed.Seconds(), "leaves/s")
	}
}
