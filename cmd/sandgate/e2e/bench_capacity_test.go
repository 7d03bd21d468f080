package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// BenchmarkFairStart measures the goal of fair capacity: with 2 run
// slots, team a holds two 8-hour sessions and has flooded the node with
// six hour-long runs (one holds a slot, its share; five wait); team b's
// run, submitted after them, goes from submission (the client's clock,
// before the request) to started (its container started, the gateway's
// clock on the same host). Nine tries, one after the other, each waiting
// for the last to end; the median and the slowest are reported, beside
// the median of nine tries of the same run on the idle node before.
func BenchmarkFairStart(b *testing.B) {
	_, c := capacityServer(b, 4, map[string]string{"alice": "team-a", "bob": "team-b"})
	// startOne is one run of team b's, from submission to started.
	startOne := func() time.Duration {
		start := time.Now()
		sub, err := c["bob"].Submit(context.Background(), sandgate.RunSpec{Command: []string{"true"}}, client.SubmitOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var v api.RunView
		sandgatetest.WaitFor(b, "team b's run to end", 2*time.Minute, func() bool {
			v, err = c["bob"].Run(context.Background(), sub.ID)
			return err == nil && v.State == sandgate.StateFinished
		})
		if v.StartedAt == nil || outcomeOf(v) != sandgate.OutcomeSucceeded {
			b.Fatalf("team b's run: %s %+v", outcomeOf(v), v)
		}
		return v.StartedAt.Sub(start)
	}
	const tries = 9
	var alone, took []time.Duration
	for range tries {
		alone = append(alone, startOne())
	}
	for range 2 {
		ss, err := c["alice"].CreateSession(context.Background(), api.SessionRequest{MaxLifetimeSeconds: 28800})
		if err != nil || ss.State != sandgate.SessionOpen {
			b.Fatalf("team a's session: %v %+v", err, ss)
		}
	}
	flood(b, 6, c["alice"])
	for range tries {
		took = append(took, startOne())
	}
	med, slowest := sandgatetest.Median(took), slices.Max(took)
	b.ReportMetric(float64(med.Milliseconds()), "submit-to-started-p50-ms")
	b.ReportMetric(float64(slowest.Milliseconds()), "submit-to-started-max-ms")
	b.ReportMetric(float64(sandgatetest.Median(alone).Milliseconds()), "alone-submit-to-started-p50-ms")
	b.Logf("team b's run, submitted behind team a's sessions and flood: submit->started median %s, slowest %s of %d (%v); alone on the node: median %s (%v)",
		med, slowest, tries, took, sandgatetest.Median(alone), alone)
}
