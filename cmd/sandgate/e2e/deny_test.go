package e2e

import (
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestEndToEndDenied sends requests the default policy denies to the real
// stack: each answers 403 POLICY-DENIED with its violations, the denial is
// committed to the trail as admission.denied (with run.requested before
// it), and no container is created.
func TestEndToEndDenied(t *testing.T) {
	s := startServer(t)
	tests := []struct {
		name      string
		spec      string
		wantRules []string
	}{
		{"privileged", `{"command":["true"],"privileged":true}`, []string{"no_privileged"}},
		{"host network", `{"command":["true"],"network":"host"}`, []string{"no_host_network"}},
		{"etc mount", `{"command":["true"],"mounts":[{"source":"/etc","target":"/host-etc","read_only":true}]}`,
			[]string{"no_sensitive_mounts"}},
		{"root user", `{"command":["true"],"user":"0:0"}`, []string{"non_root_user"}},
		{"host pid", `{"command":["true"],"pid_mode":"host"}`, []string{"host_pid"}},
		{"docker socket", `{"command":["true"],"mounts":[{"source":"/var/run/docker.sock","target":"/s"}]}`,
			[]string{"no_docker_socket"}},
		{"several at once", `{"command":["true"],"privileged":true,"network":"host","cap_add":["SYS_ADMIN"]}`,
			[]string{"capabilities", "no_host_network", "no_privileged"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := s.nodeContainers(t)
			corr := "e2e-deny-" + sandgatetest.RandomHex(t, 6)
			status, _, body := s.do(t, http.MethodPost, "/v1/runs?wait=30s", tc.spec, "X-Correlation-ID", corr)
			if status != http.StatusForbidden {
				t.Fatalf("status = %d, want 403: %s", status, body)
			}
			e := apiError(body)
			if e.Error.Code != sandgate.CodePolicyDenied || e.Error.CorrelationID != corr {
				t.Errorf("error = %+v, want %s with correlation ID %s", e.Error, sandgate.CodePolicyDenied, corr)
			}
			dec, err := api.DecisionFromDetails(e.Error.Details)
			if err != nil {
				t.Fatal(err)
			}
			if dec.Allow || dec.DecisionID == "" || dec.PolicyRevision == "" {
				t.Errorf("decision = %+v, want a denial with decision ID and revision", dec)
			}
			for _, rule := range tc.wantRules {
				if !slices.ContainsFunc(dec.Violations, func(v sandgate.Violation) bool { return v.Rule == rule && v.Message != "" }) {
					t.Errorf("violations %+v lack rule %s", dec.Violations, rule)
				}
			}

			// The decision is committed before the answer (synchronous
			// commit), so no waiting is needed.
			events := s.auditEvents(t, s.Token, url.Values{"correlation_id": {corr}})
			var types []sandgate.EventType
			for _, ev := range events {
				types = append(types, ev.Type)
				if ev.RunID != "" {
					t.Errorf("%s has run_id %q; a denied request has no run", ev.Type, ev.RunID)
				}
			}
			if diff := cmp.Diff([]sandgate.EventType{sandgate.EventRunRequested, sandgate.EventAdmissionDenied}, types); diff != "" {
				t.Errorf("audit events (-want +got):\n%s", diff)
			}
			if len(events) == 2 && (events[1].DecisionID != dec.DecisionID || events[1].Outcome != "denied") {
				t.Errorf("admission.denied = %+v, want decision %s outcome denied", events[1].Event, dec.DecisionID)
			}
			if after := s.nodeContainers(t); after != before {
				t.Errorf("containers of the node: %d before, %d after a denial", before, after)
			}
		})
	}

	// No run was stored for any of them.
	status, _, body := s.do(t, http.MethodGet, "/v1/runs", "")
	if status != http.StatusOK {
		t.Fatalf("list runs: %d %s", status, body)
	}
	if diff := cmp.Diff(`{"runs":[],"next_cursor":null}`, string(trimNewline(body))); diff != "" {
		t.Errorf("runs after denials (-want +got):\n%s", diff)
	}
}

// trimNewline drops the newline encoding/json puts after a body.
func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
