package sandgate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
	"time"
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

// TestEventConstructors: every event type has its one constructor in
// events.go (a New… function that names the type's constant), so that
// each type is built in one place.
func TestEventConstructors(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]EventType{}
	for _, typ := range EventTypes {
		consts[constName(t, typ)] = typ
	}
	built := map[EventType]string{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || len(fn.Name.Name) < 4 || fn.Name.Name[:3] != "New" || fn.Name.Name == "NewMasker" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if typ, ok := consts[id.Name]; ok {
					if prev, dup := built[typ]; dup && prev != fn.Name.Name {
						t.Errorf("%s is built by %s and %s", typ, prev, fn.Name.Name)
					}
					built[typ] = fn.Name.Name
				}
			}
			return true
		})
	}
	for _, typ := range EventTypes {
		if _, ok := built[typ]; !ok {
			t.Errorf("%s has no constructor in events.go", typ)
		}
	}
	ev := NewSessionEnded(Subject{RunID: "s", Team: "t"}, time.Unix(1, 0), SessionIdle, nil)
	if ev.Type != EventSessionEnded || ev.Outcome != "idle" || ev.Payload["reason"] != "idle" || ev.RunID != "s" || ev.Team != "t" {
		t.Errorf("NewSessionEnded = %+v", ev)
	}
	code := 3
	ev = NewContainerExited(Subject{}, time.Unix(1, 0), Result{Outcome: OutcomeFailed, ExitCode: &code}, nil)
	if ev.ExitCode == nil || *ev.ExitCode != 3 || ev.Outcome != "failed" || ev.ExitCode == &code {
		t.Errorf("NewContainerExited = %+v", ev)
	}
	ev = NewRunFailed(Subject{}, time.Unix(1, 0), Result{}, "why", nil)
	if ev.Outcome != string(OutcomeError) || ev.Payload["error"] != "why" {
		t.Errorf("NewRunFailed = %+v", ev)
	}
}

// constName is the name of typ's constant in event.go.
func constName(t *testing.T, typ EventType) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Value == strconv.Quote(string(typ)) {
					return vs.Names[i].Name
				}
			}
		}
	}
	t.Fatalf("no constant for %s", typ)
	return ""
}
