package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/sandgatetest"
)

// BenchmarkGateBeforeAfter measures two builds of sandgate side by side
// on the same daemon and database server: SANDGATE_BENCH_BEFORE and
// SANDGATE_BENCH_AFTER name their binaries (deploy/bench-gate.sh builds
// them, the tree of a revision and the working tree). Each binary serves
// from a process of its own with a database of its own; the requests to
// the two alternate, which goes first changing every pair, so that drift
// in the machine's load falls on both. It reports the medians of each and
// the after/before ratio of the medians for:
//
//   - a cold run: POST /v1/runs?wait=60s of `true` (no warm pool);
//   - a warm run: the same from a warm pool of one, full before each run;
//   - a session command: POST /v1/sessions/{id}/runs?wait=60s of `true`;
//   - an admission review: POST /v1/admission/review, one at a time.
//
// SANDGATE_BENCH_PAIRS (default 21) and SANDGATE_BENCH_REVIEWS (default
// 401) set the sample sizes.
func BenchmarkGateBeforeAfter(b *testing.B) {
	before, after := os.Getenv("SANDGATE_BENCH_BEFORE"), os.Getenv("SANDGATE_BENCH_AFTER")
	if before == "" || after == "" {
		b.Skip("SANDGATE_BENCH_BEFORE and SANDGATE_BENCH_AFTER name the binaries to compare (deploy/bench-gate.sh)")
	}
	executortest.RequireDocker(b)
	pairs := benchInt("SANDGATE_BENCH_PAIRS", 21)
	reviews := benchInt("SANDGATE_BENCH_REVIEWS", 401)
	client := &http.Client{Timeout: 2 * time.Minute}
	type figure struct {
		name          string
		before, after []time.Duration
	}
	var figures []*figure
	measure := func(name string, n int, b0, a0 func() time.Duration) {
		f := &figure{name: name}
		for i := range n {
			if i%2 == 0 {
				f.before = append(f.before, b0())
				f.after = append(f.after, a0())
			} else {
				f.after = append(f.after, a0())
				f.before = append(f.before, b0())
			}
		}
		figures = append(figures, f)
	}

	b.ResetTimer()
	// Cold runs, session commands and reviews: no warm pool.
	func() {
		sb, sa := startBinary(b, before, "0"), startBinary(b, after, "0")
		defer sb.stop(b)
		defer sa.stop(b)
		for _, s := range []*binaryServer{sb, sa} { // warm-up: images, connections, page cache
			runTrue(b, client, &s.testServer)
			runTrue(b, client, &s.testServer)
		}
		cold := func(s *binaryServer) func() time.Duration {
			return func() time.Duration { d, _ := runTrue(b, client, &s.testServer); return d }
		}
		measure("cold run", pairs, cold(sb), cold(sa))
		ssb, ssa := benchOpenSession(b, client, &sb.testServer), benchOpenSession(b, client, &sa.testServer)
		exec := func(s *binaryServer, id string) func() time.Duration {
			return func() time.Duration {
				start := time.Now()
				benchExecTrue(b, client, &s.testServer, id)
				return time.Since(start)
			}
		}
		exec(sb, ssb.ID)()
		exec(sa, ssa.ID)()
		measure("session command", pairs, exec(sb, ssb.ID), exec(sa, ssa.ID))
		benchDelete(b, client, &sb.testServer, "/v1/sessions/"+ssb.ID)
		benchDelete(b, client, &sa.testServer, "/v1/sessions/"+ssa.ID)
		review := func(s *binaryServer) func() time.Duration {
			return func() time.Duration { return benchReview(b, client, s) }
		}
		for range 20 {
			review(sb)()
			review(sa)()
		}
		measure("admission review", reviews, review(sb), review(sa))
	}()
	// Warm runs: a pool of one run container, full before each run.
	func() {
		const poolSize = 1
		sb, sa := startBinary(b, before, strconv.Itoa(poolSize)), startBinary(b, after, strconv.Itoa(poolSize))
		defer sb.stop(b)
		defer sa.stop(b)
		warm := func(s *binaryServer) func() time.Duration {
			return func() time.Duration {
				deadline := time.Now().Add(2 * time.Minute)
				for warmIdle(b, s.Node) != poolSize*servedProfiles {
					if time.Now().After(deadline) {
						b.Fatalf("the warm pool of %s did not refill", s.Node)
					}
					time.Sleep(20 * time.Millisecond)
				}
				d, _ := runTrue(b, client, &s.testServer)
				return d
			}
		}
		warm(sb)()
		warm(sa)()
		measure("warm run", pairs, warm(sb), warm(sa))
	}()
	b.StopTimer()

	var table strings.Builder
	fmt.Fprintf(&table, "\n| figure | samples each | before p50 | after p50 | after/before |\n|---|---|---|---|---|\n")
	for _, f := range figures {
		mb, ma := sandgatetest.Median(slices.Clone(f.before)), sandgatetest.Median(slices.Clone(f.after))
		ratio := float64(ma) / float64(mb)
		key := strings.ReplaceAll(f.name, " ", "-")
		b.ReportMetric(ms(mb), key+"-before-p50-ms")
		b.ReportMetric(ms(ma), key+"-after-p50-ms")
		b.ReportMetric(ratio, key+"-ratio")
		fmt.Fprintf(&table, "| %s | %d | %.2f ms | %.2f ms | %.3f |\n", f.name, len(f.before), ms(mb), ms(ma), ratio)
	}
	b.Logf("load %s%s", loadAverage(), table.String())
}

// benchReview posts one review and returns how long its answer took.
func benchReview(b *testing.B, client *http.Client, s *binaryServer) time.Duration {
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/admission/review",
		strings.NewReader(`{"command":["sh","-c","make test"],"env":{"API_TOKEN":"s3cr3t","CI":"true"},"labels":{"ticket":"ENG-1"}}`))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("review: %d", resp.StatusCode)
	}
	return time.Since(start)
}

// binaryServer is `sandgate serve` of a built binary, in a process of its
// own, with a database, state directories and node name of its own.
type binaryServer struct {
	testServer
	cmd  *exec.Cmd
	logs *bytes.Buffer
	done chan error
}

// startBinary starts bin's serve with a warm pool of pool and waits until
// it is ready. Its token is a submitter's of the tokens file it is given;
// opts change its environment.
func startBinary(b *testing.B, bin, pool string, opts ...serverOption) *binaryServer {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tokens, tok := writeTokensFile(b, []authPrincipal{{"bench", "bench", []sandgate.Role{sandgate.RoleSubmitter}}})
	state := b.TempDir()
	node := "bench-" + sandgatetest.RandomHex(b, 4)
	env := map[string]string{
		"SANDGATE_LISTEN": addr, "SANDGATE_DEV": "0", "SANDGATE_TOKENS_FILE": tokens,
		"SANDGATE_DATABASE_URL": audittest.NewDatabase(b), "SANDGATE_SPOOL_DIR": state + "/spool",
		"SANDGATE_VOLUME_DIR": state + "/volumes", "SANDGATE_WORKSPACE_DIR": state + "/workspaces",
		"SANDGATE_UPLOAD_DIR": state + "/uploads", "SANDGATE_NODE": node, "DOCKER_HOST": executortest.DockerHost(),
		"SANDGATE_AGENT_BINARY": bin, "SANDGATE_WARM_POOL": pool,
	}
	for _, o := range opts {
		o(env)
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	s := &binaryServer{testServer: testServer{URL: "http://" + addr, Token: tok["bench"], Node: node}, cmd: cmd,
		logs: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { s.done <- cmd.Wait() }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case err := <-s.done:
			b.Fatalf("%s serve exited: %v\n%s", bin, err, s.logs)
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			b.Fatalf("%s serve is not ready\n%s", bin, s.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the server as SIGTERM does and checks it left no container.
func (s *binaryServer) stop(b *testing.B) {
	b.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		s.cmd.Process.Kill()
		b.Errorf("serve did not stop\n%s", s.logs)
	}
	assertNoContainers(b, s.Node)
}
