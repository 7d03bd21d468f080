package policies_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// A violation carries the fix its rule suggests (custom.fix), so that an
// agent told no is told what to do instead.
func TestViolationCarriesFix(t *testing.T) {
	e := newEngine(t, policies.Options{})
	d := decide(t, e, sandgate.RunSpec{Command: []string{"true"}, Privileged: true})
	found := false
	for _, v := range d.Violations {
		if v.Rule == "no_privileged" {
			found = true
			if !strings.Contains(v.Fix, "privileged") {
				t.Fatalf("no_privileged's fix = %q", v.Fix)
			}
		}
	}
	if !found {
		t.Fatalf("no no_privileged violation: %+v", d.Violations)
	}
}

// Terminals and ports are decided with their own operations by the
// default bundle: a terminal allowed, a port admitted or not by
// session_ports.
func TestDecideTerminalAndPort(t *testing.T) {
	e := newEngine(t, policies.Options{})
	n, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"sh"}}, e.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	p := sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}}
	in := sandgate.AdmissionInput{APIVersion: sandgate.APIVersion, Principal: p, Request: n, Session: &sandgate.SessionInput{ID: "s"}}
	for _, c := range []struct {
		op    sandgate.Operation
		port  int
		allow bool
	}{
		{sandgate.OperationTerminal, 0, true},
		{sandgate.OperationPort, 8080, true},
		{sandgate.OperationPort, 22, false},
	} {
		in.Operation, in.Port = c.op, nil
		if c.port != 0 {
			in.Port = &sandgate.PortInput{Number: c.port}
		}
		d, err := e.Decide(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allow != c.allow {
			t.Errorf("%s %d: allow = %v, want %v (%+v)", c.op, c.port, d.Allow, c.allow, d.Violations)
		}
		if !c.allow && (len(d.Violations) == 0 || d.Violations[0].Rule != "session_port_not_admitted" || d.Violations[0].Fix == "") {
			t.Errorf("%s %d: violations %+v", c.op, c.port, d.Violations)
		}
	}
}
