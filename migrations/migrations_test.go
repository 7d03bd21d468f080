package migrations_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/migrations"
)

// TestUpIsIdempotentAndStatusShowsAll: Up applies every migration once;
// a second Up applies none; Status lists them all as applied.
func TestUpIsIdempotentAndStatusShowsAll(t *testing.T) {
	db := audittest.OpenDB(t, audittest.NewDatabase(t))
	ctx := context.Background()
	pending, err := migrations.Pending(ctx, db)
	if err != nil || !pending {
		t.Fatalf("Pending on an empty database = %v, %v; want true", pending, err)
	}
	files := bundled(t)
	n, err := migrations.Up(ctx, db)
	if err != nil || n != len(files) {
		t.Fatalf("Up = %d, %v; want %d applied", n, err, len(files))
	}
	if n, err := migrations.Up(ctx, db); err != nil || n != 0 {
		t.Fatalf("second Up = %d, %v; want 0", n, err)
	}
	var out bytes.Buffer
	if err := migrations.Status(ctx, db, &out); err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, want := range files {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Status lacks %s:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "pending") {
		t.Errorf("Status shows pending migrations after Up:\n%s", out.String())
	}
	for _, table := range []string{"audit_events", "audit_checkpoints", "audit_chains", "audit_heads", "audit_keys", "audit_sink_cursors", "runs", "idempotency_keys"} {
		var ok bool
		if err := db.QueryRow("SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok); err != nil || !ok {
			t.Errorf("table %s missing (%v)", table, err)
		}
	}
}

// bundled returns the migration files in the bundle, in order.
func bundled(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("migrations in the bundle: %v, %v", files, err)
	}
	return files
}

// TestAppRolePrivileges: sandgate_app may append to and read the trail and
// keep runs, but not change or remove audit rows, choose their
// recorded_at, or write the key registry but through audit_register_key
// (privileges, besides the triggers).
func TestAppRolePrivileges(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	db := audittest.OpenDB(t, dsn)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, "SET ROLE sandgate_app"); err != nil {
		t.Fatalf("SET ROLE: %v", err)
	}
	tests := []struct {
		sql     string
		allowed bool
	}{
		{`INSERT INTO audit_events (event_id, chain_id, seq, recorded_at, event_time, type, body, prev_hash, hash)
		  VALUES (gen_random_uuid(), 'c', 1, now(), now(), 't', '\x7b7d', sha256(''), sha256(''))`, true},
		{"SELECT count(*) FROM audit_events", true},
		{"INSERT INTO audit_chains (chain_id, node) VALUES ('c', 'n')", true},
		{`INSERT INTO audit_checkpoints (chain_id, seq, head_hash, created_at, signature, key_id, public_key)
		  VALUES ('c', 1, sha256(''), now(), '\x00', 'k', '\x00')`, true},
		{"INSERT INTO runs (id, principal, state, created_at, spec) VALUES ('r', 'p', 'pending', now(), '{}')", true},
		{"UPDATE runs SET state = 'running' WHERE id = 'r'", true},
		{"INSERT INTO idempotency_keys (principal, key, run_id, created_at) VALUES ('p', 'k', 'r', now())", true},
		{`INSERT INTO audit_events (event_id, chain_id, seq, event_time, type, body, prev_hash, hash)
		  VALUES (gen_random_uuid(), 'c', 2, now(), 't', '\x7b7d', sha256(''), sha256(''))`, true},
		{`INSERT INTO audit_events (event_id, chain_id, seq, recorded_at, event_time, type, body, prev_hash, hash)
		  VALUES (gen_random_uuid(), 'c', 3, '2099-01-01', now(), 't', '\x7b7d', sha256(''), sha256(''))`, false},
		{`INSERT INTO audit_events (event_id, chain_id, seq, recorded_at, event_time, type, body, prev_hash, hash)
		  VALUES (gen_random_uuid(), 'c', 4, now() - interval '1 day', now(), 't', '\x7b7d', sha256(''), sha256(''))`, false},
		{"SELECT count(*) FROM audit_keys", true},
		{`SELECT * FROM audit_register_key('n', sha256('k'), 'c', NULL)`, true},
		{`INSERT INTO audit_keys (node, key_id, public_key, source) VALUES ('m', encode(substr(sha256(sha256('m')), 1, 8), 'hex'), sha256('m'), 'migration')`, false},
		{"UPDATE audit_keys SET node = 'x'", false},
		{"DELETE FROM audit_keys", false},
		{"TRUNCATE audit_keys", false},
		{"SELECT audit_adopt_default()", true},
		{"UPDATE audit_events SET type = 'x'", false},
		{"DELETE FROM audit_events", false},
		{"TRUNCATE audit_events", false},
		{"DELETE FROM audit_checkpoints", false},
		{"DELETE FROM runs", false},
		{"ALTER TABLE audit_events DISABLE TRIGGER USER", false},
		{`INSERT INTO audit_tree_hashes (chain_id, start_index, end_index, hashes) VALUES ('c', 0, 1, sha256(''))`, true},
		{"SELECT count(*) FROM audit_tree_hashes", true},
		{"DELETE FROM audit_tree_hashes", false},
		{"UPDATE audit_tree_hashes SET chain_id = 'x'", false},
		{`INSERT INTO audit_cosignatures (chain_id, tree_size, root_hash, witness, witness_key, signature) VALUES ('c', 1, sha256(''), 'w', 'w+0+AA==', 'x')`, true},
		{"UPDATE audit_cosignatures SET witness = 'x'", false},
		{"TRUNCATE audit_cosignatures", false},
	}
	for _, tt := range tests {
		_, err := conn.ExecContext(ctx, tt.sql)
		if tt.allowed && err != nil {
			t.Errorf("%s: %v, want allowed", tt.sql, err)
		}
		if !tt.allowed && (err == nil || !strings.Contains(err.Error(), "SQLSTATE 42501")) {
			t.Errorf("%s: %v, want permission denied", tt.sql, err)
		}
	}
}

// TestMigrateWithoutCreateRole: a database owner without CREATEROLE can
// apply every migration once sandgate_app exists in the cluster.
func TestMigrateWithoutCreateRole(t *testing.T) {
	ctx := context.Background()
	admin := audittest.OpenDB(t, audittest.AdminDSN())
	if _, err := admin.ExecContext(ctx, `DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sandgate_app') THEN CREATE ROLE sandgate_app NOLOGIN; END IF;
		EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "sandgate_test_owner_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE ROLE "+name+" LOGIN NOCREATEROLE NOSUPERUSER PASSWORD 'owner-pw'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" OWNER "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_, _ = admin.ExecContext(ctx, "DROP ROLE IF EXISTS "+name)
	})
	db := audittest.OpenDB(t, "host=127.0.0.1 user="+name+" password=owner-pw dbname="+name+" sslmode=disable")
	if n, err := migrations.Up(ctx, db); err != nil || n != len(bundled(t)) {
		t.Fatalf("Up as an owner without CREATEROLE = %d, %v; want %d applied", n, err, len(bundled(t)))
	}
}
