package audittest

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWithDatabase: both DSN forms get the new database name, and nothing
// else changes.
func TestWithDatabase(t *testing.T) {
	tests := []struct {
		name, dsn, want string
	}{
		{"keywords", "host=/var/run/postgresql dbname=postgres", "host=/var/run/postgresql dbname=t1"},
		{"keywords quoted", "host=h dbname='my db' user=u", "host=h user=u dbname=t1"},
		{"keywords without dbname", "host=h", "host=h dbname=t1"},
		{"url", "postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable", "postgres://u:p@127.0.0.1:5432/t1?sslmode=disable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WithDatabase(tt.dsn, "t1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("WithDatabase (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNewDatabaseIsFreshAndDropped: each call gets its own empty database,
// migrated on request.
func TestNewDatabaseIsFreshAndDropped(t *testing.T) {
	a, b := NewDatabase(t), NewMigratedDatabase(t)
	if a == b {
		t.Fatalf("two calls returned the same database %q", a)
	}
	var tables int
	if err := OpenDB(t, a).QueryRowContext(context.Background(),
		"SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'").Scan(&tables); err != nil || tables != 0 {
		t.Errorf("fresh database has %d tables (%v), want 0", tables, err)
	}
	if err := OpenDB(t, b).QueryRowContext(context.Background(), "SELECT count(*) FROM audit_events").Scan(&tables); err != nil {
		t.Errorf("migrated database: %v", err)
	}
}
