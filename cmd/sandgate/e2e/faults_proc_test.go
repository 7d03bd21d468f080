package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/api/apitest"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The sandgate binary the fault tests run as a separate process, built
// once per test binary.
var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// sandgateBinary builds cmd/sandgate once per test binary, with the race
// detector when the tests have it. The build lands in a fresh directory
// and is then renamed to one fixed path per flavour and source tree, so
// that repeated test runs leave one binary behind, not one each, a process
// still running an older build keeps its own file, and another checkout's
// tests never replace it.
func sandgateBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		// One directory per source tree: two checkouts testing at once
		// must not run each other's build.
		wd, err := os.Getwd()
		if err != nil {
			binErr = err
			return
		}
		tree := sha256.Sum256([]byte(wd))
		root := filepath.Join(os.TempDir(), "sandgate-faults-bin", hex.EncodeToString(tree[:6]))
		if binErr = os.MkdirAll(root, 0o755); binErr != nil {
			return
		}
		dir, err := os.MkdirTemp(root, "build-")
		if err != nil {
			binErr = err
			return
		}
		defer os.RemoveAll(dir)
		name := "sandgate"
		args := []string{"build", "-o", filepath.Join(dir, name)}
		if raceBuild {
			name = "sandgate-race"
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "github.com/sandgate/sandgate/cmd/sandgate")...).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		binPath = filepath.Join(root, name)
		binErr = os.Rename(filepath.Join(dir, "sandgate"), binPath)
	})
	if binErr != nil {
		t.Fatalf("build sandgate: %v", binErr)
	}
	return binPath
}

// procServer is `sandgate serve` running as its own process, so that a
// test can SIGKILL it or read its resident memory.
type procServer struct {
	*testServer
	cmd  *exec.Cmd
	exit chan error
	logs *syncBuffer
	once sync.Once
}

// processEnv is the environment of a fresh server process: a fresh
// database on the shared cluster, its own spool and node, a development
// token, the test's Docker daemon.
func processEnv(t testing.TB) map[string]string {
	t.Helper()
	executortest.RequireDocker(t)
	state := t.TempDir()
	return map[string]string{
		"SANDGATE_DEV":           "1",
		"SANDGATE_DATABASE_URL":  audittest.NewDatabase(t),
		"SANDGATE_SPOOL_DIR":     state + "/spool",
		"SANDGATE_WORKSPACE_DIR": state + "/workspaces",
		"SANDGATE_UPLOAD_DIR":    state + "/uploads",
		"SANDGATE_NODE":          "proc-" + sandgatetest.RandomHex(t, 4),
		"DOCKER_HOST":            executortest.DockerHost(),
		"SANDGATE_AGENT_BINARY":  executortest.AgentBinary(t),
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startProcess starts the sandgate binary with `serve` and env (plus a free
// listen address) and waits until /readyz answers 200. The process is
// stopped with SIGTERM when the test ends, if it still runs.
func startProcess(t testing.TB, env map[string]string) *procServer {
	t.Helper()
	bin := sandgateBinary(t)
	if b := os.Getenv("SANDGATE_BENCH_BINARY"); b != "" {
		// Another build, for a benchmark run against it in the same
		// script.
		bin = b
	}
	env["SANDGATE_LISTEN"] = freeAddr(t)
	cmd := exec.Command(bin, "serve")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SANDGATE_") || k == "DOCKER_HOST" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logs := &syncBuffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sandgate serve: %v", err)
	}
	p := &procServer{cmd: cmd, exit: make(chan error, 1), logs: logs,
		testServer: &testServer{Node: env["SANDGATE_NODE"], DSN: env["SANDGATE_DATABASE_URL"], Env: env, logs: logs}}
	token := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logs, line)
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "export SANDGATE_TOKEN="); ok && !sent {
				token <- v
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { p.exit <- cmd.Wait() }()
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("sandgate serve (pid %d): %v", cmd.Process.Pid, err)
		}
		if t.Failed() {
			t.Logf("server logs (pid %d):\n%s", cmd.Process.Pid, logs.String())
		}
	})
	if env["SANDGATE_TOKENS_FILE"] != "" {
		// No development token: the caller sets the token it uses.
		token <- ""
	}
	select {
	case tok := <-token:
		p.Token = tok
	case err := <-p.exit:
		p.exit <- err
		t.Fatalf("sandgate serve exited before listening: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("sandgate serve printed no token within 60s\n%s", logs.String())
	}
	p.URL = "http://" + env["SANDGATE_LISTEN"]
	c, err := client.New(p.URL, p.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, bench := t.(*testing.B); !bench {
		p.check = apitest.New(t)
		p.HTTP = p.check.Client(nil)
		c.HTTP = p.HTTP
	}
	p.Client = c
	p.waitReady(t)
	return p
}

// Pid is the server's process ID.
func (p *procServer) Pid() int { return p.cmd.Process.Pid }

// Kill ends the server with SIGKILL: no shutdown of any kind.
func (p *procServer) Kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", p.Pid(), err)
	}
	p.once.Do(func() { <-p.exit })
}

// Stop ends the server with SIGTERM and waits for it: a clean exit is
// nil.
func (p *procServer) Stop() error {
	var err error
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-p.exit:
		case <-time.After(90 * time.Second):
			_ = p.cmd.Process.Kill()
			err = fmt.Errorf("did not stop within 90s of SIGTERM")
		}
	})
	return err
}

// runState reads a run through the API; ok is false when the API did not
// answer 200.
func (s *testServer) runState(t *testing.T, id string) (api.RunView, bool) {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, "/v1/runs/"+id, "")
	if status != http.StatusOK {
		return api.RunView{}, false
	}
	var v api.RunView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode run: %v: %s", err, body)
	}
	return v, true
}

// waitFinished waits until the run is finished and returns it.
func (s *testServer) waitFinished(t *testing.T, id string, limit time.Duration) api.RunView {
	t.Helper()
	var v api.RunView
	sandgatetest.WaitFor(t, "run "+id+" to finish", limit, func() bool {
		var ok bool
		v, ok = s.runState(t, id)
		return ok && v.State == sandgate.StateFinished
	})
	return v
}

// runEvents returns the audit events of a run, oldest first.
func (s *testServer) runEvents(t *testing.T, runID string) []sandgate.AuditRecord {
	t.Helper()
	var out []sandgate.AuditRecord
	cursor := ""
	for {
		path := "/v1/audit/events?limit=1000&run_id=" + runID
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		status, _, body := s.do(t, http.MethodGet, path, "")
		if status != http.StatusOK {
			t.Fatalf("audit events of %s: %d %s", runID, status, body)
		}
		var page struct {
			Events     []sandgate.AuditRecord `json:"events"`
			NextCursor *string                `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Events...)
		if page.NextCursor == nil || *page.NextCursor == "" {
			return out
		}
		cursor = *page.NextCursor
	}
}

// eventCounts counts a run's audit events by type.
func eventCounts(evs []sandgate.AuditRecord) map[sandgate.EventType]int {
	m := map[sandgate.EventType]int{}
	for _, ev := range evs {
		m[ev.Type]++
	}
	return m
}

// findEvent returns the run's first event of type typ.
func findEvent(evs []sandgate.AuditRecord, typ sandgate.EventType) (sandgate.AuditRecord, bool) {
	for _, ev := range evs {
		if ev.Type == typ {
			return ev, true
		}
	}
	return sandgate.AuditRecord{}, false
}

// verifyTrail asks the server to verify the whole trail and fails the test
// on any problem.
func (s *testServer) verifyTrail(t *testing.T) sandgate.VerifyReport {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, "/v1/audit/verify", "")
	if status != http.StatusOK {
		t.Fatalf("verify: %d %s", status, body)
	}
	var report sandgate.VerifyReport
	if err := json.Unmarshal(body, &report); err != nil {
		t.Fatal(err)
	}
	if !report.OK || report.Checked == 0 {
		t.Errorf("verify = %+v, want ok with events checked", report)
	}
	return report
}

// submitNoWait submits a run and returns its ID at once.
func (s *testServer) submitNoWait(t *testing.T, corr string, command ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := s.Client.Submit(ctx, sandgate.RunSpec{Command: command}, client.SubmitOptions{CorrelationID: corr})
	if err != nil {
		t.Fatalf("submit %v: %v", command, err)
	}
	return v.ID
}

// dockerCLI runs the docker CLI against host ("" is the default daemon).
func dockerCLI(t *testing.T, host string, args ...string) string {
	t.Helper()
	cmd := exec.Command("docker", args...)
	cmd.Env = os.Environ()
	if host != "" {
		cmd.Env = append(cmd.Env, "DOCKER_HOST="+host)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docker %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
