package audit

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/audit/proof"
)

// testStore opens a writing Store on dsn with a spool and key in a
// temporary directory; mod adjusts the config. It is closed at cleanup.
func testStore(t testing.TB, dsn string, mod func(*Config)) *Store {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{
		DSN:            dsn,
		SpoolDir:       filepath.Join(dir, "spool"),
		SigningKeyFile: filepath.Join(dir, "checkpoint.key"),
		Node:           "test-node",
		Logger:         testLogger(),
		RetryInterval:  20 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// readOnly opens a read-only Store on dsn.
func readOnly(t testing.TB, dsn string, mod func(*Config)) *Store {
	t.Helper()
	cfg := Config{DSN: dsn, ReadOnly: true}
	if mod != nil {
		mod(&cfg)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open read-only: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func newDB(t testing.TB) (string, *sql.DB) {
	t.Helper()
	dsn := audittest.NewMigratedDatabase(t)
	return dsn, audittest.OpenDB(t, dsn)
}

func lifecycle(i int, run string) sandgate.Event {
	code := i % 3
	return sandgate.Event{
		Type:          sandgate.EventContainerExited,
		RunID:         run,
		CorrelationID: "corr-" + run,
		Actor:         "alice",
		Team:          "payments",
		Outcome:       "succeeded",
		ExitCode:      &code,
		Payload:       map[string]any{"i": i, "stdout": map[string]any{"bytes": 12, "sha256": "ab"}, "note": "<&>"},
	}
}

// notKeyEvents filters out the key registration events a writer adds to
// its chain before its first checkpoint.
const notKeyEvents = "type NOT IN ('audit.key_registered', 'audit.key_rotated')"

func count(t testing.TB, db *sql.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func problemKinds[R sandgate.VerifyReport | proof.Report](rep R) map[string]int {
	var problems []sandgate.VerifyProblem
	switch r := any(rep).(type) {
	case sandgate.VerifyReport:
		problems = r.Problems
	case proof.Report:
		problems = r.Problems
	}
	kinds := map[string]int{}
	for _, p := range problems {
		kinds[p.Kind]++
	}
	return kinds
}

// proxy forwards TCP connections from 127.0.0.1 to Postgres' Unix socket,
// and can cut every connection and refuse new ones: Postgres "stopped" for
// one client while the shared cluster keeps running.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	up     bool
	conns  map[net.Conn]bool
	opened int // connections proxied since the start
}

func newProxy(t testing.TB, socket string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{ln: ln, target: socket, up: true, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *proxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if !p.up {
			p.mu.Unlock()
			c.Close()
			continue
		}
		u, err := net.Dial("unix", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[u] = true, true
		p.opened++
		p.mu.Unlock()
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// cut closes every proxied connection and refuses new ones.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = false
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// connections is how many connections the proxy has passed on.
func (p *proxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opened
}

// restore accepts connections again.
func (p *proxy) restore() {
	p.mu.Lock()
	p.up = true
	p.mu.Unlock()
}

// proxiedDSN points a DSN at the proxy, keeping the database name.
func proxiedDSN(t testing.TB, db *sql.DB, p *proxy) string {
	t.Helper()
	var name, user string
	if err := db.QueryRow("SELECT current_database(), current_user").Scan(&name, &user); err != nil {
		t.Fatalf("current database: %v", err)
	}
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable connect_timeout=2", p.port(), user, name)
}

func isCode(err error, code sandgate.ErrorCode) bool {
	var e *sandgate.Error
	return errors.As(err, &e) && e.Code == code
}

// testLogger discards the writer's log unless SANDGATE_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("SANDGATE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// canonicalEvent returns ev with its text cleaned and its times truncated
// to microseconds in UTC, and its canonical body bytes, which hold its
// payload in canonical form (numbers kept as written, strings cleaned).
func canonicalEvent(ev sandgate.Event, recordedAt time.Time) (sandgate.Event, []byte, error) {
	c, err := proof.Canonicalize(ev)
	if err != nil {
		return c.Event, nil, err
	}
	return c.Event, c.Body(recordedAt), nil
}

// jsonOf is v as JSON.
func jsonOf(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// trusting pins keys in a Store's configuration: what an auditor who has
// the nodes' public keys verifies with.
func trusting(keys ...ed25519.PublicKey) func(*Config) {
	return func(c *Config) { c.Anchors.Pinned = append(c.Anchors.Pinned, keys...) }
}
