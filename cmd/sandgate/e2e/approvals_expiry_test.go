package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/sandgatetest"
)

// approvalExpiry is the shortest expiry the policy data allows
// (data.sandgate.config.approvals.expires_after_seconds).
const approvalExpiry = 60 * time.Second

// startExpiringApprovalServer is startApprovalServer with approvals that
// expire after approvalExpiry.
func startExpiringApprovalServer(t *testing.T) (*testServer, map[string]string, int) {
	t.Helper()
	maxMB := 0
	dir := bundleWith(t, func(config map[string]any) {
		maxMB = int(config["maxima"].(map[string]any)["memory_mb"].(float64))
		ap := config["approvals"].(map[string]any)
		ap["resources"] = map[string]any{
			"default": map[string]any{}, "teams": map[string]any{"alpha": map[string]any{"memory_mb": 2 * maxMB}},
		}
		ap["expires_after_seconds"] = int(approvalExpiry / time.Second)
	})
	path, tok := writeTokensFile(t, approvalPrincipals)
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", path), withEnv("SANDGATE_POLICY_DIR", dir))
	return s, tok, maxMB
}

// TestApprovalExpiryEndToEnd: an approval nobody decides in time expires
// (the policy data's expires_after_seconds): the gateway's sweep records
// approval.expired joined to the run by its correlation ID, the run ends
// rejected with the reason and never had a container, and the requester
// reads that outcome. The attack: an approver who approves once the time
// has run out, whether or not the sweep got there first, is refused with
// CONFLICT naming the status expired, and the run never starts.
func TestApprovalExpiryEndToEnd(t *testing.T) {
	s, tok, maxMB := startExpiringApprovalServer(t)
	swept := askApproval(t, s, tok, maxMB)
	late := askApproval(t, s, tok, maxMB)
	if d := late.Approval.ExpiresAt.Sub(late.Approval.CreatedAt); d != approvalExpiry {
		t.Fatalf("the approval expires after %v, want %v", d, approvalExpiry)
	}

	// The late approver: the moment the time has run out.
	time.Sleep(time.Until(late.Approval.ExpiresAt.Add(100 * time.Millisecond)))
	status, _, body := s.doAs(t, tok["carol"], http.MethodPost, "/v1/approvals/"+late.Approval.ID+"/approve", `{"comment":"too late"}`)
	if e := apiError(body); status != http.StatusConflict || e.Error.Code != sandgate.CodeConflict || e.Error.Details["status"] != string(sandgate.ApprovalExpired) {
		t.Fatalf("approving after expiry = %d %s; want 409 %s with status expired", status, body, sandgate.CodeConflict)
	}

	// The sweep expires the other without anyone asking.
	for _, run := range []struct{ name, id, corr, approval string }{
		{"swept", swept.ID, swept.CorrelationID, swept.Approval.ID},
		{"late", late.ID, late.CorrelationID, late.Approval.ID},
	} {
		var got = runAs(t, s, tok["rita"], run.id)
		sandgatetest.WaitFor(t, "the "+run.name+" run rejected", 3*time.Minute, func() bool {
			got = runAs(t, s, tok["rita"], run.id)
			return got.State == sandgate.StateFinished
		})
		if got.Outcome == nil || *got.Outcome != sandgate.OutcomeRejected || got.ContainerID != "" || got.StartedAt != nil ||
			got.Error == nil || !strings.Contains(got.Error.Message, "expired") {
			t.Errorf("the %s run as its requester reads it = %+v", run.name, got)
		}
		status, _, body := s.doAs(t, tok["rita"], http.MethodGet, "/v1/approvals/"+run.approval, "")
		var a sandgate.Approval
		if status != http.StatusOK || json.Unmarshal(body, &a) != nil || a.Status != sandgate.ApprovalExpired || a.DecidedAt == nil {
			t.Errorf("the %s approval = %d %s", run.name, status, body)
		}
		events := s.waitAuditEvents(t, tok["audrey"], url.Values{"correlation_id": {run.corr}}, func(evs []sandgate.AuditRecord) bool {
			return hasEvent(evs, sandgate.EventApprovalExpired)
		})
		for _, typ := range []sandgate.EventType{sandgate.EventApprovalGranted, sandgate.EventContainerCreated, sandgate.EventContainerStarted} {
			if hasEvent(events, typ) {
				t.Errorf("the %s run's trail has %s", run.name, typ)
			}
		}
	}

	// Approving the swept one is refused the same way.
	status, _, body = s.doAs(t, tok["carol"], http.MethodPost, "/v1/approvals/"+swept.Approval.ID+"/approve", `{}`)
	if e := apiError(body); status != http.StatusConflict || e.Error.Details["status"] != string(sandgate.ApprovalExpired) {
		t.Errorf("approving the swept approval = %d %s; want 409 with status expired", status, body)
	}
}
