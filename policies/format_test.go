package policies_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
)

// TestBundleFormatted holds every Rego file of the default bundle to what
// `opa fmt` (Rego v1) makes of it, so that a change reads the same
// whichever editor made it.
func TestBundleFormatted(t *testing.T) {
	files, err := filepath.Glob("*.rego")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Rego files: %v", err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := format.SourceWithOpts(f, src, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if diff := cmp.Diff(strings.Split(string(got), "\n"), strings.Split(string(src), "\n")); diff != "" {
			t.Errorf("%s is not formatted as opa fmt would (-opa fmt +file):\n%s", f, diff)
		}
	}
}
