package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/sandgatetest"
)

// pgBin holds the PostgreSQL 15 server binaries.
const pgBin = "/usr/lib/postgresql/15/bin"

// privatePostgres is a PostgreSQL cluster of one test, listening only on a
// unix socket in its own directory, that the test may stop and start
// without disturbing the shared cluster other tests use.
type privatePostgres struct {
	dir  string
	port int
	// as runs a command as the cluster's owner.
	as []string
}

// startPrivatePostgres makes and starts a private cluster. Without the
// PostgreSQL binaries the test is skipped, or fails under CI=true.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBin, "initdb")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL 15 is required (CI=true): %v", err)
		}
		t.Skipf("PostgreSQL 15 binaries not found: %v (run deploy/bootstrap.sh)", err)
	}
	// Short path: the socket's path must fit in 107 bytes.
	dir, err := os.MkdirTemp("", "sgpg")
	if err != nil {
		t.Fatal(err)
	}
	pg := &privatePostgres{dir: dir}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root: the cluster belongs to postgres.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		pg.as = []string{"runuser", "-u", "postgres", "--"}
	}
	t.Cleanup(func() {
		_ = pg.ctl("stop", "-m", "immediate")
		os.RemoveAll(dir)
	})
	pg.port = sandgatetest.FreePort(t)
	if out, err := pg.command(filepath.Join(pgBin, "initdb"), "-D", pg.data(), "-A", "trust", "-U", "postgres", "-N").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	pg.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		t.Fatalf("connect to the private cluster: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE sandgate"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return pg
}

func (pg *privatePostgres) data() string { return filepath.Join(pg.dir, "data") }

func (pg *privatePostgres) command(name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, pg.as...), name), args...)
	return exec.Command(argv[0], argv[1:]...)
}

func (pg *privatePostgres) ctl(args ...string) error {
	args = append([]string{"-D", pg.data(), "-w", "-t", "60"}, args...)
	out, err := pg.command(filepath.Join(pgBin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %v\n%s", args, err, out)
	}
	return nil
}

// DSN connects to database name of the private cluster.
func (pg *privatePostgres) DSN(name string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", pg.dir, pg.port, name)
}

// Start starts the cluster and waits until it accepts connections.
func (pg *privatePostgres) Start(t *testing.T) {
	t.Helper()
	opts := fmt.Sprintf("-k %s -p %d -c listen_addresses='' -c fsync=off", pg.dir, pg.port)
	if err := pg.ctl("-l", filepath.Join(pg.dir, "log"), "-o", opts, "start"); err != nil {
		t.Fatal(err)
	}
}

// Stop stops the cluster with pg_ctl's fast mode: open sessions are
// ended, the server is gone when Stop returns.
func (pg *privatePostgres) Stop(t *testing.T) {
	t.Helper()
	if err := pg.ctl("-m", "fast", "stop"); err != nil {
		t.Fatal(err)
	}
}

// spoolBytes is the size of the server's audit spool.
func spoolBytes(t *testing.T, s *testServer) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(s.Env["SANDGATE_SPOOL_DIR"], "spool.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readyz returns /readyz's status and reasons.
func readyz(t *testing.T, s *testServer) (int, string) {
	t.Helper()
	resp, err := http.Get(s.URL + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error.Message
}

// TestFaultPostgresAway stops a private Postgres under a serving gateway.
// First while a run is in flight: new runs answer 503 AUDIT-UNAVAILABLE
// with Retry-After, the run's lifecycle events go to the spool and, once
// Postgres is back, reach the trail exactly once, the run's end is stored,
// and the trail verifies. Then until the spool is full: readiness fails,
// admissions are refused, and still no event is dropped.
func TestFaultPostgresAway(t *testing.T) {
	t.Parallel()
	executortest.RequireDocker(t)
	pg := startPrivatePostgres(t)
	state := t.TempDir()
	s := startServerWithEnv(t, map[string]string{
		"SANDGATE_LISTEN":          "127.0.0.1:0",
		"SANDGATE_DEV":             "1",
		"SANDGATE_DATABASE_URL":    pg.DSN("sandgate"),
		"SANDGATE_SPOOL_DIR":       state + "/spool",
		"SANDGATE_SPOOL_MAX_BYTES": strconv.Itoa(1 << 20),
		"SANDGATE_NODE":            "pg-" + sandgatetest.RandomHex(t, 4),
		"DOCKER_HOST":              executortest.DockerHost(),
	})
	runSpec := `{"command": ["sh", "-c", "echo new"]}`

	// A run in flight when Postgres stops.
	id := s.submitNoWait(t, "pg-inflight", "sh", "-c", "sleep 2; echo done; exit 4")
	sandgatetest.WaitFor(t, "the run to be running with its start in the trail", 30*time.Second, func() bool {
		v, ok := s.runState(t, id)
		if !ok || v.State != sandgate.StateRunning {
			return false
		}
		_, started := findEvent(s.runEvents(t, id), sandgate.EventContainerStarted)
		return started
	})
	pg.Stop(t)

	status, header, body := s.do(t, http.MethodPost, "/v1/runs", runSpec)
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), string(sandgate.CodeAuditUnavailable)) {
		t.Errorf("POST /v1/runs with Postgres away = %d %s, want 503 %s", status, body, sandgate.CodeAuditUnavailable)
	}
	if header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After: %v", header)
	}
	// The run ends and its container goes while Postgres is away: its
	// exit and removal can only be in the spool.
	sandgatetest.WaitFor(t, "the run's container to be removed", 60*time.Second, func() bool {
		return dockerCLI(t, "", "ps", "-aq", "--filter", "label="+sandgate.LabelRunID+"="+id) == ""
	})
	sandgatetest.WaitFor(t, "events in the spool", 30*time.Second, func() bool { return spoolBytes(t, s) > 0 })
	if code, reason := readyz(t, s); code != http.StatusServiceUnavailable || !strings.Contains(reason, "audit") {
		t.Errorf("/readyz with Postgres away = %d %q, want 503 naming the audit trail", code, reason)
	}

	pg.Start(t)
	s.waitReady(t)
	v := s.waitFinished(t, id, 90*time.Second)
	if v.Outcome == nil || *v.Outcome != sandgate.OutcomeFailed || v.ExitCode == nil || *v.ExitCode != 4 || v.Stdout.Data != "done\n" {
		t.Errorf("in-flight run = %+v, want failed with exit code 4 and its output", v)
	}
	var counts map[sandgate.EventType]int
	sandgatetest.WaitFor(t, "the spooled events in the trail", 30*time.Second, func() bool {
		counts = eventCounts(s.runEvents(t, id))
		return counts[sandgate.EventContainerRemoved] > 0
	})
	for _, typ := range []sandgate.EventType{sandgate.EventRunRequested, sandgate.EventAdmissionAllowed,
		sandgate.EventContainerCreated, sandgate.EventContainerStarted, sandgate.EventContainerExited, sandgate.EventContainerRemoved} {
		if counts[typ] != 1 {
			t.Errorf("%d %s event(s), want exactly 1 (all: %v)", counts[typ], typ, counts)
		}
	}
	if ev, _ := findEvent(s.runEvents(t, id), sandgate.EventContainerExited); ev.ExitCode == nil || *ev.ExitCode != 4 {
		t.Errorf("container.exited exit_code = %v, want 4", ev.ExitCode)
	}
	s.verifyTrail(t)

	// Postgres away until the 1 MiB spool is full: reviews still answer,
	// each emitting a large admission.reviewed event.
	pg.Stop(t)
	// 200 KiB of arguments, in pieces under the per-argument maximum.
	part := strings.Repeat("x", 50<<10)
	big := part + `", "` + part + `", "` + part + `", "` + part
	sent := 0
	for {
		code, reason := readyz(t, s)
		if code == http.StatusServiceUnavailable && strings.Contains(reason, "spool is full") {
			break
		}
		if sent >= 40 {
			t.Fatalf("the spool did not fill after %d large events: /readyz = %d %q, spool %d bytes", sent, code, reason, spoolBytes(t, s))
		}
		review := `{"command": ["echo", "` + big + `"]}`
		status, _, body := s.do(t, http.MethodPost, "/v1/admission/review", review, "X-Correlation-ID", fmt.Sprintf("spool-%d", sent))
		if status != http.StatusOK {
			t.Fatalf("review with Postgres away = %d %s", status, body)
		}
		sent++
		time.Sleep(50 * time.Millisecond)
	}
	// Events keep coming while the spool is full; they wait in memory.
	for i := 0; i < 3; i++ {
		review := `{"command": ["echo", "` + big + `"]}`
		if status, _, body := s.do(t, http.MethodPost, "/v1/admission/review", review, "X-Correlation-ID", fmt.Sprintf("spool-%d", sent)); status != http.StatusOK {
			t.Fatalf("review with the spool full = %d %s", status, body)
		}
		sent++
	}
	t.Logf("spool full after %d events of %d KiB (spool %d bytes)", sent-3, len(big)>>10, spoolBytes(t, s))
	status, _, body = s.do(t, http.MethodPost, "/v1/runs", runSpec)
	if status != http.StatusServiceUnavailable {
		t.Errorf("POST /v1/runs with the spool full = %d %s, want 503", status, body)
	}

	pg.Start(t)
	s.waitReady(t)
	sandgatetest.WaitFor(t, "every review in the trail", 60*time.Second, func() bool {
		return countTrailEvents(t, s, sandgate.EventAdmissionReviewed) == sent
	})
	if n := countTrailEvents(t, s, sandgate.EventAdmissionReviewed); n != sent {
		t.Errorf("%d admission.reviewed events in the trail, want %d", n, sent)
	}
	s.verifyTrail(t)
	status, _, body = s.do(t, http.MethodPost, "/v1/runs?wait=30s", runSpec)
	if status != http.StatusOK || !strings.Contains(string(body), `"outcome":"succeeded"`) {
		t.Errorf("a run after Postgres returned = %d %s, want 200 succeeded", status, body)
	}
}

// countTrailEvents counts the trail's events of one type.
func countTrailEvents(t *testing.T, s *testServer, typ sandgate.EventType) int {
	t.Helper()
	n := 0
	cursor := ""
	for {
		path := "/v1/audit/events?limit=1000&type=" + string(typ)
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		status, _, body := s.do(t, http.MethodGet, path, "")
		if status != http.StatusOK {
			return -1
		}
		var page struct {
			Events     []json.RawMessage `json:"events"`
			NextCursor *string           `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		n += len(page.Events)
		if page.NextCursor == nil || *page.NextCursor == "" {
			return n
		}
		cursor = *page.NextCursor
	}
}
