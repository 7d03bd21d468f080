package policies_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// fixedNow is the evaluation time tests pin.
var fixedNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// events records what an engine emits.
type events struct {
	mu  sync.Mutex
	got []sandgate.Event
}

func (r *events) Emit(ev sandgate.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ev)
}

func (r *events) types() []sandgate.EventType {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sandgate.EventType
	for _, ev := range r.got {
		out = append(out, ev.Type)
	}
	return out
}

func (r *events) last() sandgate.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[len(r.got)-1]
}

// newEngine starts an engine with a pinned clock and counting IDs.
func newEngine(t *testing.T, opts policies.Options) *policies.Engine {
	t.Helper()
	if opts.Clock == nil {
		opts.Clock = func() time.Time { return fixedNow }
	}
	if opts.IDs == nil {
		var mu sync.Mutex
		n := 0
		opts.IDs = func() string {
			mu.Lock()
			defer mu.Unlock()
			n++
			return "decision-" + strconv.Itoa(n)
		}
	}
	e, err := policies.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("policies.New: %v", err)
	}
	return e
}

// copyBundle copies the default bundle (this directory's *.rego and
// data.json) into a fresh directory and returns it.
func copyBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("*.rego")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "data.json")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, f, string(data))
	}
	return dir
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// editData rewrites the bundle's data.json with old replaced by new.
func editData(t *testing.T, dir, old, new string) {
	t.Helper()
	data := readFile(t, dir, "data.json")
	if !strings.Contains(data, old) {
		t.Fatalf("data.json does not contain %q", old)
	}
	writeFile(t, dir, "data.json", strings.Replace(data, old, new, 1))
}

// decide normalises spec with the engine's defaults and decides it.
func decide(t *testing.T, e *policies.Engine, spec sandgate.RunSpec) sandgate.Decision {
	t.Helper()
	n, err := sandgate.Normalize(spec, e.Defaults())
	if err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return decideNormalized(t, e, n)
}

func decideNormalized(t *testing.T, e *policies.Engine, spec sandgate.Normalized) sandgate.Decision {
	t.Helper()
	d, err := e.Decide(context.Background(), sandgate.AdmissionInput{
		Operation: sandgate.OperationRun,
		Principal: sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}},
		Request:   spec,
	})
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return d
}

// ruleNames lists the rules of vs, sorted and without repeats.
func ruleNames(vs []sandgate.Violation) []string {
	out := []string{}
	for _, v := range vs {
		if !slices.Contains(out, v.Rule) {
			out = append(out, v.Rule)
		}
	}
	slices.Sort(out)
	return out
}

// baseSpec is a request every default rule admits.
func baseSpec() sandgate.RunSpec {
	return sandgate.RunSpec{Command: []string{"sh", "-c", "echo hello"}}
}

func boolPtr(b bool) *bool { return &b }

// resolvedDir returns t.TempDir() with symlinks resolved, as Normalize
// would report it.
func resolvedDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// writeConfigOverride sets the members of the JSON object override in the
// bundle's data.sandgate.config, keeping the rest.
func writeConfigOverride(t *testing.T, dir, override string) {
	t.Helper()
	var data map[string]map[string]map[string]any
	if err := json.Unmarshal([]byte(readFile(t, dir, "data.json")), &data); err != nil {
		t.Fatal(err)
	}
	var o map[string]any
	if err := json.Unmarshal([]byte(override), &o); err != nil {
		t.Fatal(err)
	}
	for k, v := range o {
		data["sandgate"]["config"][k] = v
	}
	out, err := json.MarshalIndent(data, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "data.json", string(out))
}
