package sandgate_test

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
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
	"github.com/getkin/kin-openapi":    {"gateway"}, // gateway/api/apitest, in tests
	"github.com/open-policy-agent/opa": {"policies"},
	"github.com/sigstore/":             {"imagesig"},
	"gorm.io/":                         {"audit", "runstore", "pgstore"},
	"github.com/jackc/pgx":             {"audit", "runstore", "pgstore"},
	"github.com/pressly/goose":         {"migrations"},
	"github.com/bmatcuk/doublestar":    {"workspace"},
	"golang.org/x/mod/sumdb":           {"audit", "cmd"}, // transparency-log proofs
	"github.com/modelcontextprotocol/": {"mcp"},
	"github.com/coder/websocket":       {"gateway", "cmd"}, // terminals; the CLI's shell
}

// narrow are packages that link the standard library, the root package
// and the modules listed only: the workspace's file work on hostile input
// is small enough to read whole.
// The audit sinks' senders (syslog, webhook) and their OCSF mapping read
// a YAML file and speak to the network with the standard library alone;
// the egress proxy needs the standard library, a rate limiter and
// cryptobyte (what crypto/tls reads a ClientHello with). The admission
// gate links the standard library and the root package alone: it meets
// HTTP, the database and the daemon only at interfaces. Audit
// verification (package audit/proof: canonical bodies, chains, notes,
// tree proofs, receipts, exports, archives, the witness) links no database
// driver: an auditor verifies with what they are handed.
var narrow = map[string][]string{
	"admission":   {},
	"audit/proof": {"golang.org/x/mod/sumdb/note", "golang.org/x/mod/sumdb/tlog"},
	"workspace":   {"github.com/bmatcuk/doublestar/v4"},
	"sinks":       {"sigs.k8s.io/yaml", "go.yaml.in/yaml/v2"},
	"egress":      {"golang.org/x/time/rate", "golang.org/x/crypto/cryptobyte", "golang.org/x/crypto/cryptobyte/asn1"},
	"secrets":     {},
}

// boundaries may not import each other, except where allowed.
var boundaries = []string{"gateway", "policies", "executor", "audit", "runstore", "migrations"}

var allowedCross = map[[2]string]bool{{"audit", "migrations"}: true, {"mcp", "gateway"}: true}

// apiClients are packages that speak to a gateway as its clients do: of
// the module they import the root package and the wire packages only
// (the MCP server's tools are calls of the HTTP API).
var apiClients = map[string]bool{"mcp": true}

// wireOnly are the packages a program that talks to a gateway links: the
// wire types and the client. They, and everything they link, may use the
// standard library, the root package and each other only, so that a
// client does not drag in the server's HTTP framework or its metrics.
var wireOnly = map[string]bool{"gateway/api": true, "gateway/client": true}

// stdlibOnly are packages that link the standard library alone: the web
// console is static files and a handler, which any server could mount;
// the tests' shared helpers can then be used by any package's in-package
// tests without a cycle.
var stdlibOnly = map[string]bool{"console": true, "agent": true, "sandgatetest": true}

// apart are packages that may not link the other: the run path does not
// build images, and the image administration runs no jobs. They share
// only executor/internal/daemon (the client, the error classes, the one
// retry policy).
var apart = [][2]string{{"executor", "executor/images"}, {"executor/images", "executor"}}

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
			Deps       []string
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
		if wireOnly[rel] {
			for _, dep := range p.Deps {
				if dep == module || (strings.HasPrefix(dep, module+"/") && wireOnly[strings.TrimPrefix(dep, module+"/")]) {
					continue
				}
				if strings.Contains(strings.Split(dep, "/")[0], ".") {
					t.Errorf("%s links %s: the wire types and the client may use the standard library and the root package only", p.ImportPath, dep)
				}
			}
		}
		if allowed, ok := narrow[rel]; ok {
			for _, dep := range p.Deps {
				if dep != module && strings.Contains(strings.Split(dep, "/")[0], ".") && !slices.Contains(allowed, dep) {
					t.Errorf("%s links %s: it may use the standard library, the root package and %s only", p.ImportPath, dep, strings.Join(allowed, ", "))
				}
			}
		}
		for _, pair := range apart {
			if rel == pair[0] && slices.Contains(p.Deps, module+"/"+pair[1]) {
				t.Errorf("%s links %s: the run path and the image administration are kept apart", p.ImportPath, module+"/"+pair[1])
			}
		}
		if stdlibOnly[rel] {
			for _, dep := range p.Deps {
				if strings.Contains(strings.Split(dep, "/")[0], ".") {
					t.Errorf("%s links %s: it may use the standard library only", p.ImportPath, dep)
				}
			}
		}
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
			if apiClients[top] && !wireOnly[strings.TrimPrefix(imp, module+"/")] {
				t.Errorf("%s imports %s: a client of the API imports the root package, gateway/api and gateway/client only", p.ImportPath, imp)
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

// databaseDrivers are the import prefixes of the database drivers.
var databaseDrivers = []string{"gorm.io/", "github.com/jackc/"}

// TestVerificationLinksNoDatabase: package audit/proof links no database
// driver, transitively; and the files of the commands that verify with no
// database (audit verify --offline and --archive, verify-receipt,
// witness) import neither a driver nor package audit, so those commands'
// code reaches the trail's proofs through audit/proof alone.
func TestVerificationLinksNoDatabase(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./audit/proof").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"/audit/proof") {
		t.Fatalf("go list -deps ./audit/proof lists no audit/proof: %v", deps)
	}
	for _, dep := range deps {
		for _, d := range databaseDrivers {
			if strings.HasPrefix(dep, d) {
				t.Errorf("audit/proof links %s: verification must need no database driver", dep)
			}
		}
		if dep == module+"/audit" {
			t.Errorf("audit/proof links package audit")
		}
	}
	fset := token.NewFileSet()
	for _, file := range []string{"cmd/sandgate/cli/offline.go", "cmd/sandgate/cli/trust.go", "cmd/sandgate/cli/witness.go"} {
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", file, err)
		}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if path == module+"/audit" || path == module+"/runstore" || path == module+"/migrations" {
				t.Errorf("%s imports %s: the commands that verify with no database use audit/proof alone", file, path)
			}
			for _, d := range databaseDrivers {
				if strings.HasPrefix(path, d) {
					t.Errorf("%s imports %s: the commands that verify with no database link no driver", file, path)
				}
			}
		}
	}
}
