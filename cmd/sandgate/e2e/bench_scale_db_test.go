package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/runstore"
	"github.com/sandgate/sandgate/sandgatetest"
)

// BenchmarkScaleSubmissionDB measures a submission's own database work
// besides its decision's record: the Idempotency-Key's claim
// (ClaimIdempotencyKey), the team's slot reserved under the team's
// advisory lock (ReserveSlot) and released at the end (ReleaseSlot),
// from 1, 16 and 64 submitters at once, all of one team (the lock's worst
// case), on the database of a running gateway, as the gateway's run
// store makes them. Its baseline is a warm run (POST /v1/runs?wait of
// `true` from a warm pool of one) on that gateway, measured first: the
// figure is the submission's database time as a share of the warm run's
// median. The same submissions each of a team of its own show what the
// team's lock costs. SANDGATE_BENCH_DB_CONCURRENCY lists concurrencies by hand.
func BenchmarkScaleSubmissionDB(b *testing.B) {
	levels := sandgatetest.ScaleSizes("SANDGATE_BENCH_DB_CONCURRENCY", []int{1, 16}, []int{1, 16, 64})
	s := startServer(b, withEnv("SANDGATE_WARM_POOL", "1"))
	client := &http.Client{Timeout: 2 * time.Minute}
	var warm []time.Duration
	for i := range 12 {
		sandgatetest.WaitFor(b, "the warm pool full", 2*time.Minute, func() bool { return warmIdle(b, s.Node) == servedProfiles })
		d, _ := runTrue(b, client, s)
		if i > 0 { // the first warms the gateway's paths
			warm = append(warm, d)
		}
	}
	warmP50 := sandgatetest.Median(warm)
	store, err := runstore.New(audittest.OpenDB(b, s.DSN), runstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range levels {
		b.Run(fmt.Sprintf("concurrent=%d", c), func(b *testing.B) {
			var claim, reserve, release, total, spread []time.Duration
			var elapsed time.Duration
			for b.Loop() {
				claim, reserve, release, total, elapsed = submissionsDB(b, store, s.Node, c, 40, false)
				_, _, _, spread, _ = submissionsDB(b, store, s.Node, c, 40, true)
			}
			p50 := sandgatetest.Median(total)
			b.ReportMetric(sandgatetest.Millis(warmP50), "warm-run-p50-ms")
			b.ReportMetric(sandgatetest.Millis(p50), "db-p50-ms")
			b.ReportMetric(sandgatetest.Millis(sandgatetest.Percentile(total, 99)), "db-p99-ms")
			b.ReportMetric(sandgatetest.Millis(sandgatetest.Median(claim)), "claim-p50-ms")
			b.ReportMetric(sandgatetest.Millis(sandgatetest.Median(reserve)), "reserve-p50-ms")
			b.ReportMetric(sandgatetest.Millis(sandgatetest.Median(release)), "release-p50-ms")
			b.ReportMetric(100*float64(p50)/float64(warmP50), "share-of-warm-run-%")
			b.ReportMetric(sandgatetest.Millis(sandgatetest.Median(spread)), "db-p50-teams-apart-ms")
			b.ReportMetric(100*float64(sandgatetest.Median(spread))/float64(warmP50), "share-teams-apart-%")
			b.ReportMetric(float64(len(total))/elapsed.Seconds(), "submissions/s")
			b.Logf("%d at once: a submission's database work p50 %.2f ms (claim %.2f, reserve %.2f, release %.2f), %.1f%% of a warm run's %.1f ms; each of its own team %.2f ms; load %s",
				c, sandgatetest.Millis(p50), sandgatetest.Millis(sandgatetest.Median(claim)), sandgatetest.Millis(sandgatetest.Median(reserve)),
				sandgatetest.Millis(sandgatetest.Median(release)), 100*float64(p50)/float64(warmP50), sandgatetest.Millis(warmP50),
				sandgatetest.Millis(sandgatetest.Median(spread)), loadAverage())
		})
	}
}

// submissionsDB runs each submitters' share of a submission's database
// work, each `each` times, all of one team or (apart) each of its own,
// and returns every call's time, each submission's total and the wall
// time of all of them.
func submissionsDB(b *testing.B, store *runstore.Store, node string, submitters, each int, apart bool) (claim, reserve, release, total []time.Duration, elapsed time.Duration) {
	ctx := context.Background()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range submitters {
		team := "bench"
		if apart {
			team = fmt.Sprintf("bench-%d", i)
		}
		wg.Go(func() {
			var c, r, l, t []time.Duration
			for range each {
				runID := uuid.Must(uuid.NewV7()).String()
				t0 := time.Now()
				held, _, err := store.ClaimIdempotencyKey(ctx, "bench", uuid.NewString(), runID, "digest")
				t1 := time.Now()
				if err != nil || held != "" {
					b.Errorf("claim: %q %v", held, err)
					return
				}
				_, ok, err := store.ReserveSlot(ctx, sandgate.Slot{RunID: runID, Team: team, Node: node, MemoryMB: 512, CPUs: 1},
					sandgate.SlotLimits{TeamRuns: 1000})
				t2 := time.Now()
				if err != nil || !ok {
					b.Errorf("reserve: %v %v", ok, err)
					return
				}
				if err := store.ReleaseSlot(ctx, runID); err != nil {
					b.Error(err)
					return
				}
				t3 := time.Now()
				c, r, l, t = append(c, t1.Sub(t0)), append(r, t2.Sub(t1)), append(l, t3.Sub(t2)), append(t, t3.Sub(t0))
			}
			mu.Lock()
			claim, reserve, release, total = append(claim, c...), append(reserve, r...), append(release, l...), append(total, t...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return claim, reserve, release, total, time.Since(start)
}
