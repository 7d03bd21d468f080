package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/policies/policytest"
)

// TestServeSignedPolicy: a gateway that pins bundle keys
// (SANDGATE_POLICY_VERIFY_KEYS) loads a bundle the real opa CLI signed and
// records its signer; a bundle edited after signing (a maximum raised) is
// refused on reload, the signed policy stays in force and decides, and
// /readyz, GET /v1/policies and policy.load_failed say why.
func TestServeSignedPolicy(t *testing.T) {
	keys, private := t.TempDir(), t.TempDir()
	key := policytest.NewRSAKey(t, private, "release")
	copyPEM(t, key.Public, filepath.Join(keys, "release.pem"))
	dir := policytest.OPABuild(t, policytest.CopyDefaultBundle(t), key.Private, "release", "2026.06-1")

	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", dir), withEnv("SANDGATE_POLICY_VERIFY_KEYS", keys))
	st := s.signedPolicyStatus(t)
	if st.SignedBy != "release" || st.SignedRevision != "2026.06-1" {
		t.Fatalf("GET /v1/policies: signed by %q revision %q", st.SignedBy, st.SignedRevision)
	}
	loaded := s.waitAuditEvents(t, s.Token, url.Values{"type": {string(sandgate.EventPolicyLoaded)}}, func(ev []sandgate.AuditRecord) bool { return len(ev) > 0 })
	if p := loaded[0].Payload; p["signer_key_id"] != "release" || p["signed_revision"] != "2026.06-1" {
		t.Fatalf("policy.loaded payload %v", p)
	}

	// The attack: someone with write access to the bundle directory raises
	// the pids maximum without the signing key.
	data := filepath.Join(dir, "data.json")
	raw, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), `"pids":1024`, `"pids":65536`, 1)
	if edited == string(raw) {
		t.Fatal("data.json has no pids maximum of 1024")
	}
	if err := os.WriteFile(data, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	status, _, body := s.do(t, http.MethodPost, "/v1/policies/reload", "")
	if status != http.StatusUnprocessableEntity || !strings.Contains(string(body), "data.json: digest mismatch") {
		t.Fatalf("reload of a bundle edited after signing = %d %s", status, body)
	}
	if after := s.signedPolicyStatus(t); after.Revision != st.Revision || !strings.Contains(after.LastError, "digest mismatch") {
		t.Fatalf("after the refused reload: %+v", after)
	}
	status, _, body = s.do(t, http.MethodGet, "/readyz", "")
	var rd api.Readiness
	if err := json.Unmarshal(body, &rd); status != http.StatusOK || err != nil || !strings.Contains(strings.Join(rd.Warnings, ";"), "digest mismatch") {
		t.Fatalf("/readyz = %d %s", status, body)
	}
	failed := s.waitAuditEvents(t, s.Token, url.Values{"type": {string(sandgate.EventPolicyLoadFailed)}}, func(ev []sandgate.AuditRecord) bool { return len(ev) > 0 })
	if errs, _ := json.Marshal(failed[0].Payload["errors"]); !strings.Contains(string(errs), "digest mismatch") {
		t.Fatalf("policy.load_failed payload %v", failed[0].Payload)
	}
	// The signed policy still decides: 2048 pids is over its maximum.
	status, _, body = s.do(t, http.MethodPost, "/v1/admission/review", `{"command":["true"],"resources":{"pids":2048}}`)
	if status != http.StatusOK || !strings.Contains(string(body), `"allow":false`) {
		t.Fatalf("review of 2048 pids under the signed policy = %d %s", status, body)
	}
}

// TestServeRefusesUnsignedPolicy: with keys pinned, serve does not start
// on an unsigned bundle, nor on the embedded one.
func TestServeRefusesUnsignedPolicy(t *testing.T) {
	keys := t.TempDir()
	key := policytest.NewRSAKey(t, t.TempDir(), "release")
	copyPEM(t, key.Public, filepath.Join(keys, "release.pem"))
	for name, dir := range map[string]string{"unsigned": policytest.CopyDefaultBundle(t), "embedded": ""} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{
				"SANDGATE_LISTEN": "127.0.0.1:0", "SANDGATE_DEV": "1",
				"SANDGATE_DATABASE_URL": audittest.NewDatabase(t), "SANDGATE_SPOOL_DIR": t.TempDir(),
				"SANDGATE_POLICY_DIR": dir, "SANDGATE_POLICY_VERIFY_KEYS": keys,
			}
			var logs syncBuffer
			err := runApp(context.Background(), []string{"serve"}, env, &logs, func(string, string) { t.Error("serve listened with an unsigned bundle") })
			if err == nil || !strings.Contains(err.Error(), "not signed") {
				t.Fatalf("serve = %v\n%s", err, logs.String())
			}
		})
	}
}

func (s *testServer) signedPolicyStatus(t *testing.T) sandgate.PolicyStatus {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, "/v1/policies", "")
	var st sandgate.PolicyStatus
	if err := json.Unmarshal(body, &st); status != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/policies = %d %s", status, body)
	}
	return st
}

func copyPEM(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
