package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The people of the approvals test: rita asks (and is an approver too:
// she still may not approve her own request), carol approves, bob may
// not.
var approvalPrincipals = []authPrincipal{
	{"rita", "alpha", []sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleApprover}},
	{"carol", "ops", []sandgate.Role{sandgate.RoleApprover}},
	{"bob", "alpha", []sandgate.Role{sandgate.RoleSubmitter}},
	{"audrey", "compliance", []sandgate.Role{sandgate.RoleAuditor}},
}

// startApprovalServer starts a gateway whose bundle lets team alpha ask
// for memory above the maximum, up to twice it, with approval.
func startApprovalServer(t *testing.T) (*testServer, map[string]string, int) {
	t.Helper()
	maxMB := 0
	dir := bundleWith(t, func(config map[string]any) {
		maxMB = int(config["maxima"].(map[string]any)["memory_mb"].(float64))
		config["approvals"].(map[string]any)["resources"] = map[string]any{
			"default": map[string]any{}, "teams": map[string]any{"alpha": map[string]any{"memory_mb": 2 * maxMB}},
		}
	})
	path, tok := writeTokensFile(t, approvalPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", path), withEnv("SANDGATE_POLICY_DIR", dir))
	return s, tok, maxMB
}

// askApproval submits a run above the maximum as rita: 202, stored
// pending_approval with no container, the reason named.
func askApproval(t *testing.T, s *testServer, tok map[string]string, maxMB int) api.RunView {
	t.Helper()
	spec := `{"command":["echo","approved"],"resources":{"memory_mb":` + itoa(maxMB+1) + `}}`
	status, _, body := s.doAs(t, tok["rita"], http.MethodPost, "/v1/runs", spec)
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil || status != http.StatusAccepted {
		t.Fatalf("submit = %d %s", status, body)
	}
	if run.State != sandgate.StatePendingApproval || run.ContainerID != "" || run.Approval == nil ||
		len(run.Approval.Reasons) == 0 || run.Approval.Reasons[0].Rule != "resources_approval" {
		t.Fatalf("run = %s", body)
	}
	return run
}

// TestApprovalsEndToEnd: a run the policy answers require_approval waits
// with no container; its requester may not approve it (though an
// approver), nor may a submitter; another approver approves it through
// the CLI and it runs, decided again as its requester with the approver
// in the decision's record; a denied one never runs. The trail joins
// approval.requested and approval.granted by the run's correlation ID.
func TestApprovalsEndToEnd(t *testing.T) {
	s, tok, maxMB := startApprovalServer(t)
	run := askApproval(t, s, tok, maxMB)
	id := run.Approval.ID

	// The attack: the requester approves her own request.
	status, _, body := s.doAs(t, tok["rita"], http.MethodPost, "/v1/approvals/"+id+"/approve", `{"comment":"mine"}`)
	if e := apiError(body); status != http.StatusForbidden || e.Error.Details["rule"] != "approval.not_by_requester" {
		t.Fatalf("self-approval = %d %s; want 403 naming approval.not_by_requester", status, body)
	}
	// A submitter of the team is no approver.
	status, _, body = s.doAs(t, tok["bob"], http.MethodPost, "/v1/approvals/"+id+"/approve", `{}`)
	if status != http.StatusForbidden {
		t.Fatalf("bob's approval = %d %s; want 403", status, body)
	}
	if got := runAs(t, s, tok["rita"], run.ID); got.State != sandgate.StatePendingApproval {
		t.Fatalf("after the refused approvals the run is %s", got.State)
	}

	cli := map[string]string{"SANDGATE_URL": s.URL, "SANDGATE_TOKEN": tok["carol"]}
	out, err := auditCLI(cli, "approvals", "list", "--status", "pending")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "resources_approval") {
		t.Fatalf("approvals list = %v\n%s", err, out)
	}
	out, err = auditCLI(cli, "approvals", "approve", id, "--comment", "ticket OPS-142")
	if err != nil || !strings.Contains(out, "granted") {
		t.Fatalf("approvals approve = %v\n%s", err, out)
	}
	var done api.RunView
	sandgatetest.WaitFor(t, "the approved run to finish", 2*time.Minute, func() bool {
		done = runAs(t, s, tok["rita"], run.ID)
		return done.State == sandgate.StateFinished
	})
	if done.Outcome == nil || *done.Outcome != sandgate.OutcomeSucceeded || !strings.Contains(done.Stdout.Data, "approved") {
		t.Fatalf("the approved run = %+v", done)
	}

	events := s.waitAuditEvents(t, tok["audrey"], url.Values{"correlation_id": {run.CorrelationID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventContainerRemoved)
	})
	for _, typ := range []sandgate.EventType{sandgate.EventApprovalRequested, sandgate.EventApprovalGranted, sandgate.EventAdmissionAllowed} {
		if !hasEvent(events, typ) {
			t.Errorf("the trail of the correlation has no %s", typ)
		}
	}
	// The request decided again is recorded as its requester's, with the
	// approval (approver and comment) in its input.
	var recorded bool
	for _, ev := range events {
		a, _ := ev.Payload["approval"].(map[string]any)
		if ev.Type != sandgate.EventRunRequested || a == nil {
			continue
		}
		recorded = true
		approver, _ := a["approver"].(map[string]any)
		if approver["name"] != "carol" || a["comment"] != "ticket OPS-142" || ev.Actor != "rita" {
			t.Errorf("the decision's record: actor %s, approval %v", ev.Actor, a)
		}
	}
	if !recorded {
		t.Error("no run.requested of the correlation records the approval")
	}

	// Denied: it never runs, and cannot be approved afterwards.
	second := askApproval(t, s, tok, maxMB)
	out, err = auditCLI(cli, "approvals", "deny", second.Approval.ID, "--comment", "no")
	if err != nil || !strings.Contains(out, "denied") {
		t.Fatalf("approvals deny = %v\n%s", err, out)
	}
	status, _, body = s.doAs(t, tok["carol"], http.MethodPost, "/v1/approvals/"+second.Approval.ID+"/approve", `{}`)
	if status < 400 {
		t.Fatalf("approving a denied approval = %d %s", status, body)
	}
	if got := runAs(t, s, tok["rita"], second.ID); got.ContainerID != "" || got.State == sandgate.StateRunning {
		t.Fatalf("the denied run = %+v", got)
	}
}

// runAs is GET /v1/runs/{id} as token's principal.
func runAs(t *testing.T, s *testServer, token, id string) api.RunView {
	t.Helper()
	status, _, body := s.doAs(t, token, http.MethodGet, "/v1/runs/"+id, "")
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil || status != http.StatusOK {
		t.Fatalf("get run %s: %d %s", id, status, body)
	}
	return run
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
