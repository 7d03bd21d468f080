package audit

import (
	"context"
	"testing"

	"github.com/sandgate/sandgate"
)

// TestAuditorsReportTheDatabase: the trail as the API serves auditors
// answers where its database stands, as the Store does: the gateway's
// /readyz asks it for its database check (a split that lost it left
// /readyz without one, found by the cluster drills).
func TestAuditorsReportTheDatabase(t *testing.T) {
	dsn, _ := newDB(t)
	s := testStore(t, dsn, nil)
	var trail sandgate.AuditTrail = s.Auditors()
	db, ok := trail.(interface {
		DatabaseStatus(context.Context) (string, error)
	})
	if !ok {
		t.Fatal("Auditors() does not report the database's status")
	}
	got, err := db.DatabaseStatus(context.Background())
	want, werr := s.DatabaseStatus(context.Background())
	if err != nil || werr != nil || got != want || got == "" {
		t.Errorf("DatabaseStatus = %q, %v; the Store's %q, %v", got, err, want, werr)
	}
	if err := trail.Ready(context.Background()); err != nil {
		t.Errorf("Ready: %v", err)
	}
}
