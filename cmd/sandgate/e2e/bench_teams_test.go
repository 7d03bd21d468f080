package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// bundleWith copies the policy bundle into a directory of the test's with
// edit applied to data.sandgate.config, and returns the directory.
func bundleWith(tb testing.TB, edit func(config map[string]any)) string {
	tb.Helper()
	dir := tb.TempDir()
	files, err := filepath.Glob("../../../policies/*.rego")
	if err != nil || len(files) == 0 {
		tb.Fatalf("the policy bundle: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	raw, err := os.ReadFile("../../../policies/data.json")
	if err != nil {
		tb.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		tb.Fatal(err)
	}
	edit(data["sandgate"].(map[string]any)["config"].(map[string]any))
	raw, err = json.MarshalIndent(data, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), raw, 0o644); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// tokensFile writes a tokens file of submitters, one per team, and returns
// its path and each team's token.
func tokensFile(tb testing.TB, teams ...string) (string, map[string]string) {
	tb.Helper()
	tokens := map[string]string{}
	var b strings.Builder
	b.WriteString("principals:\n")
	for _, team := range teams {
		tok := "tok-" + team + "-" + sandgatetest.RandomHex(tb, 8)
		tokens[team] = tok
		fmt.Fprintf(&b, "  - name: %s-bot\n    team: %s\n    roles: [submitter, auditor]\n    token_sha256: %s\n", team, team, gateway.HashToken(tok))
	}
	path := filepath.Join(tb.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path, tokens
}

// BenchmarkTeamFlood measures what one team's flood does to another's
// runs. Team flood keeps 32 submitters busy (each retries 50 ms after a
// 429); team quiet submits one short run after another. Both go through
// a real gateway with 4 container slots and team limits of 2 running and
// 8 queued runs. The quiet team's latency (submit to finished, ?wait) is
// measured first alone, then during the flood, in the same process.
func BenchmarkTeamFlood(b *testing.B) {
	tokens, tok := tokensFile(b, "flood", "quiet")
	policy := bundleWith(b, func(c map[string]any) {
		c["team_limits"] = map[string]any{"default": map[string]any{"concurrent": 2, "queued": 8, "memory_mb": 0, "cpus": 0}, "teams": map[string]any{}}
	})
	s := startServer(b, withEnv("SANDGATE_TOKENS_FILE", tokens), withEnv("SANDGATE_DEV", "0"),
		withEnv("SANDGATE_POLICY_DIR", policy), withEnv("SANDGATE_MAX_CONCURRENT", "4"))
	clientOf := func(team string) *client.Client {
		c, err := client.New(s.URL, tok[team])
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	flood, quiet := clientOf("flood"), clientOf("quiet")
	const quietRuns = 60
	measure := func() []time.Duration {
		var out []time.Duration
		for range quietRuns {
			start := time.Now()
			v, err := quiet.Submit(context.Background(), sandgate.RunSpec{Command: []string{"true"}}, client.SubmitOptions{Wait: time.Minute})
			if err != nil || v.Outcome == nil || *v.Outcome != sandgate.OutcomeSucceeded {
				b.Fatalf("quiet run: %v %+v", err, v)
			}
			out = append(out, time.Since(start))
		}
		return out
	}
	alone := measure()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var floodDone, floodLimited atomic.Int64
	var floodLat []time.Duration
	var mu sync.Mutex
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_, err := flood.Submit(context.Background(), sandgate.RunSpec{Command: []string{"sleep", "0.5"}}, client.SubmitOptions{Wait: time.Minute})
				switch {
				case sandgate.ErrorCodeOf(err) == sandgate.CodeRateLimited:
					floodLimited.Add(1)
					time.Sleep(50 * time.Millisecond)
				case err != nil:
					b.Errorf("flood run: %v", err)
					return
				default:
					floodDone.Add(1)
					mu.Lock()
					floodLat = append(floodLat, time.Since(start))
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(2 * time.Second) // the flood fills its limits
	during := measure()
	close(stop)
	wg.Wait()

	b.Logf("quiet team alone: p50 %.0f ms, p99 %.0f ms; during the flood: p50 %.0f ms, p99 %.0f ms",
		ms(sandgatetest.Percentile(alone, 50)), ms(sandgatetest.Percentile(alone, 99)), ms(sandgatetest.Percentile(during, 50)), ms(sandgatetest.Percentile(during, 99)))
	b.Logf("flood team: %d runs finished (p50 %.0f ms, p99 %.0f ms), %d submissions answered 429",
		floodDone.Load(), ms(sandgatetest.Percentile(floodLat, 50)), ms(sandgatetest.Percentile(floodLat, 99)), floodLimited.Load())
	b.ReportMetric(ms(sandgatetest.Percentile(alone, 50)), "quiet-alone-p50-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(alone, 99)), "quiet-alone-p99-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(during, 50)), "quiet-flood-p50-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(during, 99)), "quiet-flood-p99-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(floodLat, 50)), "flood-p50-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(floodLat, 99)), "flood-p99-ms")
	b.ReportMetric(float64(floodLimited.Load()), "flood-429s")
}
