package main

import (
	"strings"
	"testing"
)

// TestParse merges a block that two test binaries report (covered when
// either reached it) and sums statements per package.
func TestParse(t *testing.T) {
	profile := `mode: atomic
github.com/sandgate/sandgate/audit/a.go:1.1,2.2 3 0
github.com/sandgate/sandgate/audit/a.go:3.1,4.2 2 5
github.com/sandgate/sandgate/runstore/r.go:1.1,2.2 4 0
github.com/sandgate/sandgate/audit/a.go:1.1,2.2 3 1
github.com/sandgate/sandgate/runstore/r.go:1.1,2.2 4 0
`
	pkgs, err := parse(strings.NewReader(profile))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 2 {
		t.Fatalf("%d packages, want 2: %+v", len(pkgs), pkgs)
	}
	if p := pkgs[0]; p.name != "github.com/sandgate/sandgate/runstore" || p.statements != 4 || p.done != 0 {
		t.Errorf("lowest = %+v, want runstore 0 of 4", p)
	}
	if p := pkgs[1]; p.name != "github.com/sandgate/sandgate/audit" || p.statements != 5 || p.done != 5 {
		t.Errorf("second = %+v, want audit 5 of 5", p)
	}
	var out strings.Builder
	report(&out, pkgs, 80)
	if !strings.Contains(out.String(), "runstore  < goal") || !strings.Contains(out.String(), "55.6 %") {
		t.Errorf("report:\n%s", out.String())
	}
	if _, err := parse(strings.NewReader("mode: set\nnot a line\n")); err == nil {
		t.Error("a bad line was accepted")
	}
}
