package e2e

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/gateway/api"
)

// TestAuditCLIThroughAPI: sandgate audit query, export and receipt read
// the trail through the gateway with the caller's token and role, as the
// console does; the database only with --database-url. A submitter
// cannot read the trail through them (the API refuses it), an auditor
// with no database account can.
func TestAuditCLIThroughAPI(t *testing.T) {
	tokensFile, tok := writeTokensFile(t, []authPrincipal{
		{"alice", "payments", []sandgate.Role{sandgate.RoleSubmitter}},
		{"audrey", "", []sandgate.Role{sandgate.RoleAuditor}},
	})
	s := startServer(t, withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile), withEnv("SANDGATE_CHECKPOINT_EVERY", "2"))
	run := s.submitWait(t, tok["alice"], `{"command":["sh","-c","exit 3"]}`)
	denied, _, _ := s.doAs(t, tok["alice"], "POST", "/v1/runs", `{"command":["true"],"privileged":true}`)
	if denied != 403 {
		t.Fatalf("privileged run = %d, want 403", denied)
	}
	as := func(who string) map[string]string {
		// No database in the environment: the commands must not need one.
		return map[string]string{"SANDGATE_TOKEN": tok[who], "SANDGATE_DATABASE_URL": "host=/nonexistent dbname=none"}
	}

	// A table for people: the run's lifecycle, the exit code in words.
	got := runCLI(t, s, as("audrey"), "audit", "query", "--run-id", run.ID)
	if got.code != 0 || !strings.HasPrefix(got.stdout, "TIME ") || !strings.Contains(got.stdout, "container.exited") || !strings.Contains(got.stdout, "exit 3") {
		t.Errorf("audit query --run-id as an auditor: exit %d\n%s%s", got.code, got.stdout, got.stderr)
	}
	got = runCLI(t, s, as("audrey"), "audit", "query", "--type", "admission.denied", "-o", "json")
	var page api.AuditEventList
	if err := json.Unmarshal([]byte(got.stdout), &page); err != nil || len(page.Events) != 1 || page.Events[0].Actor != "alice" {
		t.Errorf("audit query -o json: exit %d, %v\n%s", got.code, err, got.stdout)
	}
	got = runCLI(t, s, as("audrey"), "audit", "query", "--type", "admission.denied")
	if !strings.Contains(got.stdout, "rules no_privileged") {
		t.Errorf("a denial's line does not name its rule:\n%s", got.stdout)
	}

	// The role is the caller's: a submitter is refused by the API.
	got = runCLI(t, s, as("alice"), "audit", "query")
	if got.code != 1 || !strings.Contains(got.stderr, "SANDGATE-FORBIDDEN") {
		t.Errorf("audit query as a submitter: exit %d %s", got.code, got.stderr)
	}

	// Export through the API: the run's events, and the export recorded.
	file := filepath.Join(t.TempDir(), "run.jsonl")
	got = runCLI(t, s, as("audrey"), "audit", "export", "--run-id", run.ID, "-o", file)
	data, err := os.ReadFile(file)
	if got.code != 0 || err != nil || !strings.Contains(string(data), `"type":"container.exited"`) {
		t.Errorf("audit export: exit %d %s, %v\n%s", got.code, got.stderr, err, data)
	}
	if st, err := os.Stat(file); err == nil && st.Mode().Perm() != 0o600 {
		t.Errorf("export file mode %04o, want 0600", st.Mode().Perm())
	}
	exports := s.waitAuditEvents(t, tok["audrey"], map[string][]string{"type": {"audit.exported"}, "actor": {"audrey"}},
		func(e []sandgate.AuditRecord) bool { return len(e) > 0 })
	if len(exports) == 0 {
		t.Errorf("the export is not recorded as audit.exported by audrey")
	}
	got = runCLI(t, s, as("audrey"), "audit", "export", "--checkpoints")
	if got.code != 125 || !strings.Contains(got.stderr, "--database-url") {
		t.Errorf("export --checkpoints without --database-url: exit %d %s", got.code, got.stderr)
	}

	// A receipt through the API, as the run's own submitter; it verifies.
	var rec sandgate.Receipt
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		got = runCLI(t, s, as("alice"), "audit", "receipt", run.ID)
		if got.code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if err := json.Unmarshal([]byte(got.stdout), &rec); err != nil {
		t.Fatalf("audit receipt: exit %d %s %v", got.code, got.stderr, err)
	}
	gwKey, err := proof.LoadSigningKey(filepath.Join(filepath.Dir(s.Env["SANDGATE_SPOOL_DIR"]), "checkpoint.key"), false)
	if err != nil {
		t.Fatal(err)
	}
	pinned := proof.ReceiptOptions{Anchors: proof.Anchors{Pinned: []ed25519.PublicKey{gwKey.Public().(ed25519.PublicKey)}}}
	if rep := proof.VerifyReceipt(rec, pinned); !rep.OK {
		t.Errorf("the receipt from the API does not verify: %+v", rep)
	}

	// --database-url reads the database itself, with no token.
	got = runCLI(t, s, map[string]string{"SANDGATE_TOKEN": ""}, "audit", "query", "--database-url", s.DSN, "--run-id", run.ID, "-o", "json")
	if err := json.Unmarshal([]byte(got.stdout), &page); got.code != 0 || err != nil || len(page.Events) == 0 {
		t.Errorf("audit query --database-url: exit %d %s %v", got.code, got.stderr, err)
	}
}
