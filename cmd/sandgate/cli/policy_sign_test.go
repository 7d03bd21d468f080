package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/policies/policytest"
)

// TestPolicySignVerify: `sandgate policy sign` signs a bundle for a site
// without the opa CLI, `policy verify` names its signer and revision, and
// refuses it (exit 2) once a file changes after signing.
func TestPolicySignVerify(t *testing.T) {
	keys := t.TempDir()
	key := policytest.NewECKey(t, t.TempDir(), "release")
	data, err := os.ReadFile(key.Public)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(keys, "release.pem"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := policytest.CopyDefaultBundle(t)
	env := map[string]string{"SANDGATE_POLICY_VERIFY_KEYS": keys}
	sandgate := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	if out, err := sandgate("policy", "sign", dir, "--key", key.Private, "--key-id", "release", "--revision", "2026.06-1"); err != nil {
		t.Fatalf("policy sign: %v\n%s", err, out)
	}
	out, err := sandgate("policy", "verify", dir)
	if err != nil || !strings.Contains(out, "signed by release") || !strings.Contains(out, `"2026.06-1"`) {
		t.Fatalf("policy verify: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "zz.rego"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = sandgate("policy", "verify", dir)
	if code := ExitCode(err, &bytes.Buffer{}); code != exitPolicyInvalid || !strings.Contains(out, "zz.rego not included") {
		t.Fatalf("policy verify of a bundle changed after signing: exit %d %v\n%s", code, err, out)
	}
	if _, err := sandgate("policy", "sign", dir, "--key", key.Private); ExitCode(err, &bytes.Buffer{}) != exitUsage {
		t.Fatalf("policy sign without --key-id: %v", err)
	}
}
