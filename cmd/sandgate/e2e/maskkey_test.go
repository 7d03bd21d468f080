package e2e

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// TestMaskKeyFile: with SANDGATE_MASK_KEY_FILE, the trail hashes a run's
// env values and stdin with that key, so gateways sharing the file hash
// equal secrets equally, whatever their signing keys.
func TestMaskKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mask.key")
	hexKey := strings.Repeat("5a", 32)
	if err := os.WriteFile(path, []byte(hexKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := proof.LoadMaskKey(path, false)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withEnv("SANDGATE_MASK_KEY_FILE", path))
	run := s.submitWait(t, s.Token, `{"command":["sh","-c","cat >/dev/null; echo $TOKEN"],"env":{"TOKEN":"s3cret"},"stdin":"also secret"}`)
	if run.Stdout.Data != "s3cret\n" {
		t.Fatalf("the run saw %q, want its real env value", run.Stdout.Data)
	}
	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}, "type": {string(sandgate.EventRunRequested)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 1 })
	spec, _ := events[0].Payload["spec"].(map[string]any)
	env, _ := spec["env"].(map[string]any)
	if got, want := env["TOKEN"], sandgate.MaskHash(key, "s3cret"); got != want {
		t.Errorf("env TOKEN in the trail = %v, want %s (the mask file's key)", got, want)
	}
	if got, want := spec["stdin"], sandgate.MaskHash(key, "also secret"); got != want {
		t.Errorf("stdin in the trail = %v, want %s", got, want)
	}
}
