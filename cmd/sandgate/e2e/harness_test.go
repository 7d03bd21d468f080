package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api/apitest"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// testServer is a real `sandgate serve` started in-process on a loopback
// port, with its own fresh database, spool and node name, driving the real
// Docker daemon.
type testServer struct {
	URL    string
	Token  string
	DSN    string
	Node   string
	Env    map[string]string
	Client *client.Client
	// HTTP is the HTTP client of do, doAs and Client: it validates every
	// request and answer against the OpenAPI document (in tests, not in
	// benchmarks).
	HTTP *http.Client

	check *apitest.Checker

	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
	once   sync.Once
	err    error
}

// serverOption changes a test server's environment before it starts.
type serverOption func(env map[string]string)

// withEnv sets one environment variable of the server.
func withEnv(key, value string) serverOption {
	return func(env map[string]string) { env[key] = value }
}

// startServer starts `sandgate serve` on 127.0.0.1:0 and waits until it
// answers /readyz. It is stopped (SIGTERM-equivalent: its context is
// cancelled) at the end of the test, and the test fails if any container of
// its node is left behind.
func startServer(t testing.TB, opts ...serverOption) *testServer {
	t.Helper()
	executortest.RequireDocker(t)
	dsn := audittest.NewDatabase(t)
	state := t.TempDir()
	node := "test-" + sandgatetest.RandomHex(t, 4)
	env := map[string]string{
		"SANDGATE_LISTEN":        "127.0.0.1:0",
		"SANDGATE_DEV":           "1",
		"SANDGATE_DATABASE_URL":  dsn,
		"SANDGATE_SPOOL_DIR":     state + "/spool",
		"SANDGATE_VOLUME_DIR":    state + "/volumes",
		"SANDGATE_WORKSPACE_DIR": state + "/workspaces",
		"SANDGATE_UPLOAD_DIR":    state + "/uploads",
		"SANDGATE_NODE":          node,
		"DOCKER_HOST":            executortest.DockerHost(),
		"SANDGATE_AGENT_BINARY":  executortest.AgentBinary(t),
	}
	for _, o := range opts {
		o(env)
	}
	return startServerWithEnv(t, env)
}

// startServerWithEnv starts a server with exactly env; tests that restart a
// server on the same database and spool pass the Env of the first one.
func startServerWithEnv(t testing.TB, env map[string]string) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{
		DSN:    env["SANDGATE_DATABASE_URL"],
		Node:   env["SANDGATE_NODE"],
		Env:    env,
		cancel: cancel,
		done:   make(chan error, 1),
		logs:   &syncBuffer{},
	}
	type listening struct{ addr, token string }
	ready := make(chan listening, 1)
	a := func(args []string) error {
		return runApp(ctx, args, env, s.logs, func(addr, token string) { ready <- listening{addr, token} })
	}
	go func() { s.done <- a([]string{"serve"}) }()
	select {
	case l := <-ready:
		s.URL, s.Token = "http://"+l.addr, l.token
	case err := <-s.done:
		cancel()
		t.Fatalf("sandgate serve exited before listening: %v\n%s", err, s.logs.String())
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("sandgate serve did not listen within 60s\n%s", s.logs.String())
	}
	c, err := client.New(s.URL, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	s.HTTP = http.DefaultClient
	if _, bench := t.(*testing.B); !bench {
		s.check = apitest.New(t)
		s.HTTP = s.check.Client(nil)
	}
	c.HTTP = s.HTTP
	s.Client = c
	s.waitReady(t)
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("sandgate serve: %v\n%s", err, s.logs.String())
		}
		assertNoContainers(t, s.Node)
		removeVolumes(t, env["SANDGATE_VOLUME_DIR"])
		if t.Failed() {
			t.Logf("server logs:\n%s", s.logs.String())
		}
	})
	return s
}

// runApp runs the sandgate command line with env as its whole environment,
// output to logs.
func runApp(ctx context.Context, args []string, env map[string]string, logs io.Writer, onListen func(addr, token string)) error {
	return cli.Run(ctx, args, cli.Env{
		Getenv:    func(k string) string { return env[k] },
		Stdin:     strings.NewReader(""),
		Stdout:    logs,
		Stderr:    logs,
		Listening: onListen,
	})
}

// Stop cancels the server and waits for it to exit, as SIGTERM would. It
// is safe to call more than once.
func (s *testServer) Stop() error {
	s.once.Do(func() {
		s.cancel()
		select {
		case s.err = <-s.done:
		case <-time.After(90 * time.Second):
			s.err = fmt.Errorf("did not stop within 90s")
		}
	})
	return s.err
}

func (s *testServer) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz = %d %s", resp.StatusCode, body)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("/readyz: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// do sends an authenticated request with the dev token and returns the
// status and body.
func (s *testServer) do(t *testing.T, method, path, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	return s.doAs(t, s.Token, method, path, body, header...)
}

// doAs is do with another bearer token ("" sends none). header is a list of
// name, value pairs.
func (s *testServer) doAs(t *testing.T, token, method, path, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, data
}

// httpClient returns HTTP, or http.DefaultClient for a server whose
// harness set none.
func (s *testServer) httpClient() *http.Client {
	if s.HTTP == nil {
		return http.DefaultClient
	}
	return s.HTTP
}

// checked returns hc with the server's OpenAPI checker in its transport
// (hc itself in benchmarks).
func (s *testServer) checked(hc *http.Client) *http.Client {
	if s.check == nil {
		return hc
	}
	return s.check.Client(hc)
}

// assertNoContainers fails the test when any container labelled with node
// exists, running or not.
func assertNoContainers(t testing.TB, node string) {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandgate.LabelNode+"="+node).CombinedOutput()
	if err != nil {
		t.Errorf("docker ps: %v: %s", err, out)
		return
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		t.Errorf("%d container(s) of node %s left behind: %v", len(ids), node, ids)
		_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// removeVolumes removes the cache volumes a test server made in dir: their
// Docker volumes, mounts and images.
func removeVolumes(t testing.TB, dir string) {
	t.Helper()
	if dir == "" {
		return
	}
	metas, _ := filepath.Glob(filepath.Join(dir, "images", "*.json"))
	for _, m := range metas {
		name := strings.TrimSuffix(filepath.Base(m), ".json")
		if out, err := exec.Command("docker", "volume", "rm", "-f", name).CombinedOutput(); err != nil {
			t.Errorf("docker volume rm %s: %v: %s", name, err, out)
		}
		if mnt := filepath.Join(dir, "mnt", name); exec.Command("mountpoint", "-q", mnt).Run() == nil {
			if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", mnt, err, out)
			}
		}
	}
}
