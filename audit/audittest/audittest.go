// Package audittest gives tests a fresh Postgres database of their own.
//
// It connects with SANDGATE_TEST_DATABASE_URL, or the local socket
// (host=/var/run/postgresql dbname=postgres) when that is unset. When
// Postgres does not answer, a test fails under CI=true and is skipped
// otherwise. Under go test -short (the unit tier) it is skipped.
package audittest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/sandgate/sandgate/migrations"
	"github.com/sandgate/sandgate/sandgatetest"
)

// DefaultAdminDSN is used when SANDGATE_TEST_DATABASE_URL is unset.
const DefaultAdminDSN = "host=/var/run/postgresql dbname=postgres"

// AdminDSN returns the DSN tests connect with to create their databases.
func AdminDSN() string {
	if v := os.Getenv("SANDGATE_TEST_DATABASE_URL"); v != "" {
		return v
	}
	return DefaultAdminDSN
}

// NewDatabase creates an empty database with a unique name, drops it when
// the test ends, and returns a DSN for it.
func NewDatabase(t testing.TB) string {
	t.Helper()
	sandgatetest.SkipShort(t, "Postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := AdminDSN()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		unavailable(t, err)
		return ""
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "sandgate_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("audittest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("audittest: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("audittest: drop database %s: %v", name, err)
		}
	})
	dsn, err := WithDatabase(admin, name)
	if err != nil {
		t.Fatalf("audittest: %v", err)
	}
	return dsn
}

// NewMigratedDatabase is NewDatabase with every migration applied.
func NewMigratedDatabase(t testing.TB) string {
	t.Helper()
	dsn := NewDatabase(t)
	db := OpenDB(t, dsn)
	if _, err := migrations.Up(context.Background(), db); err != nil {
		t.Fatalf("audittest: migrate: %v", err)
	}
	return dsn
}

// OpenDB opens dsn with database/sql (driver "pgx") and closes it when the
// test ends.
func OpenDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	sandgatetest.SkipShort(t, "Postgres")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("audittest: open %s: %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("audittest: Postgres is unreachable (%v); in CI that is a failure. Run deploy/bootstrap.sh or set SANDGATE_TEST_DATABASE_URL", err)
	}
	t.Skipf("audittest: Postgres is unreachable (%v); run deploy/bootstrap.sh or set SANDGATE_TEST_DATABASE_URL", err)
}

var dbnameKV = regexp.MustCompile(`(^|\s)dbname\s*=\s*('(\\.|[^'])*'|\S+)`)

// WithDatabase returns dsn (a URL or a keyword/value string) pointing at
// database name instead.
func WithDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse DSN: %w", err)
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return strings.TrimSpace(dbnameKV.ReplaceAllString(dsn, "")) + " dbname=" + name, nil
}
