package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sinks/sinkstest"
)

// BenchmarkStreamToRsyslog is how fast one syslog sink delivers a trail
// it is behind on to Debian's rsyslog over loopback TCP: the events are
// recorded first, then the sink starts and the clock runs until rsyslog
// has written the last of them to its file. Knobs:
// SANDGATE_BENCH_SINK_EVENTS (default 20000), SANDGATE_BENCH_SINK_BATCH
// (default 500).
func BenchmarkStreamToRsyslog(b *testing.B) {
	events := envInt("SANDGATE_BENCH_SINK_EVENTS", 20000)
	batch := envInt("SANDGATE_BENCH_SINK_BATCH", 500)
	for range b.N {
		b.StopTimer()
		r := sinkstest.Start(b, nil)
		dsn, db := newDB(b)
		st := testStore(b, dsn, nil)
		for i := range events {
			st.Emit(lifecycle(i, "bench"))
		}
		waitStored(b, db, int64(events))
		total := count(b, db, `SELECT count(*) FROM audit_events`)
		b.StartTimer()
		start := time.Now()
		s, err := StartStreamer(StreamConfig{DSN: dsn, Sinks: []StreamSink{syslogSink(b, "bench", r.Addr(), batch)},
			PollInterval: 10 * time.Millisecond, Logger: testLogger()})
		if err != nil {
			b.Fatal(err)
		}
		// The sink's own count first (cheap to read), then rsyslog's file.
		deadline := time.Now().Add(5 * time.Minute)
		for s.SinkStatus()[0].Delivered < uint64(total) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		for int64(len(sinkstest.Lines(r.RawFile()))) < total {
			if time.Now().After(deadline) {
				b.Fatalf("rsyslog has %d of %d events after 5 minutes", len(sinkstest.Lines(r.RawFile())), total)
			}
			time.Sleep(20 * time.Millisecond)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		_ = s.Close(context.Background())
		b.ReportMetric(float64(total)/elapsed.Seconds(), "events/s")
		b.Logf("%d events delivered to rsyslog in %v (batch %d): %.0f events/s", total, elapsed.Round(time.Millisecond), batch, float64(total)/elapsed.Seconds())
	}
}

// BenchmarkRecordWithSink is the decision commit (what an admission waits
// for) with no sink, with a syslog sink whose receiver is dead (nothing
// listens on its port: every attempt fails and is retried with the
// production backoff), and with a live rsyslog receiving everything, all
// under a steady lifecycle load. Decisions arrive open-loop at
// SANDGATE_BENCH_DECISION_RATE per second (default 250), timed from
// their scheduled arrival; lifecycle events at
// SANDGATE_BENCH_SINK_LIFECYCLE_RATE (default 2000/s). The modes run in
// the order of SANDGATE_BENCH_SINK_MODES (default none,dead,live), so that
// a busy machine's drift can be told from a sink's effect.
func BenchmarkRecordWithSink(b *testing.B) {
	rate := envInt("SANDGATE_BENCH_DECISION_RATE", 250)
	lifeRate := envInt("SANDGATE_BENCH_SINK_LIFECYCLE_RATE", 2000)
	const records = 1500
	modes := []string{"none", "dead", "live"}
	if v := os.Getenv("SANDGATE_BENCH_SINK_MODES"); v != "" {
		modes = strings.Split(v, ",")
	}
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				dsn, _ := newDB(b)
				st := testStore(b, dsn, func(c *Config) { c.DecisionChain = true })
				var s *Streamer
				switch mode {
				case "dead":
					ln, err := net.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						b.Fatal(err)
					}
					addr := ln.Addr().String()
					ln.Close() // nothing listens there any more
					s, err = StartStreamer(StreamConfig{DSN: dsn, Sinks: []StreamSink{syslogSink(b, "dead", addr, 500)}, Logger: testLogger()})
					if err != nil {
						b.Fatal(err)
					}
				case "live":
					r := sinkstest.Start(b, nil)
					var err error
					s, err = StartStreamer(StreamConfig{DSN: dsn, Sinks: []StreamSink{syslogSink(b, "live", r.Addr(), 500)}, Logger: testLogger()})
					if err != nil {
						b.Fatal(err)
					}
				}
				stop := make(chan struct{})
				var load sync.WaitGroup
				load.Add(1)
				go func() {
					defer load.Done()
					const tick = 10 * time.Millisecond
					t := time.NewTicker(tick)
					defer t.Stop()
					per := lifeRate * int(tick/time.Millisecond) / 1000
					for i := 0; ; {
						select {
						case <-stop:
							return
						case <-t.C:
							for range per {
								st.Emit(lifecycle(i, "load"))
								i++
							}
						}
					}
				}()
				time.Sleep(300 * time.Millisecond)
				rng := rand.New(rand.NewPCG(7, uint64(rate)))
				lat := make([]time.Duration, records)
				var wg sync.WaitGroup
				next := time.Now()
				for i := range records {
					next = next.Add(time.Duration(rng.ExpFloat64() / float64(rate) * float64(time.Second)))
					time.Sleep(time.Until(next))
					wg.Add(1)
					go func(at time.Time) {
						defer wg.Done()
						if err := st.Record(context.Background(), decisionEvent(i)); err != nil {
							b.Error(err)
						}
						lat[i] = time.Since(at)
					}(next)
				}
				wg.Wait()
				close(stop)
				load.Wait()
				status := "no sink"
				if s != nil {
					ss := s.SinkStatus()[0]
					status = fmt.Sprintf("sink: %d delivered, %d behind, %d failed attempts", ss.Delivered, ss.EventsBehind, ss.Failures)
					_ = s.Close(context.Background())
				}
				slices.Sort(lat)
				pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
				b.ReportMetric(pct(0.50), "p50-ms")
				b.ReportMetric(pct(0.99), "p99-ms")
				b.Logf("%s: decision commit p50 %.2f ms, p99 %.2f ms; %s", mode, pct(0.5), pct(0.99), status)
			}
		})
	}
}
