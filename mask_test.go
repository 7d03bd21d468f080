package sandgate_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

var maskKey = []byte("mask-key-0123456789abcdef0123456")

func h(v string) string { return sandgate.MaskHash(maskKey, v) }

// TestMask: each kind of path masks exactly what it names, once, and
// nothing else.
func TestMask(t *testing.T) {
	tests := []struct {
		name  string
		doc   map[string]any
		paths []string
		want  map[string]any
	}{
		{
			name:  "top-level object: every value, keys kept",
			doc:   map[string]any{"env": map[string]any{"TOKEN": "s3cret", "EMPTY": ""}, "image": "img"},
			paths: []string{"env"},
			want:  map[string]any{"env": map[string]any{"TOKEN": h("s3cret"), "EMPTY": h("")}, "image": "img"},
		},
		{
			name:  "top-level string",
			doc:   map[string]any{"stdin": "password", "workdir": "/w"},
			paths: []string{"stdin"},
			want:  map[string]any{"stdin": h("password"), "workdir": "/w"},
		},
		{
			name:  "nested key",
			doc:   map[string]any{"labels": map[string]any{"token": "t", "ticket": "ENG-1"}},
			paths: []string{"labels.token"},
			want:  map[string]any{"labels": map[string]any{"token": h("t"), "ticket": "ENG-1"}},
		},
		{
			name:  "array index",
			doc:   map[string]any{"command": []any{"sh", "-c", "curl -u admin:pw"}},
			paths: []string{"command.2"},
			want:  map[string]any{"command": []any{"sh", "-c", h("curl -u admin:pw")}},
		},
		{
			name:  "whole array",
			doc:   map[string]any{"command": []any{"sh", "-c", "x"}},
			paths: []string{"command"},
			want:  map[string]any{"command": []any{h("sh"), h("-c"), h("x")}},
		},
		{
			name: "key of an object in an array",
			doc: map[string]any{"mounts": []any{
				map[string]any{"source": "/srv/a", "target": "/w"},
				map[string]any{"source": "/srv/b", "target": "/x"},
			}},
			paths: []string{"mounts.0.source"},
			want: map[string]any{"mounts": []any{
				map[string]any{"source": h("/srv/a"), "target": "/w"},
				map[string]any{"source": "/srv/b", "target": "/x"},
			}},
		},
		{
			name: "wildcard over an array",
			doc: map[string]any{"mounts": []any{
				map[string]any{"source": "/srv/a", "target": "/w"},
				map[string]any{"source": "/srv/b", "target": "/x"},
			}},
			paths: []string{"mounts.*.source"},
			want: map[string]any{"mounts": []any{
				map[string]any{"source": h("/srv/a"), "target": "/w"},
				map[string]any{"source": h("/srv/b"), "target": "/x"},
			}},
		},
		{
			name:  "wildcard over an object",
			doc:   map[string]any{"labels": map[string]any{"a": map[string]any{"token": "1", "k": "2"}, "b": map[string]any{"token": "3"}}},
			paths: []string{"labels.*.token"},
			want:  map[string]any{"labels": map[string]any{"a": map[string]any{"token": h("1"), "k": "2"}, "b": map[string]any{"token": h("3")}}},
		},
		{
			name:  "nested arrays",
			doc:   map[string]any{"matrix": []any{[]any{"a", "b"}, []any{"c", "d"}}},
			paths: []string{"matrix.1.0"},
			want:  map[string]any{"matrix": []any{[]any{"a", "b"}, []any{h("c"), "d"}}},
		},
		{
			name:  "key holding dots",
			doc:   map[string]any{"labels": map[string]any{"com.example.token": "t", "com.example.team": "x"}},
			paths: []string{"labels.com.example.token"},
			want:  map[string]any{"labels": map[string]any{"com.example.token": h("t"), "com.example.team": "x"}},
		},
		{
			name:  "object under a key holding dots",
			doc:   map[string]any{"labels": map[string]any{"a.b": map[string]any{"c": "secret", "d": "ok"}}},
			paths: []string{"labels.a.b.c"},
			want:  map[string]any{"labels": map[string]any{"a.b": map[string]any{"c": h("secret"), "d": "ok"}}},
		},
		{
			name:  "numbers, booleans and null",
			doc:   map[string]any{"resources": map[string]any{"memory_mb": json.Number("512"), "cpus": 0.5, "on": true, "none": nil}},
			paths: []string{"resources"},
			want:  map[string]any{"resources": map[string]any{"memory_mb": h("512"), "cpus": h("0.5"), "on": h("true"), "none": nil}},
		},
		{
			name:  "typed maps and slices",
			doc:   map[string]any{"env": map[string]string{"A": "1"}, "args": []string{"x", "y"}},
			paths: []string{"env.A", "args.1"},
			want:  map[string]any{"env": map[string]string{"A": h("1")}, "args": []string{"x", h("y")}},
		},
		{
			name:  "paths that overlap hash once",
			doc:   map[string]any{"env": map[string]any{"A": "1"}, "labels": map[string]any{"t": "v"}},
			paths: []string{"env", "env.A", "env", "labels.t", "labels"},
			want:  map[string]any{"env": map[string]any{"A": h("1")}, "labels": map[string]any{"t": h("v")}},
		},
		{
			name:  "a value that looks hashed is hashed all the same",
			doc:   map[string]any{"stdin": sandgate.MaskPrefix + "00"},
			paths: []string{"stdin"},
			want:  map[string]any{"stdin": h(sandgate.MaskPrefix + "00")},
		},
		{
			name:  "paths that name nothing",
			doc:   map[string]any{"a": "b", "list": []any{"x"}},
			paths: []string{"", "nope", "a.b.c", "list.1", "list.-1", "list.x", "list.0.deeper"},
			want:  map[string]any{"a": "b", "list": []any{"x"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sandgate.Mask(maskKey, tt.doc, tt.paths...)
			if diff := cmp.Diff(any(tt.want), got); diff != "" {
				t.Errorf("Mask (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMaskAt: a value at a field of a larger document (a mutation's) is
// masked for the paths at and below that field.
func TestMaskAt(t *testing.T) {
	paths := []string{"env", "labels.token", "command.2", "mounts.*.source"}
	tests := []struct {
		name  string
		field []string
		value any
		want  any
	}{
		{"below a masked path", []string{"env", "TOKEN"}, "new", h("new")},
		{"at a masked path", []string{"labels", "token"}, "v", h("v")},
		{"array index", []string{"command", "2"}, "pw", h("pw")},
		{"above a masked path", []string{"labels"}, map[string]any{"token": "t", "team": "x"}, map[string]any{"token": h("t"), "team": "x"}},
		{"above an array path", []string{"command"}, []any{"sh", "-c", "pw"}, []any{"sh", "-c", h("pw")}},
		{"wildcard below", []string{"mounts", "3"}, map[string]any{"source": "/s", "target": "/t"}, map[string]any{"source": h("/s"), "target": "/t"}},
		{"unmasked", []string{"network"}, "none", "none"},
		{"sibling", []string{"labels", "team"}, "x", "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, sandgate.MaskAt(maskKey, tt.value, tt.field, paths...)); diff != "" {
				t.Errorf("MaskAt (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMaskSpec: env values and stdin are always masked, and each path the
// policy names, arrays included; the spec itself keeps its secrets.
func TestMaskSpec(t *testing.T) {
	spec := sandgate.RunSpec{
		Image: "img", Command: []string{"run", "--password", "pw"}, Stdin: "secret input",
		Env:    map[string]string{"TOKEN": "t0k", "EMPTY": ""},
		Labels: map[string]string{"token": "lab", "team": "x"},
		Mounts: []sandgate.Mount{{Source: "/srv/proj-a", Target: "/w"}},
	}
	got := sandgate.MaskSpec(maskKey, spec, []string{"labels.token", "command.2", "mounts.0.source"})
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"t0k", `"lab"`, `"pw"`, "secret input", "/srv/proj-a"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("masked spec holds %s in clear: %s", secret, raw)
		}
	}
	want := map[string]any{"TOKEN": h("t0k"), "EMPTY": h("")}
	if diff := cmp.Diff(want, got["env"]); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]any{"run", "--password", h("pw")}, got["command"]); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	if got["stdin"] != h("secret input") || got["image"] != "img" || got["labels"].(map[string]any)["team"] != "x" {
		t.Errorf("spec = %s", raw)
	}
	if spec.Env["TOKEN"] != "t0k" || spec.Command[2] != "pw" || spec.Stdin != "secret input" {
		t.Errorf("MaskSpec changed the spec it was given: %+v", spec)
	}
}

// TestMaskHash: keyed, deterministic, prefixed.
func TestMaskHash(t *testing.T) {
	a := sandgate.MaskHash([]byte("k1"), "v")
	if a != sandgate.MaskHash([]byte("k1"), "v") || a == sandgate.MaskHash([]byte("k2"), "v") || a == sandgate.MaskHash([]byte("k1"), "w") {
		t.Errorf("MaskHash is not a deterministic keyed hash: %s", a)
	}
	if !strings.HasPrefix(a, sandgate.MaskPrefix) || len(a) != len(sandgate.MaskPrefix)+64 {
		t.Errorf("MaskHash = %q, want %s and 64 hex digits", a, sandgate.MaskPrefix)
	}
}

// TestMasker: the one masker hashes a spec for the trail, for the store
// and a decision's mutations the same way, with its key alone.
func TestMasker(t *testing.T) {
	m := sandgate.NewMasker(maskKey)
	spec := sandgate.RunSpec{
		Image: "img", Command: []string{"run", "--password", "pw"}, Stdin: "secret input",
		Env:    map[string]string{"TOKEN": "t0k", "EMPTY": ""},
		Labels: map[string]string{"token": "lab", "team": "x"},
		Files:  []sandgate.File{{Path: "a", Content: "file secret"}},
	}
	stored := m.StoredSpec(spec, nil)
	if stored.Env["TOKEN"] != h("t0k") || stored.Env["EMPTY"] != h("") || stored.Stdin != h("secret input") ||
		stored.Files[0].Content != h("file secret") || stored.Labels["token"] != "lab" {
		t.Errorf("StoredSpec without paths = %+v", stored)
	}
	stored = m.StoredSpec(spec, []string{"labels.token", "command.2"})
	if stored.Labels["token"] != h("lab") || stored.Labels["team"] != "x" || stored.Command[2] != h("pw") || stored.Env["TOKEN"] != h("t0k") {
		t.Errorf("StoredSpec with paths = %+v", stored)
	}
	if spec.Env["TOKEN"] != "t0k" || spec.Stdin != "secret input" || spec.Files[0].Content != "file secret" {
		t.Errorf("StoredSpec changed the spec it was given: %+v", spec)
	}
	doc := m.Spec(spec, nil)
	if doc["stdin"] != h("secret input") || doc["files"].([]any)[0].(map[string]any)["content"] != h("file secret") {
		t.Errorf("Spec = %v", doc)
	}
	muts := m.Mutations([]sandgate.Mutation{
		{Op: "replace", Path: "/network", Value: "none", Rule: "air_gapped_network"},
		{Op: "replace", Path: "/env/TOKEN", Value: "new", Rule: "r"},
		{Op: "replace", Path: "/labels/token", Value: "v", Rule: "r"},
		{Op: "replace", Path: "/labels", Value: map[string]string{"token": "w", "team": "y"}, Rule: "r"},
	}, []string{"labels.token"})
	if muts[0]["value"] != "none" || muts[1]["value"] != h("new") || muts[2]["value"] != h("v") {
		t.Errorf("mutations = %v", muts)
	}
	if whole := muts[3]["value"].(map[string]any); whole["token"] != h("w") || whole["team"] != "y" {
		t.Errorf("a mutation replacing labels = %v", whole)
	}
	in := map[string]any{"env": map[string]any{"K": "v"}, "n": json.Number("3")}
	out := m.Doc(in, "env", "n")
	if out["env"].(map[string]any)["K"] != h("v") || out["n"] != h("3") || in["env"].(map[string]any)["K"] != "v" {
		t.Errorf("Doc = %v (from %v)", out, in)
	}
	if v := m.Value(map[string]any{"a": "b"}); v.(map[string]any)["a"] != h("b") {
		t.Errorf("Value = %v", v)
	}
	if other := sandgate.NewMasker([]byte("other-key-0123456789")); other.Hash("t0k") == m.Hash("t0k") {
		t.Errorf("two keys hash alike")
	}
}

// TestStoredSpecDefaultMask: with the default mask (env, stdin) or paths
// within env, StoredSpec hashes the spec directly, and the result is what
// the JSON round trip that other paths take gives (forced here by a path
// that names nothing).
func TestStoredSpecDefaultMask(t *testing.T) {
	m := sandgate.NewMasker(maskKey)
	ro := true
	specs := map[string]sandgate.RunSpec{
		"empty": {},
		"full": {Image: "img", Command: []string{"run", "--password", "pw"}, Stdin: "secret input",
			Env:    map[string]string{"TOKEN": "t0k", "EMPTY": "", "com.example.key": "v"},
			Labels: map[string]string{"token": "lab"}, Files: []sandgate.File{{Path: "a", Content: "file secret"}},
			Mounts: []sandgate.Mount{{Source: "/s", Target: "/t"}}, ReadOnlyRootfs: &ro, Ports: []string{"8080"},
			Resources: sandgate.Resources{MemoryMB: 512}},
	}
	for name, spec := range specs {
		for _, paths := range [][]string{{"env", "stdin"}, {"stdin", "env.TOKEN"}, {"env.com.example.key"}} {
			t.Run(name+"/"+strings.Join(paths, ","), func(t *testing.T) {
				got := m.StoredSpec(spec, paths)
				want := m.StoredSpec(spec, append(slices.Clone(paths), "labels.no-such-label"))
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("StoredSpec(%v) differs from the round trip (-want +got):\n%s", paths, diff)
				}
				if got.Env["TOKEN"] != "" && got.Env["TOKEN"] != h("t0k") {
					t.Errorf("env not hashed: %v", got.Env)
				}
			})
		}
	}
}
