package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/audit/proof"
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
	var parts []proof.Partition
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
	out, err = cli("audit", "query", "--database-url", env["SANDGATE_DATABASE_URL"], "-o", "json", "--type", "retention.applied")
	if err != nil || !strings.Contains(out, "audit_events_2025_01") {
		t.Fatalf("query retention.applied: %v\n%s", err, out)
	}
}

// TestAuditRetentionPeriodCLI: `sandgate audit retention` applies the
// configured period (SANDGATE_AUDIT_RETENTION): without an archive it
// refuses a month never archived; with SANDGATE_AUDIT_ARCHIVE_DIR it
// archives and drops the expired month and keeps the next; verify then
// passes and names what was purged; "forever" drops nothing.
func TestAuditRetentionPeriodCLI(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	state := t.TempDir()
	// January 2025 has expired, February not: the period reaches back to
	// mid-February 2025, whatever today is.
	days := int(time.Since(time.Date(2025, 2, 15, 0, 0, 0, 0, time.UTC)) / (24 * time.Hour))
	env := map[string]string{
		"SANDGATE_DATABASE_URL":    dsn,
		"SANDGATE_SPOOL_DIR":       filepath.Join(state, "spool"),
		"SANDGATE_NODE":            "gw-1",
		"SANDGATE_AUDIT_RETENTION": fmt.Sprintf("%dd", days),
	}
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
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	cli := func(extra map[string]string, args ...string) (string, error) {
		e := maps.Clone(env)
		maps.Copy(e, extra)
		var out bytes.Buffer
		err := runApp(context.Background(), args, e, &out, nil)
		return out.String(), err
	}
	if out, err := cli(nil, "audit", "retention", "--dry-run"); err == nil || !strings.Contains(err.Error(), "never archived") {
		t.Fatalf("retention without an archive: %v\n%s", err, out)
	}
	if out, err := cli(nil, "audit", "retention", "--period", "soon"); err == nil || !strings.Contains(err.Error(), "period") {
		t.Fatalf("retention --period soon: %v\n%s", err, out)
	}
	if out, err := cli(map[string]string{"SANDGATE_AUDIT_RETENTION": "forever"}, "audit", "retention"); err != nil || !strings.Contains(out, `"purged": []`) {
		t.Fatalf("retention forever: %v\n%s", err, out)
	}
	archive := t.TempDir()
	out, err := cli(map[string]string{"SANDGATE_AUDIT_ARCHIVE_DIR": archive}, "audit", "retention")
	if err != nil {
		t.Fatalf("retention: %v\n%s", err, out)
	}
	var res audit.RetentionResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Archived) != 1 || len(res.Purged) != 1 || !res.Purged[0].Dropped || res.Purged[0].Partition.Name != "audit_events_2025_01" {
		t.Fatalf("retention = %s; want January archived and dropped, February kept", out)
	}
	out, err = cli(nil, "audit", "verify")
	if err != nil || !strings.Contains(out, `"partition": "audit_events_2025_01"`) {
		t.Fatalf("verify after retention: %v\n%s", err, out)
	}
}

// auditEvent is the i-th lifecycle event of one run.
func auditEvent(i int) sandgate.Event {
	code := i % 3
	return sandgate.Event{Type: sandgate.EventContainerExited, RunID: "run-1", CorrelationID: "corr-1",
		Actor: "ci-bot", Team: "payments", Outcome: "succeeded", ExitCode: &code}
}
