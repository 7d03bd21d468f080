package runstore

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
)

// TestSessionStore: a session round-trips through create, update, get and
// list, scoped by team, node and state.
func TestSessionStore(t *testing.T) {
	s := testStore(t, audittest.NewMigratedDatabase(t), nil)
	ctx := context.Background()
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	mk := func(id, team string, created time.Time) *sandgate.Session {
		return &sandgate.Session{ID: id, Principal: "alice", Team: team, Node: "n1", State: sandgate.SessionOpen,
			CreatedAt: created, LastActiveAt: created, Limits: sandgate.SessionLimits{IdleTimeoutSeconds: 60, MaxLifetimeSeconds: 600},
			Spec: sandgate.RunSpec{Image: "sandgate/sandbox:latest", Command: []string{"sleep", "infinity"}}, Warnings: []string{}}
	}
	a, b := mk("s1", "payments", at), mk("s2", "search", at.Add(time.Second))
	for _, ss := range []*sandgate.Session{a, b} {
		if err := s.CreateSession(ctx, ss); err != nil {
			t.Fatalf("CreateSession: %v", err)
		}
	}
	if err := s.CreateSession(ctx, mk("s1", "payments", at)); !isCode(err, sandgate.CodeConflict) {
		t.Errorf("CreateSession(dup) = %v, want CONFLICT", err)
	}
	ended := at.Add(time.Minute)
	a.State, a.EndReason, a.EndedAt, a.Runs = sandgate.SessionEnded, sandgate.SessionIdle, &ended, 3
	if err := s.UpdateSession(ctx, a); err != nil {
		t.Fatalf("UpdateSession: %v", err)
	}
	got, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("GetSession (-want +got):\n%s", diff)
	}
	if _, err := s.GetSession(ctx, "nope"); !isCode(err, sandgate.CodeNotFound) {
		t.Errorf("GetSession(nope) = %v, want NOT-FOUND", err)
	}
	if err := s.UpdateSession(ctx, mk("nope", "x", at)); !isCode(err, sandgate.CodeNotFound) {
		t.Errorf("UpdateSession(nope) = %v, want NOT-FOUND", err)
	}
	tests := []struct {
		name string
		f    sandgate.SessionFilter
		want []string
	}{
		{"all, newest first", sandgate.SessionFilter{}, []string{"s2", "s1"}},
		{"team", sandgate.SessionFilter{Team: "payments"}, []string{"s1"}},
		{"open", sandgate.SessionFilter{State: sandgate.SessionOpen}, []string{"s2"}},
		{"node", sandgate.SessionFilter{Node: "n2"}, []string{}},
		{"limit", sandgate.SessionFilter{Limit: 1}, []string{"s2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := s.ListSessions(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			ids := []string{}
			for _, ss := range list {
				ids = append(ids, ss.ID)
			}
			if diff := cmp.Diff(tt.want, ids); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := s.ListSessions(ctx, sandgate.SessionFilter{State: "weird"}); !isCode(err, sandgate.CodeInvalidRequest) {
		t.Errorf("ListSessions(bad state) = %v", err)
	}
}
