package policies_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

func TestMapPrincipal(t *testing.T) {
	e := newEngine(t, policies.Options{})
	tests := []struct {
		name   string
		id     sandgate.Identity
		want   sandgate.Principal
		reason string
	}{
		{"email, team and roles", sandgate.Identity{Method: sandgate.MethodOIDC, Claims: map[string]any{
			"sub": "u1", "email": "alice@example.com", "team": "payments", "roles": []any{"submitter", "approver"}}},
			sandgate.Principal{Name: "alice@example.com", Team: "payments", Roles: []sandgate.Role{"approver", "submitter"}}, ""},
		{"sub without email", sandgate.Identity{Method: sandgate.MethodOIDC, Claims: map[string]any{"sub": "svc-1", "roles": []any{"auditor"}}},
			sandgate.Principal{Name: "svc-1", Roles: []sandgate.Role{"auditor"}}, ""},
		{"no role", sandgate.Identity{Method: sandgate.MethodOIDC, Claims: map[string]any{"sub": "u2", "email": "bob@example.com"}},
			sandgate.Principal{}, "no role"},
		{"nobody", sandgate.Identity{Method: sandgate.MethodOIDC, Claims: map[string]any{"roles": []any{"auditor"}}},
			sandgate.Principal{}, "names no one"},
		// A team claim names directories under the mount roots and
		// Docker volumes: one that could climb out is refused.
		{"team that climbs", sandgate.Identity{Method: sandgate.MethodOIDC, Claims: map[string]any{"sub": "u3", "team": "..", "roles": []any{"submitter"}}},
			sandgate.Principal{}, "not a team name"},
		{"team with a slash", sandgate.Identity{Method: sandgate.MethodOIDC, Claims: map[string]any{"sub": "u3", "team": "a/b", "roles": []any{"submitter"}}},
			sandgate.Principal{}, "not a team name"},
		{"name with a newline", sandgate.Identity{Method: sandgate.MethodOIDC, Claims: map[string]any{"sub": "u\nx", "roles": []any{"auditor"}}},
			sandgate.Principal{}, "control characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.MapPrincipal(context.Background(), tt.id)
			if tt.reason != "" {
				if sandgate.ErrorCodeOf(err) != sandgate.CodeForbidden || !strings.Contains(sandgate.ErrorMessageOf(err), tt.reason) {
					t.Fatalf("MapPrincipal = %v, %v; want FORBIDDEN naming %q", got, err, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("principal (-want +got):\n%s", d)
			}
		})
	}
}

func TestAuthorizeNamesTheRule(t *testing.T) {
	e := newEngine(t, policies.Options{})
	alice := sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{"submitter", "approver"}}
	d := e.Authorize(context.Background(), sandgate.AuthzRequest{Principal: alice, Action: "approval.approve",
		Object: sandgate.AuthzObject{Kind: "approval", Team: "payments", Principal: "alice"}})
	if d.Allow || d.Rule != "approval.not_by_requester" {
		t.Errorf("self-approval = %+v, want denied by approval.not_by_requester", d)
	}
	d = e.Authorize(context.Background(), sandgate.AuthzRequest{Principal: alice, Action: "run.read",
		Object: sandgate.AuthzObject{Kind: "run", Team: "payments"}})
	if !d.Allow || d.AllTeams || d.Rule != "authz.own_team" {
		t.Errorf("own team's run = %+v", d)
	}
	// A principal holding several grants, as the development token does
	// (submitter and auditor of its team), is answered once, not with an
	// evaluation conflict: the narrowest grant, every team's runs listed.
	dev := sandgate.Principal{Name: "dev", Team: "dev", Roles: []sandgate.Role{"submitter", "security", "auditor", "admin"}}
	d = e.Authorize(context.Background(), sandgate.AuthzRequest{Principal: dev, Action: "run.read",
		Object: sandgate.AuthzObject{Kind: "run", Team: "dev"}})
	if !d.Allow || !d.AllTeams || d.Rule != "authz.own_team" {
		t.Errorf("own team's run read by a principal of several grants = %+v", d)
	}
	if err := (sandgate.AuthzDecision{Rule: "r"}).Err("run.read"); sandgate.ErrorCodeOf(err) != sandgate.CodeForbidden {
		t.Errorf("Err = %v", err)
	}
}

// TestAuthorizeWithoutAuthzDenies: a bundle without authz.rego refuses
// every request, saying why, rather than letting any through.
func TestAuthorizeWithoutAuthzDenies(t *testing.T) {
	dir := copyBundle(t)
	for _, f := range []string{"authz.rego", "authz_test.rego"} {
		if err := removeFile(dir, f); err != nil {
			t.Fatal(err)
		}
	}
	e := newEngine(t, policies.Options{Dir: dir})
	d := e.Authorize(context.Background(), sandgate.AuthzRequest{Principal: sandgate.Principal{Name: "a", Roles: []sandgate.Role{"admin"}}, Action: "whoami"})
	if d.Allow || d.Rule != policies.RuleAuthzUndefined || !strings.Contains(d.Message, "authz.rego") {
		t.Errorf("decision = %+v", d)
	}
	if _, err := e.MapPrincipal(context.Background(), sandgate.Identity{Claims: map[string]any{"sub": "x", "roles": []any{"admin"}}}); sandgate.ErrorCodeOf(err) != sandgate.CodeForbidden {
		t.Errorf("MapPrincipal = %v", err)
	}
}

func TestApprovalData(t *testing.T) {
	e := newEngine(t, policies.Options{})
	if got := e.ApprovalExpiry(); got != 24*time.Hour {
		t.Errorf("ApprovalExpiry = %v", got)
	}
	if got := e.MaskSignIn(); len(got) != 0 {
		t.Errorf("MaskSignIn = %v", got)
	}
	for _, tt := range []struct{ name, old, new, want string }{
		{"unknown sign-in field", `"mask_sign_in": []`, `"mask_sign_in": ["password"]`, "mask_sign_in"},
		{"expiry too short", `"expires_after_seconds": 86400`, `"expires_after_seconds": 5`, "expires_after_seconds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyBundle(t)
			editData(t, dir, tt.old, tt.new)
			_, err := policies.New(context.Background(), policies.Options{Dir: dir})
			errs, ok := policies.IsPolicyInvalid(err)
			if !ok || !strings.Contains(strings.Join(errs, " "), tt.want) {
				t.Fatalf("New = %v, want POLICY-INVALID naming %s", err, tt.want)
			}
		})
	}
	dir := copyBundle(t)
	editData(t, dir, `"mask_sign_in": []`, `"mask_sign_in": ["email"]`)
	editData(t, dir, `"expires_after_seconds": 86400`, `"expires_after_seconds": 3600`)
	e = newEngine(t, policies.Options{Dir: dir})
	if e.ApprovalExpiry() != time.Hour || !cmp.Equal(e.MaskSignIn(), []string{"email"}) {
		t.Errorf("expiry %v, mask %v", e.ApprovalExpiry(), e.MaskSignIn())
	}
}

func removeFile(dir, name string) error { return os.Remove(filepath.Join(dir, name)) }
