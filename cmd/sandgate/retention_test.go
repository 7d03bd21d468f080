package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/audit/audittest"
)

// TestAuditRetentionCLI: the operator's path through retention on a trail
// with a finished month. purge refuses before archive; archive writes a
// month that `verify --archive` accepts; a dry run drops nothing; purge
// drops it; online verify still passes.
func TestAuditRetentionCLI(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	state := t.TempDir()
	env := map[string]string{
		"SANDGATE_DATABASE_URL": dsn,
		"SANDGATE_SPOOL_DIR":    filepath.Join(state, "spool"),
		"SANDGATE_NODE":         "gw-1",
	}
	// A gateway wrote ten events in January 2025 and one in February.
	var mu sync.Mutex
	now := time.Date(2025, 1, 10, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, err := audit.Open(context.Background(), audit.Config{
		DSN: dsn, SpoolDir: env["SANDGATE_SPOOL_DIR"], SigningKeyFile: filepath.Join(state, "checkpoint.key"),
		Node: "gw-1", Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 11 {
		if i == 10 {
			mu.Lock()
			now = time.Date(2025, 2, 3, 12, 0, 0, 0, time.UTC)
			mu.Unlock()
		}
		if err := s.Record(context.Background(), auditEvent(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil { // a final checkpoint over both months
		t.Fatal(err)
	}

	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runApp(context.Background(), args, env, &out, nil)
		return out.String(), err
	}
	out, err := cli("audit", "partitions")
	if err != nil {
		t.Fatalf("partitions: %v\n%s", err, out)
	}
	var parts []audit.Partition
	if err := json.Unmarshal([]byte(out), &parts); err != nil {
		t.Fatalf("partitions output: %v\n%s", err, out)
	}
	if len(parts) == 0 || parts[0].Name != "audit_events_2025_01" || parts[0].Rows != 10 {
		t.Fatalf("first partition = %+v, want audit_events_2025_01 with 10 rows", parts)
	}

	if out, err := cli("audit", "purge", "--before", "2025-02"); err == nil || !strings.Contains(err.Error(), "never archived") {
		t.Fatalf("purge before archive: %v\n%s", err, out)
	}
	if out, err := cli("audit", "purge", "--before", "last tuesday"); err == nil || !strings.Contains(err.Error(), "before") {
		t.Fatalf("purge with a bad --before: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if out, err := cli("audit", "archive", "--before", "2025-02", "--dir", dir); err != nil {
		t.Fatalf("archive: %v\n%s", err, out)
	}
	if out, err := cli("audit", "verify", "--archive", filepath.Join(dir, "audit_events_2025_01")); err != nil {
		t.Fatalf("verify --archive: %v\n%s", err, out)
	}
	out, err = cli("audit", "purge", "--before", "2025-02", "--dry-run")
	if err != nil || !strings.Contains(out, `"dropped": false`) || !strings.Contains(out, `"archive_verified": true`) {
		t.Fatalf("purge --dry-run: %v\n%s", err, out)
	}
	out, err = cli("audit", "purge", "--before", "2025-02")
	if err != nil || !strings.Contains(out, `"dropped": true`) {
		t.Fatalf("purge: %v\n%s", err, out)
	}
	if out, err := cli("audit", "verify"); err != nil {
		t.Fatalf("verify after purge: %v\n%s", err, out)
	}
	out, err = cli("audit", "query", "--type", "retention.applied")
	if err != nil || !strings.Contains(out, "audit_events_2025_01") {
		t.Fatalf("query retention.applied: %v\n%s", err, out)
	}
}

// auditEvent is the i-th lifecycle event of one run.
func auditEvent(i int) sandgate.Event {
	code := i % 3
	return sandgate.Event{Type: sandgate.EventContainerExited, RunID: "run-1", CorrelationID: "corr-1",
		Actor: "ci-bot", Team: "payments", Outcome: "succeeded", ExitCode: &code}
}
