package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The scale benchmarks of a node: idle sessions and live followers. Each
// starts the sandgate binary as a process of its own (startBinary), so that
// the gateway's memory is its own and not the load generator's, and reads
// the memory of processes from /proc. make bench-scale runs every size
// (SANDGATE_BENCH_SCALE=full); make bench the smallest.

// scaleBundle is the policy bundle with team limits that let one team
// hold many containers at once, and the server options that go with it.
func scaleServerOptions(b *testing.B, containers int) []serverOption {
	policy := bundleWith(b, func(c map[string]any) {
		c["team_limits"] = map[string]any{"default": map[string]any{"concurrent": containers + 16, "queued": containers + 16,
			"memory_mb": 0, "cpus": 0}, "teams": map[string]any{}}
	})
	// One team may take the whole node, its run slots and its sessions
	// (sessions have a budget of their own, up to 1,024; run slots stop
	// at 256).
	return []serverOption{withEnv("SANDGATE_POLICY_DIR", policy),
		withEnv("SANDGATE_MAX_CONCURRENT", strconv.Itoa(min(containers+16, 256))),
		withEnv("SANDGATE_MAX_SESSIONS", strconv.Itoa(min(containers+16, 1024))), withEnv("SANDGATE_TEAM_SHARE", "100")}
}

// procMemory is what /proc says of one process's memory, in bytes.
type procMemory struct{ rss, pss int64 }

// readProcMemory reads pid's resident and proportional set sizes from
// smaps_rollup (PSS shares each shared page among the processes that map
// it, so a sum of PSS does not count a shared library twice).
func readProcMemory(pid int) (procMemory, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return procMemory{}, err
	}
	var m procMemory
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			m.rss = kb << 10
		case "Pss:":
			m.pss = kb << 10
		}
	}
	return m, nil
}

// containerProcesses finds, for each of the containers, the host's
// processes in its cgroup (for an idle session: docker-init and the agent)
// and its containerd shim (the process whose command line names the
// container's ID), and sums their memory by kind.
func containerProcesses(containers []string) (inside, shims procMemory, err error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return inside, shims, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		isShim := bytes.Contains(cmdline, []byte("containerd-shim"))
		for _, id := range containers {
			var into *procMemory
			switch {
			case isShim && bytes.Contains(cmdline, []byte(id)):
				into = &shims
			case !isShim && bytes.Contains(cg, []byte(id)):
				into = &inside
			default:
				continue
			}
			m, err := readProcMemory(pid)
			if err == nil {
				into.rss += m.rss
				into.pss += m.pss
			}
			break
		}
	}
	return inside, shims, nil
}

const mib = 1 << 20

// BenchmarkScaleSessions opens 10, 100 and 500 idle sessions on one node
// (SANDGATE_BENCH_SESSIONS lists sizes by hand) and reports, at each size,
// the host memory an idle session costs: the gateway's (its process's RSS
// over what it was with none open), its containerd shim's and its
// container's processes' (docker-init and the agent: nothing else runs in
// an idle session), each as PSS per session, and then a command's p50
// and p99 (`true`, 60 in sessions picked at random, one at a time) at
// that density. Goals at 500: ≤ 16 MiB per session, command p50 ≤ 15 ms.
func BenchmarkScaleSessions(b *testing.B) {
	sizes := sandgatetest.ScaleSizes("SANDGATE_BENCH_SESSIONS", []int{10}, []int{10, 100, 500})
	bin := executortest.AgentBinary(b)
	s := startBinary(b, bin, "0", scaleServerOptions(b, sizes[len(sizes)-1])...)
	defer s.stop(b)
	client := &http.Client{Timeout: 2 * time.Minute}
	ts := &s.testServer
	// Before any session: the gateway with its first command's paths warm.
	warm := benchOpenSession(b, client, ts)
	benchExecTrue(b, client, ts, warm.ID)
	benchDelete(b, client, ts, "/v1/sessions/"+warm.ID)
	time.Sleep(time.Second)
	gw0, err := readProcMemory(s.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	var sessions []api.SessionView
	defer func() {
		for _, ss := range sessions {
			benchDelete(b, client, ts, "/v1/sessions/"+ss.ID)
		}
	}()
	var baseP50 time.Duration
	for _, n := range sizes {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			openSessions(b, client, ts, &sessions, n)
			// Idle: the agents' and shims' start-up done and collected, the
			// daemon's work for the new containers finished.
			time.Sleep(2 * time.Second)
			busy := waitQuiet(b, 90*time.Second)
			var cmds []time.Duration
			var gw, inside, shims procMemory
			for b.Loop() {
				ids := make([]string, len(sessions))
				for i, ss := range sessions {
					ids[i] = ss.ContainerID
				}
				var err error
				if inside, shims, err = containerProcesses(ids); err != nil {
					b.Fatal(err)
				}
				if gw, err = readProcMemory(s.cmd.Process.Pid); err != nil {
					b.Fatal(err)
				}
				rnd := rand.New(rand.NewPCG(uint64(n), 1))
				cmds = cmds[:0]
				for range 60 {
					ss := sessions[rnd.IntN(len(sessions))]
					t0 := time.Now()
					benchExecTrue(b, client, ts, ss.ID)
					cmds = append(cmds, time.Since(t0))
				}
			}
			per := func(v int64) float64 { return float64(v) / float64(n) / mib }
			gwPer := per(gw.rss - gw0.rss)
			total := gwPer + per(shims.pss) + per(inside.pss)
			p50 := sandgatetest.Median(cmds)
			if baseP50 == 0 {
				baseP50 = p50
			}
			b.ReportMetric(total, "MiB/session")
			b.ReportMetric(gwPer, "gateway-MiB/session")
			b.ReportMetric(per(shims.pss), "shim-pss-MiB/session")
			b.ReportMetric(per(inside.pss), "agent-pss-MiB/session")
			b.ReportMetric(per(shims.rss+inside.rss), "shim+agent-rss-MiB/session")
			b.ReportMetric(float64(gw.rss)/mib, "gateway-rss-MiB")
			b.ReportMetric(sandgatetest.Millis(p50), "command-p50-ms")
			b.ReportMetric(sandgatetest.Millis(sandgatetest.Percentile(cmds, 99)), "command-p99-ms")
			b.ReportMetric(float64(p50)/float64(baseP50), "command-p50-x-smallest")
			b.ReportMetric(busy*100, "cpu-busy-before-%")
			b.Logf("%d idle sessions: %.1f MiB each (gateway %.1f, shim %.1f, agent %.1f PSS); command p50 %.1f ms; the host's CPUs %.0f %% busy in the second before; load %s",
				n, total, gwPer, per(shims.pss), per(inside.pss), sandgatetest.Millis(p50), busy*100, loadAverage())
		})
	}
}

// openSessions opens sessions until there are n, eight at a time.
func openSessions(b *testing.B, client *http.Client, s *testServer, sessions *[]api.SessionView, n int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	start := time.Now()
	for range n - len(*sessions) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ss := benchOpenSession(b, client, s)
			mu.Lock()
			*sessions = append(*sessions, ss)
			mu.Unlock()
		})
	}
	wg.Wait()
	b.Logf("%d sessions open (%v)", len(*sessions), time.Since(start).Round(time.Millisecond))
}

// followerScript prints the wall clock in microseconds (busybox adjtimex
// reads it) every 200 ms, about ten minutes long.
const followerScript = `i=0; while [ $i -lt 3000 ]; do adjtimex | awk '/tv_sec/{s=$2} /tv_usec/{printf "%s.%06d\n", s, $2}'; sleep 0.2; i=$((i+1)); done`

// BenchmarkScaleFollowers follows running runs with 100, 1,000 and 10,000
// live SSE followers (GET /v1/runs/{id}/logs?follow=true; SANDGATE_BENCH_FOLLOWERS
// lists sizes by hand) spread over ten runs, each printing the wall clock
// to the microsecond every 200 ms. Each line's delay is the time a
// follower read it minus the time it states: from the write in the
// container to the follower (the output latency of NFR-05), through the
// executor's capture, the live log and the gateway's SSE. It reports the
// gateway's RSS (its own process) and the p50 and p99 of the delay over
// every line every follower read in ten seconds. Goals at 10k: RSS ≤ 1
// GiB, p99 ≤ 50 ms.
func BenchmarkScaleFollowers(b *testing.B) {
	sizes := sandgatetest.ScaleSizes("SANDGATE_BENCH_FOLLOWERS", []int{100}, []int{100, 1_000, 10_000})
	const runs = 10
	bin := executortest.AgentBinary(b)
	s := startBinary(b, bin, "0", scaleServerOptions(b, runs)...)
	defer s.stop(b)
	ts := &s.testServer
	client := &http.Client{Timeout: 2 * time.Minute}
	var ids []string
	for range runs {
		ids = append(ids, startFollowedRun(b, client, ts))
	}
	defer func() {
		for _, id := range ids {
			benchDelete(b, client, ts, "/v1/runs/"+id)
		}
	}()
	rss0, err := readProcMemory(s.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	var baseP99 time.Duration
	for _, n := range sizes {
		b.Run(fmt.Sprintf("followers=%d", n), func(b *testing.B) {
			var delays []time.Duration
			var rss procMemory
			for b.Loop() {
				delays, rss = followRuns(b, s, ids, n)
			}
			p99 := sandgatetest.Percentile(delays, 99)
			if baseP99 == 0 {
				baseP99 = p99
			}
			b.ReportMetric(float64(rss.rss)/mib, "gateway-rss-MiB")
			b.ReportMetric(float64(rss.rss-rss0.rss)/float64(n)/1024, "gateway-KiB/follower")
			b.ReportMetric(sandgatetest.Millis(sandgatetest.Median(delays)), "line-delay-p50-ms")
			b.ReportMetric(sandgatetest.Millis(p99), "line-delay-p99-ms")
			b.ReportMetric(float64(p99)/float64(baseP99), "line-delay-p99-x-smallest")
			b.ReportMetric(float64(len(delays)), "lines-read")
			b.Logf("%d followers: gateway RSS %.0f MiB; delay p50 %.2f ms, p99 %.2f ms over %d lines; load %s", n,
				float64(rss.rss)/mib, sandgatetest.Millis(sandgatetest.Median(delays)), sandgatetest.Millis(p99), len(delays), loadAverage())
		})
	}
}

// startFollowedRun starts a run of followerScript and returns its ID.
func startFollowedRun(b *testing.B, client *http.Client, s *testServer) string {
	spec, _ := json.Marshal(map[string]any{"command": []string{"sh", "-c", followerScript}, "timeout_seconds": 900})
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/runs", bytes.NewReader(spec))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var run api.RunView
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &run) != nil {
		b.Fatalf("start run: %d %s", resp.StatusCode, body)
	}
	return run.ID
}

// followRuns connects n followers spread over the runs, then records for
// ten seconds every line's delay, and reads the gateway's memory while all
// are connected; then it disconnects them.
func followRuns(b *testing.B, s *binaryServer, ids []string, n int) ([]time.Duration, procMemory) {
	tr := &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var measuring atomic.Bool
	var connected, failed atomic.Int64
	var mu sync.Mutex
	var all []time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/runs/"+ids[i%len(ids)]+"/logs?follow=true", nil)
			req.Header.Set("Authorization", "Bearer "+s.Token)
			resp, err := client.Do(req)
			<-sem
			if err != nil || resp.StatusCode != http.StatusOK {
				failed.Add(1)
				return
			}
			connected.Add(1)
			go func() { <-stop; cancel() }()
			defer resp.Body.Close()
			var mine []time.Duration
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				now := time.Now()
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok || !measuring.Load() {
					continue
				}
				var chunk api.ChunkData
				if json.Unmarshal([]byte(data), &chunk) != nil {
					continue
				}
				out, err := chunk.Bytes()
				if err != nil {
					continue
				}
				for _, line := range strings.Split(string(out), "\n") {
					if t, ok := parseMicros(line); ok {
						mine = append(mine, now.Sub(t))
					}
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	sandgatetest.WaitFor(b, fmt.Sprintf("%d followers connected", n), 5*time.Minute, func() bool {
		return connected.Load()+failed.Load() == int64(n)
	})
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d followers could not connect", f, n)
	}
	time.Sleep(2 * time.Second)
	measuring.Store(true)
	time.Sleep(10 * time.Second)
	measuring.Store(false)
	rss, err := readProcMemory(s.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if len(all) == 0 {
		b.Fatal("no line was read")
	}
	return all, rss
}

// parseMicros reads followerScript's "seconds.microseconds".
func parseMicros(line string) (time.Time, bool) {
	sec, usec, ok := strings.Cut(line, ".")
	a, err1 := strconv.ParseInt(sec, 10, 64)
	u, err2 := strconv.ParseInt(usec, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(usec) != 6 {
		return time.Time{}, false
	}
	return time.Unix(a, u*1000), true
}

// waitQuiet waits, at most limit, until the host's CPUs were less than a
// fifth busy over a second (/proc/stat), and returns how busy they were
// in the last second it measured.
func waitQuiet(b *testing.B, limit time.Duration) float64 {
	b.Helper()
	sample := func() (busy, total uint64) {
		raw, err := os.ReadFile("/proc/stat")
		if err != nil {
			b.Fatal(err)
		}
		line, _, _ := strings.Cut(string(raw), "\n")
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseUint(f, 10, 64)
			total += v
			if i != 3 && i != 4 { // idle, iowait
				busy += v
			}
		}
		return busy, total
	}
	var share float64
	for deadline := time.Now().Add(limit); ; {
		b0, t0 := sample()
		time.Sleep(time.Second)
		b1, t1 := sample()
		share = float64(b1-b0) / float64(max(t1-t0, 1))
		if share < 0.2 || time.Now().After(deadline) {
			return share
		}
	}
}
