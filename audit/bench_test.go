package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// benchEvent is a typical lifecycle event: identities, exit code and an
// output summary in the payload.
func benchEvent(i int) sandgate.Event {
	code := i % 7
	return sandgate.Event{
		Type: sandgate.EventContainerExited, RunID: fmt.Sprintf("run-%d", i%500), CorrelationID: fmt.Sprintf("corr-%d", i%500),
		ContainerID: "3f2a9c", Actor: "ci-bot", Team: "payments", Outcome: "succeeded", ExitCode: &code,
		Payload: map[string]any{"stdout": map[string]any{"bytes": 1024, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "truncated": false}, "duration_ms": 1200},
	}
}

// BenchmarkEmitThroughput measures sustained lifecycle events per second
// into local Postgres with group commit: 8 producers emit 100,000 events
// and the clock stops when the last is committed. With -benchtime 1x each
// iteration is a whole run.
func BenchmarkEmitThroughput(b *testing.B) {
	const producers, total = 8, 100_000
	for b.Loop() {
		dsn, _ := newDB(b)
		s := testStore(b, dsn, func(c *Config) { c.MaxBatch = envInt("SANDGATE_BENCH_MAX_BATCH", 0) })
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
		elapsed := time.Since(start)
		b.ReportMetric(float64(total)/elapsed.Seconds(), "events/s")
	}
}

// serveGCPercent is the garbage collector's target of `sandgate serve`
// (serveGCPercent in cmd/sandgate/gc.go), which the benchmarks that time a
// latency use too, unless GOGC is set: collections are part of a tail.
const serveGCPercent = 400

// lifecycleRate is the lifecycle load the decision benchmarks run under:
// events offered per second (never more than the writer keeps up with:
// the generator pauses while two batches are queued).
const lifecycleRate = 20_000

// decisionEvent is the i-th decision of a benchmark.
func decisionEvent(i int) sandgate.Event {
	ev := benchEvent(i)
	ev.Type, ev.DecisionID, ev.Outcome = sandgate.EventAdmissionAllowed, fmt.Sprintf("dec-%d", i), "allowed"
	return ev
}

// BenchmarkRecordLatencyUnderLoad measures the synchronous decision write
// (Record: committed with synchronous_commit on before it returns) while
// lifecycle events are offered at 20,000 per second, and reports its p50
// and p99 and the lifecycle rate sustained meanwhile.
//
// Decisions arrive open-loop, as admissions do: at exponentially
// distributed intervals averaging SANDGATE_BENCH_DECISION_RATE per second
// (default 250, well above what a node can start containers at), each in
// its own goroutine, whether or not earlier ones have returned. Each is
// timed from its scheduled arrival, so a stall delays every decision
// scheduled during it and none is left out of the figures. Knob:
// SANDGATE_BENCH_MAX_BATCH (the lifecycle batch cap; default, as serve,
// 1000); SANDGATE_BENCH_NO_TREE=1 leaves the chains' Merkle trees out.
func BenchmarkRecordLatencyUnderLoad(b *testing.B) {
	const records = 5000
	rate := envInt("SANDGATE_BENCH_DECISION_RATE", 250)
	underLifecycleLoad(b, func(s *Store) []time.Duration {
		rng := rand.New(rand.NewPCG(1, uint64(rate)))
		lat := make([]time.Duration, records)
		var wg sync.WaitGroup
		next := time.Now()
		for i := range records {
			next = next.Add(time.Duration(rng.ExpFloat64() / float64(rate) * float64(time.Second)))
			time.Sleep(time.Until(next))
			wg.Add(1)
			go func(at time.Time) {
				defer wg.Done()
				if err := s.Record(context.Background(), decisionEvent(i)); err != nil {
					b.Error(err)
				}
				lat[i] = time.Since(at)
			}(next)
		}
		wg.Wait()
		return lat
	})
}

// BenchmarkRecordSaturatedUnderLoad is the decision path at saturation,
// under the same lifecycle load: four deciders, each recording its next
// decision as soon as the last returns, so one always waits for the
// commit ahead of it. Its records/s is what the decision path sustains;
// its latencies are mostly that wait (Little's law), not a decision's own
// cost, which BenchmarkRecordLatencyUnderLoad measures.
func BenchmarkRecordSaturatedUnderLoad(b *testing.B) {
	const records, deciders = 5000, 4
	underLifecycleLoad(b, func(s *Store) []time.Duration {
		lat := make([]time.Duration, records)
		var wg sync.WaitGroup
		for d := range deciders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := d; i < records; i += deciders {
					t0 := time.Now()
					if err := s.Record(context.Background(), decisionEvent(i)); err != nil {
						b.Error(err)
						return
					}
					lat[i] = time.Since(t0)
				}
			}()
		}
		wg.Wait()
		return lat
	})
}

// underLifecycleLoad runs decide against a fresh store while lifecycle
// events are offered at lifecycleRate, and reports the p50 and p99 of the
// latencies it returns, the decisions per second and the lifecycle events
// per second sustained meanwhile.
func underLifecycleLoad(b *testing.B, decide func(*Store) []time.Duration) {
	b.Helper()
	const tick = 5 * time.Millisecond
	if _, set := os.LookupEnv("GOGC"); !set {
		defer debug.SetGCPercent(debug.SetGCPercent(serveGCPercent))
	}
	for b.Loop() {
		dsn, _ := newDB(b)
		// The writer as serve configures it: decisions on their own chain,
		// lifecycle batches of up to the default 1000 events.
		s := testStore(b, dsn, func(c *Config) {
			c.MaxBatch = envInt("SANDGATE_BENCH_MAX_BATCH", 0)
			c.DecisionChain = os.Getenv("SANDGATE_BENCH_SHARED_CHAIN") == ""
			c.noTree = os.Getenv("SANDGATE_BENCH_NO_TREE") != ""
		})
		stop := make(chan struct{})
		var emitted atomic.Int64
		var load sync.WaitGroup
		load.Add(1)
		go func() {
			defer load.Done()
			t := time.NewTicker(tick)
			defer t.Stop()
			per := int(lifecycleRate * tick / time.Second)
			i := 0
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if s.w.queued() > 2*s.cfg.MaxBatch {
						// Past what Postgres takes: offer no more, so the
						// rate reported is the sustained one.
						continue
					}
					for range per {
						s.Emit(benchEvent(i))
						i++
					}
					emitted.Add(int64(per))
				}
			}
		}()
		time.Sleep(200 * time.Millisecond) // reach a steady state
		emitted.Store(0)
		start := time.Now()
		lat := decide(s)
		elapsed := time.Since(start)
		close(stop)
		load.Wait()
		if err := s.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		slices.Sort(lat)
		pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
		b.ReportMetric(float64(emitted.Load())/elapsed.Seconds(), "lifecycle-events/s")
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "records/s")
	}
}

// envInt is the benchmark knob key, or def when unset.
func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return n
	}
	return def
}
