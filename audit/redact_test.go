package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// TestRedact: env values always, and every masked path, become keyed
// hashes; everything else is untouched and the input is not modified.
func TestRedact(t *testing.T) {
	key := []byte("k")
	h := func(v string) string { return sandgate.MaskHash(key, v) }
	tests := []struct {
		name string
		doc  map[string]any
		mask []string
		want map[string]any
	}{
		{
			name: "env always",
			doc:  map[string]any{"image": "x", "env": map[string]any{"TOKEN": "s3cret", "A": "1"}},
			want: map[string]any{"image": "x", "env": map[string]any{"TOKEN": h("s3cret"), "A": h("1")}},
		},
		{
			name: "dotted path and top-level string",
			doc:  map[string]any{"stdin": "password", "labels": map[string]any{"token": "t", "ticket": "ENG-1"}},
			mask: []string{"stdin", "labels.token"},
			want: map[string]any{"stdin": h("password"), "labels": map[string]any{"token": h("t"), "ticket": "ENG-1"}},
		},
		{
			name: "array and number leaves",
			doc:  map[string]any{"command": []any{"sh", "-c", "x"}, "resources": map[string]any{"memory_mb": 512.0}},
			mask: []string{"command", "resources.memory_mb"},
			want: map[string]any{"command": []any{h("sh"), h("-c"), h("x")}, "resources": map[string]any{"memory_mb": h("512")}},
		},
		{
			name: "array index",
			doc:  map[string]any{"command": []any{"sh", "-c", "curl -u admin:pw"}},
			mask: []string{"command.2"},
			want: map[string]any{"command": []any{"sh", "-c", h("curl -u admin:pw")}},
		},
		{
			name: "object in an array",
			doc:  map[string]any{"mounts": []any{map[string]any{"source": "/srv/a", "target": "/w"}, map[string]any{"source": "/srv/b", "target": "/x"}}},
			mask: []string{"mounts.0.source"},
			want: map[string]any{"mounts": []any{map[string]any{"source": h("/srv/a"), "target": "/w"}, map[string]any{"source": "/srv/b", "target": "/x"}}},
		},
		{
			name: "missing paths ignored",
			doc:  map[string]any{"a": "b"},
			mask: []string{"nope", "a.b.c", ""},
			want: map[string]any{"a": "b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := deepCopy(tt.doc)
			got := Redact(key, tt.doc, tt.mask)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Redact (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, any(tt.doc)); diff != "" {
				t.Errorf("input modified (-before +after):\n%s", diff)
			}
		})
	}
}

// TestRedactSpec: a run spec's env and masked fields never appear in
// clear.
func TestRedactSpec(t *testing.T) {
	spec := sandgate.RunSpec{Image: "img", Command: []string{"sh"}, Env: map[string]string{"API_KEY": "abc123"},
		Stdin: "pw", Labels: map[string]string{"token": "tok", "team": "x"}}
	got := RedactSpec([]byte("k"), spec, []string{"stdin", "labels.token"})
	env := got["env"].(map[string]any)
	if !strings.HasPrefix(env["API_KEY"].(string), sandgate.MaskPrefix) || got["stdin"] == "pw" || got["labels"].(map[string]any)["token"] == "tok" {
		t.Errorf("secret in clear: %v", got)
	}
	if got["labels"].(map[string]any)["team"] != "x" || got["image"] != "img" {
		t.Errorf("unmasked field changed: %v", got)
	}
	if sandgate.MaskHash([]byte("k"), "abc123") != env["API_KEY"] || sandgate.MaskHash([]byte("other"), "abc123") == env["API_KEY"] {
		t.Error("hash is not keyed HMAC-SHA256")
	}
}

// TestRedactSpecPaths: the store's redaction of a spec, what the gateway
// records in the trail, masks array and nested paths and stdin, exactly
// as sandgate.MaskSpec does under the same key.
func TestRedactSpecPaths(t *testing.T) {
	key := []byte("k")
	spec := sandgate.RunSpec{Image: "img", Command: []string{"sh", "-c", "curl -u admin:pw"}, Stdin: "pw",
		Mounts: []sandgate.Mount{{Source: "/srv/proj-a", Target: "/w"}}, Labels: map[string]string{"a.b": "tok"}}
	mask := []string{"command.2", "mounts.0.source", "labels.a.b"}
	got := RedactSpec(key, spec, mask)
	if diff := cmp.Diff(sandgate.MaskSpec(key, spec, mask), got); diff != "" {
		t.Errorf("RedactSpec and MaskSpec disagree (-MaskSpec +RedactSpec):\n%s", diff)
	}
	if got["command"].([]any)[2] != sandgate.MaskHash(key, "curl -u admin:pw") || got["stdin"] != sandgate.MaskHash(key, "pw") ||
		got["mounts"].([]any)[0].(map[string]any)["source"] != sandgate.MaskHash(key, "/srv/proj-a") ||
		got["labels"].(map[string]any)["a.b"] != sandgate.MaskHash(key, "tok") {
		t.Errorf("RedactSpec left a secret in clear: %v", got)
	}
}

// TestLoadMaskKey: a missing mask key file is created (0600, hex) and read
// back the same; a short or non-hex key is refused; without create a
// missing file is an error.
func TestLoadMaskKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys", "mask.key")
	if _, err := proof.LoadMaskKey(path, false); err == nil {
		t.Fatal("a missing mask key was accepted without create")
	}
	key, err := proof.LoadMaskKey(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != proof.MinMaskKeyBytes {
		t.Errorf("generated key of %d bytes", len(key))
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, st.Mode())
	}
	again, err := proof.LoadMaskKey(path, true)
	if err != nil || !bytes.Equal(again, key) {
		t.Fatalf("reloaded key differs: %v", err)
	}
	written := filepath.Join(dir, "written.key")
	if err := os.WriteFile(written, []byte("  "+strings.Repeat("ab", 40)+"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := proof.LoadMaskKey(written, false); err != nil || len(k) != 40 {
		t.Errorf("an operator's 40-byte hex key: %d bytes, %v", len(k), err)
	}
	for name, content := range map[string]string{
		"short":   strings.Repeat("ab", 16),
		"not hex": strings.Repeat("zz", 32),
		"empty":   "",
	} {
		bad := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := proof.LoadMaskKey(bad, true); err == nil {
			t.Errorf("%s mask key accepted", name)
		}
	}
}
