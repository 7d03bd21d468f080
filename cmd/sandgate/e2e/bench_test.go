package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The benchmarks below measure whole systems, so each sizes its own
// sample (make bench runs them with -benchtime 1x) and reports its figures
// with b.ReportMetric. docs/benchmarks.md records the results.

// benchInt reads a positive integer knob from the environment.
func benchInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dockerRunArgs mirrors the container the executor creates
// (executor/container.go) for a run of command with the defaults in
// force: the same hardening, limits, labels and name scheme. maxConcurrent
// is the gateway's, which sizes the nproc ulimit. The node label differs
// from the server's so that its reaper leaves these containers alone.
func dockerRunArgs(d sandgate.Defaults, node string, maxConcurrent int, runID string, command ...string) []string {
	r := d.Resources
	short := strings.ReplaceAll(runID, "-", "")
	short = short[len(short)-12:]
	args := []string{
		"run", "--rm",
		"--name", "sandgate-none-none-" + short,
		"--network", d.Network,
		"--read-only",
		"--user", d.User,
		"--cap-drop", "ALL",
		"--security-opt", "no-new-privileges",
		"--init",
		"--pids-limit", strconv.FormatInt(r.Pids, 10),
		"--memory", fmt.Sprintf("%dm", r.MemoryMB),
		"--memory-swap", fmt.Sprintf("%dm", r.MemoryMB),
		"--cpus", strconv.FormatFloat(r.CPUs, 'f', -1, 64),
		"--tmpfs", fmt.Sprintf("/tmp:rw,nosuid,nodev,size=%dm,mode=1777", r.TmpfsMB),
		"--ulimit", fmt.Sprintf("nofile=%d:%d", r.Nofile, r.Nofile),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", r.Pids*int64(maxConcurrent), r.Pids*int64(maxConcurrent)),
		"--log-driver", "none",
		"--stop-signal", "SIGTERM",
		"--label", sandgate.LabelManaged + "=true",
		"--label", sandgate.LabelRunID + "=" + runID,
		"--label", sandgate.LabelSession + "=",
		"--label", sandgate.LabelTask + "=",
		"--label", sandgate.LabelCorrelationID + "=" + runID,
		"--label", sandgate.LabelNode + "=" + node,
	}
	if d.Workdir != "" {
		args = append(args, "--workdir", d.Workdir)
	}
	return append(append(args, d.Image), command...)
}

// BenchmarkRunVsDockerRun compares an end-to-end run of `true` through
// sandgate (POST /v1/runs?wait=60s over HTTP: decision, committed audit
// events, Docker create/attach/start/wait/inspect/remove, stored run)
// with `docker run --rm` of the same container on the same daemon. The
// two are interleaved, alternating which goes first in each pair, so that
// drift in the machine's load falls on both; the figure of merit is the
// ratio of the medians. SANDGATE_BENCH_PAIRS sets the number of pairs
// (default 21).
func BenchmarkRunVsDockerRun(b *testing.B) {
	// Cold starts on both sides: no warm pool.
	s := startServer(b, withEnv("SANDGATE_WARM_POOL", "0"))
	pairs := benchInt("SANDGATE_BENCH_PAIRS", 21)
	client := &http.Client{Timeout: 2 * time.Minute}

	var cfg api.ConfigView
	if err := getJSON(client, s, "/v1/config", &cfg); err != nil {
		b.Fatal(err)
	}
	maxConcurrent := defaultMaxConcurrent
	dockerNode := s.Node + "-docker-run"

	viaSandgate := func() time.Duration {
		elapsed, _ := runTrue(b, client, s)
		return elapsed
	}
	viaDocker := func() time.Duration {
		args := dockerRunArgs(cfg.Defaults, dockerNode, maxConcurrent, uuid.Must(uuid.NewV7()).String(), "true")
		start := time.Now()
		out, err := exec.Command("docker", args...).CombinedOutput()
		elapsed := time.Since(start)
		if err != nil {
			b.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return elapsed
	}

	// Warm up both paths (image metadata, connections, page cache).
	for range 2 {
		viaSandgate()
		viaDocker()
	}
	b.ResetTimer()
	sg, dr := interleaved(pairs, viaSandgate, viaDocker)
	b.StopTimer()

	sgMed, drMed := sandgatetest.Median(slices.Clone(sg)), sandgatetest.Median(slices.Clone(dr))
	ratio := float64(sgMed) / float64(drMed)
	b.ReportMetric(float64(pairs), "pairs")
	b.ReportMetric(ms(sgMed), "sandgate-p50-ms")
	b.ReportMetric(ms(drMed), "docker-run-p50-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(slices.Clone(sg), 90)), "sandgate-p90-ms")
	b.ReportMetric(ms(sandgatetest.Percentile(slices.Clone(dr), 90)), "docker-run-p90-ms")
	b.ReportMetric(ratio, "ratio-of-medians")
	b.Logf("pairs=%d sandgate median %.1f ms, docker run --rm median %.1f ms, ratio %.3f (goal <= 1.15); load %s",
		pairs, ms(sgMed), ms(drMed), ratio, loadAverage())
	if n := countContainers(b, sandgate.LabelNode, dockerNode); n != 0 {
		b.Errorf("%d docker run containers left", n)
	}
}

// getJSON GETs path with the server's token and decodes the answer.
func getJSON(client *http.Client, s *testServer, path string, out any) error {
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, out)
}

// loadAverage returns /proc/loadavg's first three fields.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// reviewScript is wrk's Lua script: every request POSTs one run spec to
// /v1/admission/review with the bearer token. The spec has an env value,
// so the masking of secrets for the trail is part of what is measured.
const reviewScript = `wrk.method = "POST"
wrk.body = '{"command":["sh","-c","make test"],"env":{"API_TOKEN":"s3cr3t","CI":"true"},"labels":{"ticket":"ENG-1"},"session_id":"bench","task_id":"review"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %s"
`

// wrkResult is what BenchmarkReviewWrk reads from wrk's report.
type wrkResult struct {
	requests             int64
	duration             time.Duration
	rps                  float64
	p50, p75, p90, p99   time.Duration
	non2xx, socketErrors int64
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in ([\d.]+)(us|ms|s|m),`)
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkPct      = regexp.MustCompile(`(?m)^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// wrkDuration reads one of wrk's durations, such as "15.09" "s".
func wrkDuration(value, unit string) time.Duration {
	v, _ := strconv.ParseFloat(value, 64)
	u := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute}[unit]
	return time.Duration(math.Round(v * float64(u)))
}

// parseWrk reads wrk's --latency report.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	m := wrkRequests.FindStringSubmatch(out)
	n := wrkRPS.FindStringSubmatch(out)
	if m == nil || n == nil {
		return r, fmt.Errorf("no request count or rate in wrk's report")
	}
	r.requests, _ = strconv.ParseInt(m[1], 10, 64)
	r.duration = wrkDuration(m[2], m[3])
	r.rps, _ = strconv.ParseFloat(n[1], 64)
	found := 0
	for _, p := range wrkPct.FindAllStringSubmatch(out, -1) {
		d := wrkDuration(p[2], p[3])
		switch p[1] {
		case "50":
			r.p50 = d
		case "75":
			r.p75 = d
		case "90":
			r.p90 = d
		case "99":
			r.p99 = d
		}
		found++
	}
	if found != 4 {
		return r, fmt.Errorf("latency distribution not found (run wrk with --latency)")
	}
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		r.non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := wrkSocket.FindStringSubmatch(out); m != nil {
		for _, v := range m[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			r.socketErrors += n
		}
	}
	return r, nil
}

// BenchmarkReviewWrk drives POST /v1/admission/review on an in-process
// server with wrk (2 threads, 32 connections, 15 s by default) against
// 127.0.0.1, and reports requests/s and latency percentiles. Every review
// is audited: the benchmark checks that the trail holds an
// admission.reviewed event for every request wrk completed. The event is
// queued, not committed, before the answer, so the benchmark also reports
// the rate the trail committed while wrk ran and how many answered
// reviews it had still to commit when wrk stopped.
//
// wrk's percentiles include its correction for coordinated omission: a
// connection whose answer took several times the mean interval between
// its requests also counts the requests it would have sent meanwhile, so a
// stall of S ms adds about S times the request rate of samples, whichever
// the connection count. The p99 therefore measures how much of the run the
// server did not answer at all (for want of a CPU, in the garbage
// collector), which the server's own histogram of handler times cannot
// show. Knobs: SANDGATE_BENCH_WRK_SECONDS, SANDGATE_BENCH_WRK_CONNECTIONS,
// SANDGATE_BENCH_WRK_THREADS, and the server's SANDGATE_AUDIT_MAX_BACKLOG.
func BenchmarkReviewWrk(b *testing.B) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		b.Fatalf("wrk is not installed (apt-get install wrk; make bench installs it): %v", err)
	}
	s := startServerLoggingToFile(b)
	seconds := benchInt("SANDGATE_BENCH_WRK_SECONDS", 15)
	conns := benchInt("SANDGATE_BENCH_WRK_CONNECTIONS", 32)
	threads := benchInt("SANDGATE_BENCH_WRK_THREADS", 2)

	script := filepath.Join(b.TempDir(), "review.lua")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(reviewScript, s.Token)), 0o600); err != nil {
		b.Fatal(err)
	}
	url := s.URL + "/v1/admission/review"
	// A short warm-up run, so that the measured one starts with a warm
	// policy engine, connection pool and heap.
	if out, err := exec.Command(wrk, "-t1", "-c4", "-d2s", "-s", script, url).CombinedOutput(); err != nil {
		b.Fatalf("wrk warm-up: %v: %s", err, out)
	}
	// The warm-up's reviews are committed by the writer's next batches:
	// count from when the trail has stopped growing.
	db := audittest.OpenDB(b, s.DSN)
	base := countReviewed(b, db)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		n := countReviewed(b, db)
		if n == base {
			break
		}
		base = n
	}

	client := &http.Client{Timeout: time.Minute}
	within0, total0 := reviewsWithin(b, client, s, "0.025")
	b.ResetTimer()
	cpu0 := processCPU()
	out, err := exec.Command(wrk, fmt.Sprintf("-t%d", threads), fmt.Sprintf("-c%d", conns),
		fmt.Sprintf("-d%ds", seconds), "--latency", "-s", script, url).CombinedOutput()
	cpu := processCPU() - cpu0
	b.StopTimer()
	if err != nil {
		b.Fatalf("wrk: %v: %s", err, out)
	}
	r, err := parseWrk(string(out))
	if err != nil {
		b.Fatalf("%v:\n%s", err, out)
	}
	load := loadAverage()
	if r.non2xx > 0 || r.socketErrors > 0 {
		b.Errorf("%d non-2xx answers and %d socket errors", r.non2xx, r.socketErrors)
	}

	// A review is answered once its event is queued, not committed (Emit,
	// not Record), so the answer rate can outrun the trail: what the trail
	// committed while wrk ran is the rate it sustains, and the backlog
	// when wrk stops is what the gateway holds in memory.
	stopped := time.Now()
	audited := countReviewed(b, db) - base
	committedRate := float64(audited) / r.duration.Seconds()
	backlog := max(r.requests-audited, 0)
	// Every completed review is in the trail once the writer has caught
	// up; requests cut off when wrk stopped may add a few more.
	deadline := time.Now().Add(time.Minute)
	for audited < r.requests && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		audited = countReviewed(b, db) - base
	}
	catchUp := time.Since(stopped)
	if audited < r.requests {
		b.Errorf("%d admission.reviewed events for %d completed reviews", audited, r.requests)
	}

	b.ReportMetric(r.rps, "req/s")
	b.ReportMetric(ms(r.p50), "p50-ms")
	b.ReportMetric(ms(r.p75), "p75-ms")
	b.ReportMetric(ms(r.p90), "p90-ms")
	b.ReportMetric(ms(r.p99), "p99-ms")
	b.ReportMetric(float64(audited), "audited")
	b.ReportMetric(committedRate, "committed-during-run/s")
	b.ReportMetric(float64(backlog), "audit-backlog-at-end")
	// The server's own latency histogram separates time spent in the
	// handler from time spent waiting for a CPU, in the kernel or in wrk.
	within, total := reviewsWithin(b, client, s, "0.025")
	serverWithin := 100 * float64(within-within0) / float64(max(total-total0, 1))
	b.ReportMetric(serverWithin, "server-within-25ms-%")
	// The server's CPU time per review (user and system, the in-process
	// server being this process) depends far less on what else the
	// machine runs than the rate does.
	cpuPerReq := float64(cpu.Microseconds()) / float64(max(r.requests, 1))
	b.ReportMetric(cpuPerReq, "server-cpu-us/req")
	// The peak RSS is the in-process server's plus the harness's (small):
	// what the garbage collector's target costs in memory.
	b.ReportMetric(peakRSSMiB(), "process-peak-rss-MiB")
	b.Logf("%.0f req/s, p50 %.2f ms, p99 %.2f ms (goal >= 3000 req/s, p99 <= 25 ms); %d reviews, %d audited; server CPU %.0f us/review; %.2f%% handled within 25 ms; load %s",
		r.rps, ms(r.p50), ms(r.p99), r.requests, audited, cpuPerReq, serverWithin, load)
	b.Logf("the trail committed %.0f reviews/s while wrk ran; %d answered reviews were not yet committed when it stopped, all were %v later",
		committedRate, backlog, catchUp.Round(time.Millisecond))
	b.Logf("wrk -t%d -c%d -d%ds --latency:\n%s", threads, conns, seconds, out)
}

// startServerLoggingToFile is startServer with the server's log in a file,
// where a deployed server's stderr goes, instead of the harness's
// in-memory buffer. That buffer holds every line, 20-40 MB by the end of
// a run, and each time it grows it is copied to fresh memory: in an
// execution trace the goroutine writing the log held one of the two CPUs
// for 130 ms doing so, a stall a deployed server does not have. The log's
// tail is shown when the benchmark fails.
func startServerLoggingToFile(b *testing.B) *testServer {
	b.Helper()
	executortest.RequireDocker(b)
	state := b.TempDir()
	env := map[string]string{
		"SANDGATE_LISTEN":       "127.0.0.1:0",
		"SANDGATE_DEV":          "1",
		"SANDGATE_DATABASE_URL": audittest.NewDatabase(b),
		"SANDGATE_SPOOL_DIR":    state + "/spool",
		"SANDGATE_NODE":         "test-" + sandgatetest.RandomHex(b, 4),
		"DOCKER_HOST":           executortest.DockerHost(),
	}
	// The audit backlog's bound is a knob of the benchmark too.
	if v := os.Getenv("SANDGATE_AUDIT_MAX_BACKLOG"); v != "" {
		env["SANDGATE_AUDIT_MAX_BACKLOG"] = v
	}
	logPath := filepath.Join(state, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	tail := func() string {
		raw, _ := os.ReadFile(logPath)
		return string(raw[max(0, len(raw)-64<<10):])
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{DSN: env["SANDGATE_DATABASE_URL"], Node: env["SANDGATE_NODE"], Env: env,
		cancel: cancel, done: make(chan error, 1), logs: &syncBuffer{}}
	type listening struct{ addr, token string }
	ready := make(chan listening, 1)
	go func() {
		s.done <- runApp(ctx, []string{"serve"}, env, logFile, func(addr, token string) { ready <- listening{addr, token} })
	}()
	select {
	case l := <-ready:
		s.URL, s.Token = "http://"+l.addr, l.token
	case err := <-s.done:
		cancel()
		b.Fatalf("sandgate serve exited before listening: %v\n%s", err, tail())
	case <-time.After(60 * time.Second):
		cancel()
		b.Fatalf("sandgate serve did not listen within 60s\n%s", tail())
	}
	if s.Client, err = client.New(s.URL, s.Token); err != nil {
		b.Fatal(err)
	}
	s.waitReady(b)
	b.Cleanup(func() {
		if err := s.Stop(); err != nil {
			b.Errorf("sandgate serve: %v", err)
		}
		logFile.Close()
		assertNoContainers(b, s.Node)
		if b.Failed() {
			b.Logf("server log (tail of %s):\n%s", logPath, tail())
		}
	})
	return s
}

// reviewsWithin reads the server's request latency histogram from
// /metrics: how many reviews answered 200 within le seconds (a bucket
// bound, such as "0.025"), and how many there were.
func reviewsWithin(b *testing.B, client *http.Client, s *testServer, le string) (within, total int64) {
	b.Helper()
	resp, err := client.Get(s.URL + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	const name = "sandgate_http_request_duration_seconds"
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, `route="/v1/admission/review"`) || !strings.Contains(line, `status="200"`) {
			continue
		}
		f := strings.Fields(line)
		n, _ := strconv.ParseFloat(f[len(f)-1], 64)
		switch {
		case strings.HasPrefix(line, name+"_bucket") && strings.Contains(line, `le="`+le+`"`):
			within = int64(n)
		case strings.HasPrefix(line, name+"_count"):
			total = int64(n)
		}
	}
	return within, total
}

// processCPU returns the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSSMiB is this process's peak resident set size.
func peakRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // kilobytes on Linux
}

// countReviewed counts the trail's admission.reviewed events.
func countReviewed(b *testing.B, db *sql.DB) int64 {
	b.Helper()
	var n int64
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM audit_events WHERE type = $1`,
		string(sandgate.EventAdmissionReviewed)).Scan(&n); err != nil {
		b.Fatalf("count admission.reviewed: %v", err)
	}
	return n
}

// runTrue runs `true` through the API, waiting for its end, and returns
// the wall time of the request and the finished run; anything but a
// succeeded run fails the benchmark.
func runTrue(b *testing.B, client *http.Client, s *testServer) (time.Duration, api.RunView) {
	b.Helper()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/runs?wait=60s", strings.NewReader(`{"command":["true"]}`))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	elapsed := time.Since(start)
	var run api.RunView
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &run) != nil ||
		run.Outcome == nil || *run.Outcome != sandgate.OutcomeSucceeded {
		b.Fatalf("sandgate run: %d %s", resp.StatusCode, body)
	}
	return elapsed, run
}

// TestParseWrk checks parseWrk on wrk 4.1's --latency reports.
func TestParseWrk(t *testing.T) {
	report := `Running 15s test @ http://127.0.0.1:42173/v1/admission/review
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    24.23ms   43.06ms 427.60ms   90.63%
    Req/Sec     1.45k   820.22     4.27k    71.33%
  Latency Distribution
     50%    8.45ms
     75%   24.55ms
     90%  964.28us
     99%    1.22s
  42868 requests in 15.09s, 37.08MB read
EXTRA
Requests/sec:   2840.21
Transfer/sec:      2.46MB
`
	tests := []struct {
		name  string
		extra string
		want  wrkResult
	}{
		{"clean", "", wrkResult{requests: 42868, duration: 15090 * time.Millisecond, rps: 2840.21,
			p50: 8450 * time.Microsecond, p75: 24550 * time.Microsecond, p90: 964280 * time.Nanosecond,
			p99: 1220 * time.Millisecond}},
		{"errors", "  Socket errors: connect 0, read 2, write 0, timeout 3\n  Non-2xx or 3xx responses: 7",
			wrkResult{requests: 42868, duration: 15090 * time.Millisecond, rps: 2840.21,
				p50: 8450 * time.Microsecond, p75: 24550 * time.Microsecond, p90: 964280 * time.Nanosecond,
				p99: 1220 * time.Millisecond, non2xx: 7, socketErrors: 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseWrk(strings.Replace(report, "EXTRA", tc.extra, 1))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(wrkResult{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := parseWrk("Running 15s test\n  1 requests in 1.00s, 1KB read\nRequests/sec: 1\n"); err == nil {
		t.Error("a report without --latency was accepted")
	}
}

// interleaved measures a and b pairs times each, alternating which goes
// first, so that neither is favoured by what the other left warm or busy.
func interleaved(pairs int, a, b func() time.Duration) (as, bs []time.Duration) {
	return interleavedAfter(nil, pairs, nil, a, b)
}

// interleavedAfter is interleaved with before run ahead of each pair,
// outside tb's timer (tb and before may be nil).
func interleavedAfter(tb *testing.B, pairs int, before func(), a, b func() time.Duration) (as, bs []time.Duration) {
	as, bs = make([]time.Duration, 0, pairs), make([]time.Duration, 0, pairs)
	for i := range pairs {
		if before != nil {
			if tb != nil {
				tb.StopTimer()
			}
			before()
			if tb != nil {
				tb.StartTimer()
			}
		}
		if i%2 == 0 {
			as = append(as, a())
			bs = append(bs, b())
		} else {
			bs = append(bs, b())
			as = append(as, a())
		}
	}
	return as, bs
}
