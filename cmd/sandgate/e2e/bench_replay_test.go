package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/policies"
)

// replayHistory is how many decisions BenchmarkPolicyReplay records.
const replayHistory = 5000

// BenchmarkPolicyReplay measures POST /v1/policies/replay on the real
// stack: 5,000 reviews recorded in the Postgres trail by the default
// bundle (a third of them denied, every one with an env value, so that
// each replay also runs the masked-value check), replayed with a
// candidate that lowers the memory maximum. It reports the decisions
// replayed per second of the whole request, the fixed cost of loading the
// candidate (a replay of an empty range), and the rate of the replay
// proper (the whole less the fixed cost).
func BenchmarkPolicyReplay(b *testing.B) {
	s := startServer(b)
	ctx := context.Background()
	since := time.Now().Add(-time.Second)
	specs := []string{
		`{"command":["sh","-c","make test"],"env":{"API_TOKEN":"s3cr3t"},"resources":{"memory_mb":2048}}`,
		`{"command":["sh","-c","make test"],"env":{"API_TOKEN":"s3cr3t"},"resources":{"memory_mb":512}}`,
		`{"command":["sh"],"env":{"API_TOKEN":"s3cr3t"},"privileged":true}`,
	}
	var wg sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/admission/review", strings.NewReader(specs[i%len(specs)]))
				req.Header.Set("Authorization", "Bearer "+s.Token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("review: %d", resp.StatusCode)
					}
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	for i := range replayHistory {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	candidate := bundleWith(b, func(cfg map[string]any) { cfg["maxima"].(map[string]any)["memory_mb"] = 1024 })
	files, err := policies.BundleFiles(candidate)
	if err != nil {
		b.Fatal(err)
	}
	// The reviews are answered once queued: wait until the trail holds them.
	deadline := time.Now().Add(time.Minute)
	for {
		rep, err := s.Client.ReplayPolicy(ctx, files, client.ReplayOptions{Since: since})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Replayed >= replayHistory {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the trail holds %d reviews, want %d", rep.Replayed, replayHistory)
		}
		time.Sleep(100 * time.Millisecond)
	}
	empty := time.Now().Add(time.Hour)
	var whole, fixed time.Duration
	replayed, changed := 0, 0
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := s.Client.ReplayPolicy(ctx, files, client.ReplayOptions{Since: empty}); err != nil {
			b.Fatal(err)
		}
		fixed += time.Since(start)
		start = time.Now()
		rep, err := s.Client.ReplayPolicy(ctx, files, client.ReplayOptions{Since: since})
		if err != nil {
			b.Fatal(err)
		}
		whole += time.Since(start)
		replayed, changed = rep.Replayed, rep.NewlyDenied.Count
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(replayed)/(whole.Seconds()/n), "decisions/s")
	b.ReportMetric(float64(fixed.Milliseconds())/n, "load-ms")
	b.ReportMetric(float64(replayed)/((whole-fixed).Seconds()/n), "replayed-decisions/s")
	b.ReportMetric(float64(changed), "newly-denied")
	b.ReportMetric(0, "ns/op")
}
