package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/migrations"
)

// TestPartitioningKeepsExistingRows: migration 4 moves a trail written
// under migration 3 into month partitions, row for row and byte for byte,
// creates a partition for every month from the oldest row to three months
// ahead, and keeps every partition append-only, even for the owner with
// replication-role triggers off.
func TestPartitioningKeepsExistingRows(t *testing.T) {
	db := audittest.OpenDB(t, audittest.NewDatabase(t))
	ctx := context.Background()
	if _, err := migrations.UpTo(ctx, db, 3); err != nil {
		t.Fatalf("UpTo 3: %v", err)
	}
	now := time.Now().UTC()
	month := func(delta int) time.Time {
		return time.Date(now.Year(), now.Month()+time.Month(delta), 1, 12, 0, 0, 0, time.UTC)
	}
	old := month(-14)
	for i, at := range []time.Time{old, month(-2), now} {
		_, err := db.ExecContext(ctx, `INSERT INTO audit_events (event_id, chain_id, seq, recorded_at, event_time, type, body, prev_hash, hash)
			VALUES (gen_random_uuid(), 'c', $1, $2, $2, 't', convert_to($3, 'UTF8'), sha256(''), sha256(convert_to($3, 'UTF8')))`,
			i+1, at, `{"n":`+string(rune('1'+i))+`}`)
		if err != nil {
			t.Fatalf("insert row %d: %v", i+1, err)
		}
	}
	var before string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(encode(hash, 'hex') || encode(body, 'hex'), ',' ORDER BY seq) FROM audit_events`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("Up: %v", err)
	}
	var after string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(encode(hash, 'hex') || encode(body, 'hex'), ',' ORDER BY seq) FROM audit_events`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("rows changed by the migration:\nbefore %s\nafter  %s", before, after)
	}
	var inDefault int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM audit_events_default`).Scan(&inDefault); err != nil || inDefault != 0 {
		t.Errorf("rows in the default partition = %d, %v; want 0 (every month has its partition)", inDefault, err)
	}
	var parts int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'audit_events'::regclass`).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts != 14+3+1+1 { // the oldest month through now, three ahead, the default
		t.Errorf("partitions = %d, want %d", parts, 19)
	}
	oldest := "audit_events_" + old.Format("2006_01")
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+oldest).Scan(&n); err != nil || n != 1 {
		t.Errorf("rows in %s = %d, %v; want 1", oldest, n, err)
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"UPDATE " + oldest + " SET type = 'x'",
		"DELETE FROM " + oldest,
		"TRUNCATE " + oldest,
		"TRUNCATE audit_events",
		"DELETE FROM audit_events",
		"UPDATE audit_events SET recorded_at = now() + interval '1 year'",
	} {
		if _, err := conn.ExecContext(ctx, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", stmt, err)
		}
	}

	// The application role creates months ahead through the function.
	if _, err := conn.ExecContext(ctx, "SET session_replication_role = origin; SET ROLE sandgate_app"); err != nil {
		t.Fatal(err)
	}
	var created int
	if err := conn.QueryRowContext(ctx, `SELECT audit_ensure_partitions(now(), now() + interval '5 months')`).Scan(&created); err != nil || created != 2 {
		t.Errorf("audit_ensure_partitions five months ahead = %d, %v; want 2 new", created, err)
	}
	future := "audit_events_" + month(5).Format("2006_01")
	if _, err := conn.ExecContext(ctx, "RESET ROLE; SET session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "TRUNCATE "+future); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("TRUNCATE %s (made by the function): %v, want refused as append-only", future, err)
	}
}
