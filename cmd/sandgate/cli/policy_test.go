package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/policies"
)

// runPolicyCLI runs `sandgate policy args…` with an empty environment and
// returns its output and exit status.
func runPolicyCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"policy"}, args...), func(string) string { return "" }, strings.NewReader(""), &out, &errOut)
	if err != nil {
		code = 1
		var ee *ExitError
		if errors.As(err, &ee) {
			code = ee.Code
		}
	}
	return out.String(), errOut.String(), code
}

// TestPolicyRules lists the embedded bundle's rules from their METADATA:
// a table with the most severe first and the mutations last, or every
// field as JSON; a bundle with a rule that has none is refused (exit 2).
func TestPolicyRules(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		out, errOut, code := runPolicyCLI(t, "rules")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		fields := func(i int) []string { return strings.Fields(lines[i])[:3] }
		if diff := cmp.Diff([]string{"RULE", "SEVERITY", "CONTROLS"}, fields(0)); diff != "" {
			t.Errorf("header (-want +got):\n%s", diff)
		}
		var privileged string
		for _, l := range lines {
			if strings.HasPrefix(l, "no_privileged ") {
				privileged = strings.Join(strings.Fields(l), " ")
			}
		}
		if want := "no_privileged critical CIS-5.5, PSS-baseline Privileged mode"; privileged != want {
			t.Errorf("no_privileged row %q, want %q", privileged, want)
		}
		if f := fields(1); f[1] != "critical" {
			t.Errorf("first rule %v, want a critical one", f)
		}
		if f := fields(len(lines) - 1); f[1] != "(mutation)" {
			t.Errorf("last rule %v, want a mutation", f)
		}
	})
	t.Run("json", func(t *testing.T) {
		out, errOut, code := runPolicyCLI(t, "rules", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var rules []policies.RuleInfo
		if err := json.Unmarshal([]byte(out), &rules); err != nil {
			t.Fatal(err)
		}
		want, err := policies.Rules(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, rules); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("rule without METADATA", func(t *testing.T) {
		dir := t.TempDir()
		rego := "package sandgate.admission\n\ndecision := {\"allow\": count(finding) == 0}\n\nfinding contains {\"rule\": \"r\", \"message\": \"m\"} if input.request.privileged\n"
		if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(rego), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := runPolicyCLI(t, "rules", dir)
		if code != exitPolicyInvalid || !strings.Contains(errOut, `policy.rego:5: rule "r" has no METADATA block`) {
			t.Errorf("exit %d, stderr %q; want 2 naming the rule", code, errOut)
		}
	})
}
