//go:build soak

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/client"
)

// soakSample is one measurement of the gateway process.
type soakSample struct {
	at         time.Duration
	rssKiB     int64
	goroutines int64
	runs       int64
}

// soakKind is one kind of run the soak mixes, with the outcome it must
// have.
type soakKind struct {
	name    string
	spec    sandgate.RunSpec
	cancel  bool
	outcome sandgate.Outcome
}

var soakKinds = []soakKind{
	{name: "success", spec: sandgate.RunSpec{Command: []string{"sh", "-c", "echo ok"}}, outcome: sandgate.OutcomeSucceeded},
	{name: "failure", spec: sandgate.RunSpec{Command: []string{"sh", "-c", "echo bad >&2; exit 3"}}, outcome: sandgate.OutcomeFailed},
	{name: "oom", spec: sandgate.RunSpec{Command: []string{"sh", "-c", "head -c 200m /dev/zero | tail"},
		Resources: sandgate.Resources{MemoryMB: 32}}, outcome: sandgate.OutcomeOOMKilled},
	{name: "timeout", spec: sandgate.RunSpec{Command: []string{"sleep", "30"}, TimeoutSeconds: 1}, outcome: sandgate.OutcomeTimedOut},
	{name: "cancel", spec: sandgate.RunSpec{Command: []string{"sleep", "30"}}, cancel: true, outcome: sandgate.OutcomeCancelled},
}

// TestSoak drives a gateway process with a mix of runs (success, failure,
// OOM, timeout, cancel) at 8 concurrent for SANDGATE_SOAK_DURATION
// (default 10m), samples its resident memory and goroutines every 10 s,
// and fails when either grows along a clear trend. Every run must end
// with the outcome its kind has.
func TestSoak(t *testing.T) {
	duration := 10 * time.Minute
	if v := os.Getenv("SANDGATE_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SANDGATE_SOAK_DURATION: %v", err)
		}
		duration = d
	}
	const workers = 8
	env := processEnv(t)
	env["SANDGATE_MAX_CONCURRENT"] = strconv.Itoa(workers)
	env["SANDGATE_TEAM_SHARE"] = "100" // one team's workers fill the node
	p := startProcess(t, env)

	start := time.Now()
	deadline := start.Add(duration)
	var (
		done     atomic.Int64
		mu       sync.Mutex
		byKind   = map[string]int{}
		problems []string
		wg       sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 50 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline); i += workers {
				k := soakKinds[i%len(soakKinds)]
				got, err := soakRun(p.Client, k)
				if err != nil {
					fail("%s: %v", k.name, err)
					continue
				}
				if got != k.outcome {
					fail("%s: outcome %s, want %s", k.name, got, k.outcome)
				}
				done.Add(1)
				mu.Lock()
				byKind[k.name]++
				mu.Unlock()
			}
		}()
	}

	var samples []soakSample
	sample := func() {
		rss, err := processRSS(p.Pid())
		if err != nil {
			t.Fatalf("read RSS: %v", err)
		}
		g, err := metricValue(p.URL+"/metrics", "go_goroutines")
		if err != nil {
			t.Fatalf("read goroutines: %v", err)
		}
		samples = append(samples, soakSample{at: time.Since(start), rssKiB: rss, goroutines: int64(g), runs: done.Load()})
	}
	sample()
	tick := time.NewTicker(10 * time.Second)
	for time.Now().Before(deadline) {
		<-tick.C
		sample()
	}
	tick.Stop()
	wg.Wait()
	time.Sleep(2 * time.Second)
	sample()

	t.Logf("%d runs in %s (%.1f/s): %v", done.Load(), duration, float64(done.Load())/duration.Seconds(), byKind)
	t.Logf("%8s %10s %10s %8s", "t", "rss_kib", "goroutines", "runs")
	for _, s := range samples {
		t.Logf("%8s %10d %10d %8d", s.at.Round(time.Second), s.rssKiB, s.goroutines, s.runs)
	}
	for _, pr := range problems {
		t.Error(pr)
	}

	// The first minute warms caches, pools and the heap; the trend is
	// read over the rest.
	steady := samples
	for len(steady) > 6 && steady[0].at < time.Minute {
		steady = steady[1:]
	}
	if len(steady) < 6 {
		t.Fatalf("only %d steady samples: run the soak for at least 2 minutes", len(steady))
	}
	rss := trend(steady, func(s soakSample) float64 { return float64(s.rssKiB) })
	gor := trend(steady, func(s soakSample) float64 { return float64(s.goroutines) })
	t.Logf("RSS: mean %.0f KiB, slope %+.1f KiB/min (r=%.2f), projected over the window %+.1f%%", rss.mean, rss.perMin, rss.r, rss.growth*100)
	t.Logf("goroutines: mean %.1f, slope %+.2f/min (r=%.2f), projected over the window %+.1f%%", gor.mean, gor.perMin, gor.r, gor.growth*100)
	// A clear trend: the fit explains most of the variation and what it
	// projects over the window is not small.
	if rss.r > 0.8 && rss.growth > 0.20 {
		t.Errorf("RSS grows: %+.1f KiB/min, %+.1f%% over the steady window (r=%.2f)", rss.perMin, rss.growth*100, rss.r)
	}
	if gor.r > 0.8 && gor.growth > 0.20 && gor.perMin*steadyMinutes(steady) > 10 {
		t.Errorf("goroutines grow: %+.2f/min, %+.1f%% over the steady window (r=%.2f)", gor.perMin, gor.growth*100, gor.r)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	assertNoContainers(t, env["SANDGATE_NODE"])
}

// soakRun submits one run of kind k and waits for its end.
func soakRun(c *client.Client, k soakKind) (sandgate.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if !k.cancel {
		v, err := c.Submit(ctx, k.spec, client.SubmitOptions{Wait: time.Minute})
		if err != nil {
			return "", err
		}
		if v.State != sandgate.StateFinished || v.Outcome == nil {
			return "", fmt.Errorf("run %s not finished after a minute: %s", v.ID, v.State)
		}
		return *v.Outcome, nil
	}
	v, err := c.Submit(ctx, k.spec, client.SubmitOptions{})
	if err != nil {
		return "", err
	}
	for {
		r, err := c.Run(ctx, v.ID)
		if err != nil {
			return "", err
		}
		if r.State == sandgate.StateRunning {
			break
		}
		if r.State == sandgate.StateFinished {
			return "", fmt.Errorf("run %s finished before it could be cancelled", v.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, err := c.Cancel(ctx, v.ID)
	if err != nil {
		return "", err
	}
	for r.State != sandgate.StateFinished {
		time.Sleep(100 * time.Millisecond)
		if r, err = c.Run(ctx, v.ID); err != nil {
			return "", err
		}
	}
	if r.Outcome == nil {
		return "", errors.New("cancelled run without an outcome")
	}
	return *r.Outcome, nil
}

// metricValue reads one unlabelled metric from a Prometheus endpoint.
func metricValue(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found at %s", name, url)
}

// fit is a least-squares line through samples.
type fit struct {
	mean, perMin, r float64
	// growth is what the slope adds over the window, relative to the
	// mean.
	growth float64
}

func steadyMinutes(s []soakSample) float64 {
	return (s[len(s)-1].at - s[0].at).Minutes()
}

// trend fits value against time (in minutes).
func trend(s []soakSample, value func(soakSample) float64) fit {
	n := float64(len(s))
	var sx, sy, sxx, syy, sxy float64
	for _, p := range s {
		x, y := p.at.Minutes(), value(p)
		sx, sy, sxx, syy, sxy = sx+x, sy+y, sxx+x*x, syy+y*y, sxy+x*y
	}
	cov := sxy - sx*sy/n
	vx := sxx - sx*sx/n
	vy := syy - sy*sy/n
	f := fit{mean: sy / n}
	if vx > 0 {
		f.perMin = cov / vx
	}
	if vx > 0 && vy > 0 {
		f.r = cov / math.Sqrt(vx*vy)
	}
	if f.mean > 0 {
		f.growth = f.perMin * steadyMinutes(s) / f.mean
	}
	return f
}
