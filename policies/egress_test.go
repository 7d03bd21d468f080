package policies_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

func TestDecideEgress(t *testing.T) {
	dir := copyBundle(t)
	editData(t, dir, `"egress_destinations": {"default": [], "teams": {}}`,
		`"egress_destinations": {"default": [], "teams": {"payments": ["127.0.0.1:8080", "*.example.com:443"]}}`)
	e := newEngine(t, policies.Options{Dir: dir})
	in := func(host string, port int, addrs ...string) sandgate.EgressInput {
		return sandgate.EgressInput{RunID: "r1", Principal: "alice", Team: "payments", Host: host, Port: port,
			Addresses: addrs, Egress: []string{"127.0.0.1:8080", "*.example.com:443"}}
	}
	tests := []struct {
		name  string
		in    sandgate.EgressInput
		allow bool
	}{
		{"admitted address", in("127.0.0.1", 8080, "127.0.0.1"), true},
		{"below the wildcard", in("api.example.com", 443, "93.184.216.34"), true},
		{"other port", in("127.0.0.1", 8081, "127.0.0.1"), false},
		{"metadata address", in("api.example.com", 443, "169.254.169.254"), false},
		{"other team", func() sandgate.EgressInput { i := in("127.0.0.1", 8080, "127.0.0.1"); i.Team = "search"; return i }(), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := e.DecideEgress(context.Background(), tc.in)
			if d.Allow != tc.allow || (!d.Allow && len(d.Reasons) == 0) || d.PolicyRevision == "" {
				t.Errorf("decision = %+v; want allow=%v with reasons when refused", d, tc.allow)
			}
		})
	}
	if got := e.Enforcement("payments").EgressPrivateCIDRs; len(got) != 0 {
		t.Errorf("private CIDRs = %v; want none by default", got)
	}
}

func TestEgressDataChecked(t *testing.T) {
	for _, bad := range []string{
		`"egress_destinations": {"default": ["PyPI.org:443"], "teams": {}}`,
		`"egress_destinations": {"default": ["pypi.org"], "teams": {}}`,
		`"egress_destinations": {"default": [], "teams": {"x": ["10.0.0.0/33:1"]}}`,
	} {
		dir := copyBundle(t)
		editData(t, dir, `"egress_destinations": {"default": [], "teams": {}}`, bad)
		_, err := policies.New(context.Background(), policies.Options{Dir: dir})
		if errs, ok := policies.IsPolicyInvalid(err); !ok || !strings.Contains(strings.Join(errs, " "), "egress_destinations") {
			t.Errorf("%s: err = %v; want POLICY-INVALID naming egress_destinations", bad, err)
		}
	}
}
