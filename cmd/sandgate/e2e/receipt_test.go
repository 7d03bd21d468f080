package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
)

// Receipts under attack (issue #29 item 5): a receipt proves the events
// it lists and says which ones, and that the run's decision and end are
// among them; a receipt with the run's end taken out does not verify.

// runReceiptFile runs a run that exits 3 on a gateway whose key file the
// test holds, stops it (its final checkpoints cover the run), and writes
// the run's receipt and the gateway's public key to files.
func runReceiptFile(t *testing.T) (receipt, pub string, env map[string]string) {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "checkpoint.key")
	s := startServer(t, withEnv("SANDGATE_SIGNING_KEY_FILE", keyFile), withEnv("SANDGATE_CHECKPOINT_EVERY", "2"))
	run := s.submitWait(t, s.Token, `{"command":["sh","-c","exit 3"]}`)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	receipt, pub = filepath.Join(dir, "receipt.json"), filepath.Join(dir, "gw.pub")
	if out, err := auditCLI(s.Env, "audit", "receipt", "--database-url", s.DSN, run.ID, "-o", receipt); err != nil {
		t.Fatalf("audit receipt: %v\n%s", err, out)
	}
	out, err := auditCLI(s.Env, "audit", "public-key", "--signing-key-file", keyFile)
	if err != nil || os.WriteFile(pub, []byte(out), 0o600) != nil {
		t.Fatalf("public-key: %v\n%s", err, out)
	}
	return receipt, pub, s.Env
}

// withoutEvents writes a copy of the receipt at path without the events
// of the types given.
func withoutEvents(t *testing.T, path string, types ...string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r sandgate.Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	kept := r.Events[:0]
	for _, e := range r.Events {
		if !strings.Contains(" "+strings.Join(types, " ")+" ", " "+e.Type+" ") {
			kept = append(kept, e)
		}
	}
	r.Events = kept
	out := filepath.Join(t.TempDir(), "cut.json")
	data, _ := json.Marshal(r)
	if err := os.WriteFile(out, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReceiptOmittedEnd is issue #29 item 5: a run's receipt with its
// container.exited and container.removed events deleted verified (ok,
// exit 0), its events simply ending at container.started. Now it is
// refused (missing_end), and so is a receipt without the decision; one
// that lists the end says so (end: container.exited, exit 3).
func TestReceiptOmittedEnd(t *testing.T) {
	receipt, pub, _ := runReceiptFile(t)
	out, err := auditCLI(map[string]string{}, "audit", "verify-receipt", receipt, "--key", pub)
	if err != nil {
		t.Fatalf("the whole receipt: %v\n%s", err, out)
	}
	var rep proof.ReceiptReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.End == nil || rep.End.Type != "container.exited" || rep.End.ExitCode == nil || *rep.End.ExitCode != 3 || rep.Decision == nil {
		t.Errorf("report of the whole receipt: end %+v, decision %+v; want container.exited with exit 3, and the decision", rep.End, rep.Decision)
	}
	for _, tc := range []struct {
		name  string
		types []string
		kind  string
	}{
		{"the end taken out", []string{"container.exited", "container.removed"}, proof.ReceiptMissingEnd},
		{"the decision taken out", []string{"admission.allowed"}, proof.ReceiptMissingDecision},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := auditCLI(map[string]string{}, "audit", "verify-receipt", withoutEvents(t, receipt, tc.types...), "--key", pub)
			var exit *cli.ExitError
			if !errors.As(err, &exit) || exit.Code != 1 || !strings.Contains(exit.Message, tc.kind) {
				t.Fatalf("a receipt with %v taken out = %v, want exit 1 with %s\n%s", tc.types, err, tc.kind, out)
			}
		})
	}
}
