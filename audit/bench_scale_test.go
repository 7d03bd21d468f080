package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/sandgatetest"
)

// BenchmarkScaleTrail measures the trail at 100k, 1M and 10M events
// (SANDGATE_BENCH_SCALE=full; make bench the first; SANDGATE_BENCH_EVENTS
// lists sizes by hand), grown in one database by trailGen: valid chains,
// trees and signed checkpoints loaded with COPY. At each size, through a
// read-only Store as the API reads it:
//
//   - Query by correlation ID and by run ID (a run's seven events), 300
//     each: p50 and p99 (goal at 10M: p99 ≤ 20 ms);
//   - Export of the newest million events (all of them below that) as
//     JSON Lines: events/s (goal ≥ 100k/s);
//   - VerifyTrail over the whole trail, which must find nothing: events/s
//     (goal ≥ 200k/s);
//   - InclusionProof of 300 sampled events, each checked with tlog: p50
//     and p99 (goal ≤ 5 ms).
func BenchmarkScaleTrail(b *testing.B) {
	sizes := sandgatetest.ScaleSizes("SANDGATE_BENCH_EVENTS", []int{100_000}, []int{100_000, 1_000_000, 10_000_000})
	ctx := context.Background()
	dsn, _ := newDB(b)
	g := newTrailGen(b, dsn)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	// The verifier pins the node's key, as an operator does
	// (SANDGATE_TRUSTED_KEYS_FILE).
	s := readOnly(b, dsn, func(c *Config) {
		c.Anchors = proof.Anchors{Pinned: []ed25519.PublicKey{g.key.Public().(ed25519.PublicKey)}}
	})
	var base trailFigures
	for _, n := range sizes {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			if g.n < n {
				start := time.Now()
				g.grow(b, conn, n)
				b.Logf("trail grown to %d events in %v", n, time.Since(start).Round(time.Second))
			}
			var f trailFigures
			for b.Loop() {
				f = measureTrail(b, s, g)
			}
			if base.corrP99 == 0 {
				base = f
			}
			b.ReportMetric(sandgatetest.Millis(f.corrP50), "corr-p50-ms")
			b.ReportMetric(sandgatetest.Millis(f.corrP99), "corr-p99-ms")
			b.ReportMetric(sandgatetest.Millis(f.runP50), "run-p50-ms")
			b.ReportMetric(sandgatetest.Millis(f.runP99), "run-p99-ms")
			b.ReportMetric(f.export, "export-events/s")
			b.ReportMetric(f.verify, "verify-events/s")
			b.ReportMetric(float64(f.exportCPU.Nanoseconds())/1000, "export-go-cpu-us/event")
			b.ReportMetric(float64(f.verifyCPU.Nanoseconds())/1000, "verify-go-cpu-us/event")
			b.ReportMetric(sandgatetest.Millis(f.proofP50), "proof-p50-ms")
			b.ReportMetric(sandgatetest.Millis(f.proofP99), "proof-p99-ms")
			b.ReportMetric(float64(f.corrP99)/float64(base.corrP99), "corr-p99-x-smallest")
			b.ReportMetric(f.verify/base.verify, "verify-rate-x-smallest")
		})
	}
}

// trailFigures are one size's measurements.
type trailFigures struct {
	corrP50, corrP99, runP50, runP99, proofP50, proofP99 time.Duration
	export, verify                                       float64
	// exportCPU and verifyCPU are this process's CPU time per event
	// (user and system): the Go side's cost whatever the machine's load.
	exportCPU, verifyCPU time.Duration
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countingWriter counts the lines written through it.
type countingWriter struct{ lines int }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.lines += bytes.Count(p, []byte{'\n'})
	return len(p), nil
}

func measureTrail(b *testing.B, s *Store, g *trailGen) trailFigures {
	ctx := context.Background()
	var f trailFigures
	var corr, run, proofLat []time.Duration
	for i := range 300 {
		id := g.runIDs[(i*7919)%len(g.runIDs)]
		for _, q := range []struct {
			filter sandgate.AuditFilter
			into   *[]time.Duration
		}{{sandgate.AuditFilter{CorrelationID: id, Limit: 100}, &corr}, {sandgate.AuditFilter{RunID: id, Limit: 100}, &run}} {
			t0 := time.Now()
			evs, _, err := s.Reader().Query(ctx, q.filter)
			*q.into = append(*q.into, time.Since(t0))
			if err != nil || len(evs) == 0 || evs[0].RunID != id {
				b.Fatalf("Query(%+v): %d events, %v", q.filter, len(evs), err)
			}
		}
		ev := g.eventIDs[(i*7919)%len(g.eventIDs)]
		t0 := time.Now()
		p, err := s.Proofs().InclusionProof(ctx, ev, 0)
		proofLat = append(proofLat, time.Since(t0))
		if err != nil {
			b.Fatalf("InclusionProof(%s): %v", ev, err)
		}
		if err := tlog.CheckRecord(toHashes(p.Hashes), p.TreeSize, tlog.Hash(p.Checkpoint.RootHash), p.LeafIndex, proof.LeafHash(p.EventHash)); err != nil {
			b.Fatalf("inclusion of %s: %v", ev, err)
		}
	}
	f.corrP50, f.corrP99 = sandgatetest.Median(corr), sandgatetest.Percentile(corr, 99)
	f.runP50, f.runP99 = sandgatetest.Median(run), sandgatetest.Percentile(run, 99)
	f.proofP50, f.proofP99 = sandgatetest.Median(proofLat), sandgatetest.Percentile(proofLat, 99)

	exported := min(g.n, 1_000_000)
	var cw countingWriter
	cpu0 := processCPU()
	t0 := time.Now()
	err := s.Reader().Export(ctx, sandgate.AuditFilter{Since: g.now.Add(-time.Duration(exported) * g.step)}, sandgate.ExportJSONL, io.Writer(&cw))
	elapsed := time.Since(t0)
	if err != nil || cw.lines < exported {
		b.Fatalf("Export: %d lines of %d, %v", cw.lines, exported, err)
	}
	f.export = float64(cw.lines) / elapsed.Seconds()
	f.exportCPU = (processCPU() - cpu0) / time.Duration(cw.lines)

	cpu0 = processCPU()
	t0 = time.Now()
	rep, err := s.Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
	elapsed = time.Since(t0)
	f.verifyCPU = (processCPU() - cpu0) / time.Duration(max(rep.Checked, 1))
	if err != nil || !rep.OK || rep.Checked < int64(g.n) {
		b.Fatalf("VerifyTrail: ok=%v checked %d of %d, %d problems (%v), %v", rep.OK, rep.Checked, g.n, len(rep.Problems), firstProblems(rep.Problems), err)
	}
	f.verify = float64(rep.Checked) / elapsed.Seconds()
	b.Logf("%d events: export %d in %v; verify %d in %v", g.n, cw.lines, time.Duration(float64(cw.lines)/f.export*float64(time.Second)).Round(time.Millisecond),
		rep.Checked, elapsed.Round(time.Millisecond))
	return f
}

func firstProblems(ps []sandgate.VerifyProblem) []sandgate.VerifyProblem {
	return ps[:min(len(ps), 3)]
}
