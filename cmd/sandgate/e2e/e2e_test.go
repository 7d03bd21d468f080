package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/client"
)

// TestEndToEndRunAuditTrail runs a real container through the real gateway,
// policy engine, audit trail and Docker, and checks the run's audit events
// all carry its correlation ID, in lifecycle order.
func TestEndToEndRunAuditTrail(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	run, err := s.Client.Submit(ctx, sandgate.RunSpec{Command: []string{"sh", "-c", "echo hello; exit 3"}},
		client.SubmitOptions{Wait: 30 * time.Second, CorrelationID: "e2e-trail-1"})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if run.State != sandgate.StateFinished || run.Outcome == nil || *run.Outcome != sandgate.OutcomeFailed || run.ExitCode == nil || *run.ExitCode != 3 {
		t.Fatalf("run = %+v, want finished failed 3", run)
	}
	if run.Stdout.Data != "hello\n" {
		t.Errorf("stdout = %q, want %q", run.Stdout.Data, "hello\n")
	}
	if run.CorrelationID != "e2e-trail-1" {
		t.Errorf("correlation_id = %q, want e2e-trail-1", run.CorrelationID)
	}

	// Lifecycle events go through the trail's asynchronous writer:
	// container.removed may be committed a batch after the answer.
	events := s.waitAuditEvents(t, s.Token, url.Values{"correlation_id": {"e2e-trail-1"}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventContainerRemoved)
	})
	var types []sandgate.EventType
	for _, ev := range events {
		if ev.CorrelationID != "e2e-trail-1" {
			t.Errorf("event %s has correlation_id %q", ev.Type, ev.CorrelationID)
		}
		if ev.Type != sandgate.EventImageResolved {
			types = append(types, ev.Type)
		}
	}
	want := []sandgate.EventType{
		sandgate.EventRunRequested, sandgate.EventAdmissionAllowed, sandgate.EventContainerCreated,
		sandgate.EventContainerStarted, sandgate.EventContainerExited, sandgate.EventContainerRemoved,
	}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Errorf("audit event types (-want +got):\n%s", diff)
	}

	status, _, body := s.do(t, http.MethodGet, "/v1/audit/verify", "")
	if status != http.StatusOK {
		t.Fatalf("verify: %d %s", status, body)
	}
	var report sandgate.VerifyReport
	if err := json.Unmarshal(body, &report); err != nil {
		t.Fatal(err)
	}
	if !report.OK || report.Checked == 0 {
		t.Errorf("verify = %+v, want ok with events checked", report)
	}
}
