package sandgate_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sandgate/sandgate"

// owners says which boundary packages alone may import a dependency.
var owners = map[string][]string{
	"github.com/docker/":               {"executor"},
	"github.com/moby/":                 {"executor"},
	"github.com/labstack/echo":         {"gateway"},
	"github.com/open-policy-agent/opa": {"policies"},
	"gorm.io/":                         {"audit", "runstore"},
	"github.com/jackc/pgx":             {"audit", "runstore"},
	"github.com/pressly/goose":         {"migrations"},
}

// boundaries may not import each other, except where allowed.
var boundaries = []string{"gateway", "policies", "executor", "audit", "runstore", "migrations"}

var allowedCross = map[[2]string]bool{{"audit", "migrations"}: true}

// TestPackageBoundaries enforces that each boundary package wraps its one
// dependency and that the root package depends on the standard library alone.
func TestPackageBoundaries(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	checked := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Standard   bool
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		top, _, _ := strings.Cut(rel, "/")
		if top == "cmd" {
			continue
		}
		checked++
		for _, imp := range p.Imports {
			if rel == "" && strings.Contains(strings.Split(imp, "/")[0], ".") && !strings.HasPrefix(imp, module) {
				t.Errorf("root package imports %s: it must use the standard library only", imp)
			}
			for prefix, allowed := range owners {
				if strings.HasPrefix(imp, prefix) && !slices.Contains(allowed, top) {
					t.Errorf("%s imports %s: only %s may", p.ImportPath, imp, strings.Join(allowed, " and "))
				}
			}
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			impTop, _, _ := strings.Cut(strings.TrimPrefix(imp, module+"/"), "/")
			for _, b := range boundaries {
				if impTop == b && top != b && !allowedCross[[2]string{top, b}] {
					t.Errorf("%s imports %s: boundary packages meet only at the root package's interfaces", p.ImportPath, imp)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("go list returned no packages")
	}
}
