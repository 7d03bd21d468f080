package sandgate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// TestEventTypesComplete: EventTypes lists every EventType constant of
// event.go, so that a new type is known to the filters the day it is
// added.
func TestEventTypesComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []EventType
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "EventType" {
				continue
			}
			for _, v := range vs.Values {
				lit := v.(*ast.BasicLit)
				s, _ := strconv.Unquote(lit.Value)
				declared = append(declared, EventType(s))
			}
		}
	}
	if len(declared) != len(EventTypes) {
		t.Errorf("event.go declares %d event types, EventTypes lists %d", len(declared), len(EventTypes))
	}
	for _, d := range declared {
		if !d.Known() {
			t.Errorf("%s is not in EventTypes", d)
		}
	}
}
