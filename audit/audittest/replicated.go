package audittest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/migrations"
	"github.com/sandgate/sandgate/sandgatetest"
)

// pgBin holds the PostgreSQL 15 server binaries (Debian's layout).
const pgBin = "/usr/lib/postgresql/15/bin"

// Replicated is a PostgreSQL 15 primary and a streaming replica of it,
// private to one test, on loopback ports of their own, with a migrated
// database "sandgate". The test may crash the primary and promote the
// replica; both are stopped and removed when it ends.
type Replicated struct {
	Primary, Replica *Server
	// Synchronous is whether commits wait for the replica's flush.
	Synchronous bool
}

// Server is one server of a Replicated pair.
type Server struct {
	Name string
	Port int
	dir  string
	as   []string
}

// NewReplicated starts a primary and a replica. With synchronous, the
// primary's commits wait until the replica has flushed them
// (synchronous_standby_names), so a promoted replica holds every
// acknowledged commit; without, the replica may be behind. Without the
// PostgreSQL binaries the test is skipped, or fails under CI=true.
func NewReplicated(t testing.TB, synchronous bool) *Replicated {
	t.Helper()
	sandgatetest.SkipShort(t, "Postgres servers of its own")
	if _, err := os.Stat(filepath.Join(pgBin, "initdb")); err != nil {
		unavailable(t, fmt.Errorf("PostgreSQL 15 binaries: %w", err))
	}
	var as []string
	var uid, gid = -1, -1
	if os.Geteuid() == 0 {
		// initdb refuses to run as root: the servers belong to postgres.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("audittest: running as root needs the postgres user: %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		as = []string{"runuser", "-u", "postgres", "--"}
	}
	mk := func(name string) *Server {
		dir, err := os.MkdirTemp("", "sgrepl-"+name)
		if err != nil {
			t.Fatal(err)
		}
		if uid >= 0 {
			if err := os.Chown(dir, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		s := &Server{Name: name, Port: sandgatetest.FreePort(t), dir: dir, as: as}
		t.Cleanup(func() {
			_ = s.ctl("stop", "-m", "immediate")
			os.RemoveAll(dir)
		})
		return s
	}
	r := &Replicated{Primary: mk("primary"), Replica: mk("replica"), Synchronous: synchronous}
	p := r.Primary
	if out, err := p.command(filepath.Join(pgBin, "initdb"), "-D", p.data(), "-A", "trust", "-U", "postgres", "-N").CombinedOutput(); err != nil {
		t.Fatalf("audittest: initdb: %v\n%s", err, out)
	}
	conf := "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\nfsync = off\nwal_level = replica\nmax_wal_senders = 4\nhot_standby = on\n"
	if err := os.WriteFile(filepath.Join(p.data(), "postgresql.auto.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	hba := "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(p.data(), "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	if uid >= 0 {
		_ = os.Chown(filepath.Join(p.data(), "postgresql.auto.conf"), uid, gid)
		_ = os.Chown(filepath.Join(p.data(), "pg_hba.conf"), uid, gid)
	}
	p.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.DSN("postgres"))
	if err != nil {
		t.Fatalf("audittest: connect to the primary: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE sandgate"); err != nil {
		t.Fatalf("audittest: create database: %v", err)
	}
	db := OpenDB(t, p.DSN("sandgate"))
	if _, err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("audittest: migrate: %v", err)
	}
	db.Close()

	rp := r.Replica
	if out, err := rp.command(filepath.Join(pgBin, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port),
		"-U", "postgres", "-D", rp.data(), "-R", "-X", "stream", "-c", "fast",
		"-d", "application_name=replica").CombinedOutput(); err != nil {
		t.Fatalf("audittest: pg_basebackup: %v\n%s", err, out)
	}
	rp.Start(t)
	if synchronous {
		for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = 'replica'`, `SELECT pg_reload_conf()`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("audittest: %s: %v", q, err)
			}
		}
	}
	want := "async"
	if synchronous {
		want = "sync"
	}
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`, want).Scan(&n); err != nil {
			t.Fatalf("audittest: replication state: %v", err)
		}
		if n == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("audittest: the replica did not stream (%s) within 60s", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

// DSN is the multi-host DSN of database name: the primary first, then the
// replica, with target_session_attrs=read-write.
func (r *Replicated) DSN(name string) string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=%s sslmode=disable target_session_attrs=read-write connect_timeout=2",
		r.Primary.Port, r.Replica.Port, name)
}

// URL is DSN as a postgres:// URL with both hosts.
func (r *Replicated) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		r.Primary.Port, r.Replica.Port, name)
}

// Promote makes the replica a primary and waits until it takes writes.
func (r *Replicated) Promote(t testing.TB) {
	t.Helper()
	if err := r.Replica.ctl("promote"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.Replica.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for {
		var recovery bool
		if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovery); err != nil {
			t.Fatal(err)
		}
		if !recovery {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("audittest: the replica was not promoted within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) command(name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, s.as...), name), args...)
	return exec.Command(argv[0], argv[1:]...)
}

func (s *Server) ctl(args ...string) error {
	args = append([]string{"-D", s.data(), "-w", "-t", "60"}, args...)
	out, err := s.command(filepath.Join(pgBin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %v\n%s", args, err, out)
	}
	return nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// DSN connects to database name of this server alone.
func (s *Server) DSN(name string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable", s.Port, name)
}

// Start starts the server on its port and waits until it answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %d", s.Port)
	if err := s.ctl("-l", filepath.Join(s.dir, "log"), "-o", opts, "start"); err != nil {
		t.Fatal(err)
	}
}

// Crash stops the server the way a crash would: pg_ctl's immediate mode,
// no shutdown checkpoint, every connection cut.
func (s *Server) Crash(t testing.TB) {
	t.Helper()
	if err := s.ctl("stop", "-m", "immediate"); err != nil {
		t.Fatal(err)
	}
}

// Stop stops the server cleanly (fast mode).
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.ctl("stop", "-m", "fast"); err != nil {
		t.Fatal(err)
	}
}
