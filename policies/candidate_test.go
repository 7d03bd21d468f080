package policies_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// TestCandidateMatchesEngine: a candidate loaded from a bundle's files has
// the revision a reload of that directory reports, and decides as an
// engine with the same bundle does; a candidate with a changed limit
// decides by it, while the engine in force does not change.
func TestCandidateMatchesEngine(t *testing.T) {
	ctx := context.Background()
	dir := copyBundle(t)
	e := newEngine(t, policies.Options{Dir: dir})
	files, err := policies.BundleFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.LoadCandidate(ctx, files)
	if err != nil {
		t.Fatalf("LoadCandidate: %v", err)
	}
	if got, want := c.Revision(), e.Status().Revision; got != want {
		t.Errorf("candidate revision %s, engine %s", got, want)
	}

	editData(t, dir, `"memory_mb": 4096`, `"memory_mb": 1024`)
	files, err = policies.BundleFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	lower, err := policies.LoadCandidate(ctx, files)
	if err != nil {
		t.Fatalf("LoadCandidate: %v", err)
	}
	if lower.Revision() == c.Revision() {
		t.Fatal("a changed bundle has the same revision")
	}
	spec := baseSpec()
	spec.Resources.MemoryMB = 2048
	n, err := sandgate.Normalize(spec, e.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	in := sandgate.AdmissionInput{Operation: sandgate.OperationRun,
		Principal: sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}},
		Request:   n, Settings: sandgate.Settings{MountRoots: []string{}}}
	for name, tc := range map[string]struct {
		cand  sandgate.PolicyCandidate
		allow bool
	}{"same bundle": {c, true}, "lower maximum": {lower, false}} {
		d, err := tc.cand.Decide(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allow != tc.allow {
			t.Errorf("%s: allow %v, want %v (violations %v)", name, d.Allow, tc.allow, ruleNames(d.Violations))
		}
		if d.PolicyRevision != tc.cand.Revision() {
			t.Errorf("%s: decision revision %s, want the candidate's", name, d.PolicyRevision)
		}
	}
	if d := decideNormalized(t, e, n); !d.Allow {
		t.Errorf("the engine in force changed with the candidate: %v", ruleNames(d.Violations))
	}
}

// TestCandidateRefused: a candidate that does not compile or fails its
// own tests is POLICY-INVALID with the problems; a bad file name is
// INVALID-REQUEST naming files.
func TestCandidateRefused(t *testing.T) {
	ctx := context.Background()
	files, err := policies.BundleFiles("")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(map[string][]byte)
		code sandgate.ErrorCode
		want string
	}{
		{"syntax error", func(f map[string][]byte) { f["broken.rego"] = []byte("package sandgate.broken\n\nx := {") }, sandgate.CodePolicyInvalid, "broken.rego"},
		{"failing test", func(f map[string][]byte) {
			f["extra_test.rego"] = []byte("package sandgate.extra_test\n\ntest_fails if { 1 == 2 }\n")
		}, sandgate.CodePolicyInvalid, "test_fails"},
		{"directory in name", func(f map[string][]byte) { f["sub/a.rego"] = []byte("package x") }, sandgate.CodeInvalidRequest, "sub/a.rego"},
		{"hidden file", func(f map[string][]byte) { f[".a.rego"] = []byte("package x") }, sandgate.CodeInvalidRequest, ".a.rego"},
		{"other extension", func(f map[string][]byte) { f["a.yaml"] = []byte("x: 1") }, sandgate.CodeInvalidRequest, "a.yaml"},
		{"empty", func(f map[string][]byte) { clear(f) }, sandgate.CodeInvalidRequest, "at least one file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := make(map[string][]byte, len(files))
			for k, v := range files {
				f[k] = v
			}
			tc.edit(f)
			_, err := policies.LoadCandidate(ctx, f)
			if code := sandgate.ErrorCodeOf(err); code != tc.code {
				t.Fatalf("code %s, want %s (%v)", code, tc.code, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
