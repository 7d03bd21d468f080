package policies_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// evaluatorEngine is an engine over dir whose candidates and load tests
// run in children of this test binary under limits.
func evaluatorEngine(t *testing.T, dir string, limits policies.EvaluatorLimits) *policies.Engine {
	t.Helper()
	ev, err := policies.NewEvaluator("", limits, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(t, policies.Options{Dir: dir, Evaluator: ev})
}

// TestEvaluatorCandidateDecidesExactly: a candidate evaluated in a child
// decides every input exactly as the same bundle does in this process
// (violations, warnings, mutations, the mutated spec, the mask and the
// enforcement), with the engine's decision ID; replay compares on it.
func TestEvaluatorCandidateDecidesExactly(t *testing.T) {
	ctx := context.Background()
	dir := copyBundle(t)
	e := evaluatorEngine(t, dir, policies.EvaluatorLimits{})
	files, err := policies.BundleFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := e.LoadCandidate(ctx, files)
	if err != nil {
		t.Fatalf("LoadCandidate: %v", err)
	}
	defer remote.(io.Closer).Close()
	local, err := policies.LoadCandidate(ctx, files)
	if err != nil {
		t.Fatal(err)
	}
	mods := remote.(interface {
		Modules() []sandgate.PolicyModule
	}).Modules()
	if remote.Revision() != local.Revision() || !cmp.Equal(mods, local.Modules()) || !cmp.Equal(remote.Mask(), local.Mask()) {
		t.Fatalf("remote candidate %s %v %v, local %s %v %v", remote.Revision(), mods, remote.Mask(), local.Revision(), local.Modules(), local.Mask())
	}
	allowed := baseSpec()
	denied := baseSpec()
	denied.Privileged = true
	denied.CapAdd = []string{"SYS_ADMIN", "NET_ADMIN"}
	denied.Resources.MemoryMB = 1 << 20
	denied.Env = map[string]string{"API_TOKEN": "s3cret"}
	for name, spec := range map[string]sandgate.RunSpec{"allowed": allowed, "denied": denied} {
		n, err := sandgate.Normalize(spec, e.Defaults())
		if err != nil {
			t.Fatal(err)
		}
		in := sandgate.AdmissionInput{Operation: sandgate.OperationRun,
			Principal: sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}},
			Request:   n, Settings: sandgate.Settings{MountRoots: []string{}}}
		got, err := remote.Decide(ctx, in)
		if err != nil {
			t.Fatalf("%s: remote Decide: %v", name, err)
		}
		want, err := local.Decide(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		want.DecisionID = got.DecisionID
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(sandgate.Decision{})); diff != "" {
			t.Errorf("%s: the child decided otherwise (-in process +child):\n%s", name, diff)
		}
		if got.Enforcement.PrivilegedGIDs == nil {
			t.Errorf("%s: the child's decision lost its enforcement", name)
		}
	}
}

// TestEvaluatorMemoryLimit: a candidate whose test builds an array of
// several GiB ends its child, not this process, and is refused naming the
// memory limit; the variant, the same test in the engine's directory, is
// refused at reload and the revision in force stays. The array is ten
// times what the limit holds: one of 4 million numbers (~360 MiB of heap
// at its peak) fitted in 384 MiB or not depending on when the collector
// ran, and a child that fitted it loaded the bomb without error.
func TestEvaluatorMemoryLimit(t *testing.T) {
	ctx := context.Background()
	dir := copyBundle(t)
	e := evaluatorEngine(t, dir, policies.EvaluatorLimits{MemoryMB: 384})
	rev := e.Status().Revision
	bomb := []byte("package sandgate.bomb_test\n\ntest_bomb if {\n\tcount(numbers.range(1, 40000000)) > 1\n}\n")
	files, err := policies.BundleFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	files["bomb_test.rego"] = bomb
	_, err = e.LoadCandidate(ctx, files)
	wantLimit(t, err, "memory")

	if err := os.WriteFile(filepath.Join(dir, "bomb_test.rego"), bomb, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.Reload(ctx)
	wantLimit(t, err, "memory")
	if got := e.Status().Revision; got != rev {
		t.Errorf("revision %s after the refused reload, want %s", got, rev)
	}
}

func wantLimit(t *testing.T, err error, limit string) {
	t.Helper()
	var se *sandgate.Error
	if !errors.As(err, &se) || se.Code != sandgate.CodePolicyInvalid || se.Details["limit"] != limit {
		t.Fatalf("got %v, want %s naming the %s limit", err, sandgate.CodePolicyInvalid, limit)
	}
}
