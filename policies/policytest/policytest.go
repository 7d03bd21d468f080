// Package policytest makes real policy engines for other packages' tests:
// the default bundle with its data changed as a test needs.
package policytest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sandgate/sandgate/policies"
)

// Engine loads the default bundle (this module's policies directory) with
// edit applied to its data.sandgate.config.
func Engine(t testing.TB, edit func(cfg map[string]any)) *policies.Engine {
	t.Helper()
	e, err := policies.New(context.Background(), policies.Options{Dir: Bundle(t, edit)})
	if err != nil {
		t.Fatalf("policies.New: %v", err)
	}
	return e
}

// Bundle writes the default bundle (this module's policies directory)
// with edit (if any) applied to its data.sandgate.config to a new
// directory and returns it.
func Bundle(t testing.TB, edit func(cfg map[string]any)) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "..")
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(src, "*.rego"))
	if err != nil || len(files) == 0 {
		t.Fatalf("policy bundle in %s: %v", src, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(src, "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(data["sandgate"].(map[string]any)["config"].(map[string]any))
	}
	if raw, err = json.Marshal(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// EgressDestinations is an edit that allows team the destinations.
func EgressDestinations(team string, dests ...string) func(cfg map[string]any) {
	return func(cfg map[string]any) {
		cfg["egress_destinations"] = map[string]any{"default": []string{}, "teams": map[string]any{team: dests}}
	}
}
