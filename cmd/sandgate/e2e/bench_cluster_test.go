package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// BenchmarkClusterFollow measures what following a run through a node
// that does not hold it adds to each line's arrival: a run on node A
// prints b.N lines 20 ms apart, one follower reads it from A and another
// from B (forwarded to A), both connected before the first line; for each
// line, the difference between its arrival through B and through A.
// Reported: the mean and the 99th percentile of that difference, in
// microseconds per line. Run with -benchtime=200x or so.
func BenchmarkClusterFollow(b *testing.B) {
	base, tok := clusterBase(b)
	a := startNode(b, base, tok, "bench-a-"+sandgatetest.RandomHex(b, 3))
	fwd := startNode(b, base, tok, "bench-b-"+sandgatetest.RandomHex(b, 3))
	n := max(b.N, 10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*100*time.Millisecond+2*time.Minute)
	defer cancel()
	v, err := a.Client.Submit(ctx, sandgate.RunSpec{Command: []string{"sh", "-c",
		fmt.Sprintf("sleep 2; i=0; while [ $i -lt %d ]; do echo $i; i=$((i+1)); sleep 0.02; done", n)}}, client.SubmitOptions{})
	if err != nil {
		b.Fatal(err)
	}
	arrivals := func(s *testServer) []time.Time {
		var out []time.Time
		_ = s.Client.Logs(ctx, v.ID, true, func(ev api.LogEvent) error {
			if ev.Event == api.EventStdout {
				p, _ := ev.Chunk()
				now := time.Now()
				for range bytes.Count(p, []byte("\n")) {
					out = append(out, now)
				}
			}
			return nil
		})
		return out
	}
	var direct, forwarded []time.Time
	var wg sync.WaitGroup
	wg.Add(2)
	b.ResetTimer()
	go func() { defer wg.Done(); direct = arrivals(a) }()
	go func() { defer wg.Done(); forwarded = arrivals(fwd) }()
	wg.Wait()
	b.StopTimer()
	if len(direct) != n || len(forwarded) != n {
		b.Fatalf("lines: %d direct, %d forwarded, want %d each", len(direct), len(forwarded), n)
	}
	deltas := make([]float64, n)
	sum := 0.0
	for i := range n {
		deltas[i] = float64(forwarded[i].Sub(direct[i]).Microseconds())
		sum += deltas[i]
	}
	slices.Sort(deltas)
	b.ReportMetric(sum/float64(n), "added-µs/line")
	b.ReportMetric(deltas[n*99/100], "p99-added-µs/line")
	b.ReportMetric(0, "ns/op")
}
