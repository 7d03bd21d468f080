package sandgate_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestReadmeSpecShowsTheDefaults holds the README's run spec example to
// the default bundle's data: every value it shows that has a default is
// that default, so that a reader who copies it asks for what they would
// get anyway (a timeout of 300 s, a 64 MB /tmp), not for other numbers.
func TestReadmeSpecShowsTheDefaults(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := bytes.Cut(readme, []byte("### The run spec"))
	if !ok {
		t.Fatal("README.md has no section The run spec")
	}
	_, block, ok := bytes.Cut(after, []byte("```json\n"))
	if !ok {
		t.Fatal("The run spec has no JSON example")
	}
	block, _, _ = bytes.Cut(block, []byte("```"))
	var spec map[string]any
	if err := json.Unmarshal(block, &spec); err != nil {
		t.Fatalf("the README's run spec is not JSON: %v", err)
	}
	raw, err := os.ReadFile("policies/data.json")
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Sandgate struct {
			Config struct {
				Defaults map[string]any `json:"defaults"`
			} `json:"config"`
		} `json:"sandgate"`
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatal(err)
	}
	defaults := data.Sandgate.Config.Defaults
	if len(defaults) == 0 {
		t.Fatal("policies/data.json has no sandgate.config.defaults")
	}
	// The defaults named as the spec's fields; the rest of data's
	// defaults (session lifetimes, keepalives) are not run spec fields.
	fields := map[string]string{"workspace_workdir": "workdir"}
	checked := 0
	var walk func(path string, def, got any)
	walk = func(path string, def, got any) {
		if dm, ok := def.(map[string]any); ok {
			gm, _ := got.(map[string]any)
			for k, v := range dm {
				if g, ok := gm[k]; ok {
					walk(path+"."+k, v, g)
				}
			}
			return
		}
		checked++
		if !equalJSON(def, got) {
			t.Errorf("README run spec %s = %v, but the default is %v", strings.TrimPrefix(path, "."), got, def)
		}
	}
	for k, v := range defaults {
		name := k
		if f, ok := fields[k]; ok {
			name = f
		}
		if g, ok := spec[name]; ok {
			walk("."+name, v, g)
		}
	}
	if checked < 10 {
		t.Errorf("only %d of the README's values were compared with a default", checked)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
