package policies_test

import (
	"encoding/json"
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

// TestBundleChecksStrict does what `opa check --strict --bundle` does
// with the default bundle, tests included: compile every module with
// OPA's own capabilities, print statements allowed, in strict mode
// (unused variables, imports and arguments, shadowed built-ins and
// deprecated ones are errors), with METADATA annotations parsed and
// checked, and no rule where data.json has a value.
func TestBundleChecksStrict(t *testing.T) {
	files, err := filepath.Glob("*.rego")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Rego files: %v", err)
	}
	modules := map[string]*ast.Module{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ast.ParseModuleWithOpts(f, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		modules[f] = m
	}
	raw, err := os.ReadFile("data.json")
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatal(err)
	}
	c := ast.NewCompiler().
		WithCapabilities(ast.CapabilitiesForThisVersion()).
		WithEnablePrintStatements(true).
		WithStrict(true).
		WithUseTypeCheckAnnotations(true).
		WithPathConflictsCheck(func(path []string) (bool, error) {
			var v any = data
			for _, k := range path {
				m, ok := v.(map[string]any)
				if !ok {
					return false, nil
				}
				if v, ok = m[k]; !ok {
					return false, nil
				}
			}
			return true, nil
		})
	if c.Compile(modules); c.Failed() {
		for _, e := range c.Errors {
			t.Error(e)
		}
	}
}
