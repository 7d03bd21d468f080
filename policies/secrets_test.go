package policies_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

const secretsEgress = `"egress_destinations": {"default": [], "teams": {"payments": ["api.example.test:443", "other.example.test:443"]}}`

// TestDecideSecretBindings: an admitted run carries the bindings of the
// secrets it asked for, as the revision that decided has them (header
// canonical, format defaulted); a denied one names the rule; a stored
// secret's absence from input.secrets denies it.
func TestDecideSecretBindings(t *testing.T) {
	dir := copyBundle(t)
	editData(t, dir, `"egress_destinations": {"default": [], "teams": {}}`, secretsEgress)
	editData(t, dir, `"secrets": {}`, `"secrets": {
		"demo": {"teams": ["payments"], "destinations": ["api.example.test:443"], "header": "authorization", "format": "Bearer {value}", "env": "DEMO_TOKEN"},
		"raw": {"teams": ["payments"], "destinations": ["api.example.test:443"], "header": "X-Api-Key", "env": "RAW_KEY"}}`)
	e := newEngine(t, policies.Options{Dir: dir})
	n, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}, Network: "egress",
		Egress: []string{"api.example.test:443"}, Secrets: []string{"raw", "demo"}}, e.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	in := sandgate.AdmissionInput{
		Operation: sandgate.OperationRun,
		Principal: sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}},
		Request:   n,
		Secrets:   map[string]sandgate.SecretState{"demo": {Version: 2}, "raw": {Version: 1}},
	}
	d, err := e.Decide(context.Background(), in)
	if err != nil || !d.Allow {
		t.Fatalf("decision %+v %v", d.Violations, err)
	}
	want := []sandgate.SecretBinding{
		{Name: "raw", Teams: []string{"payments"}, Destinations: []string{"api.example.test:443"}, Header: "X-Api-Key", Format: "{value}", Env: "RAW_KEY"},
		{Name: "demo", Teams: []string{"payments"}, Destinations: []string{"api.example.test:443"}, Header: "Authorization", Format: "Bearer {value}", Env: "DEMO_TOKEN"},
	}
	if diff := cmp.Diff(want, d.Enforcement.Secrets); diff != "" {
		t.Errorf("bindings (-want +got):\n%s", diff)
	}
	in.Secrets = map[string]sandgate.SecretState{"demo": {Version: 2}}
	d, _ = e.Decide(context.Background(), in)
	if d.Allow || !strings.Contains(strings.Join(ruleNames(d.Violations), ","), "secret_exists") {
		t.Errorf("raw not stored: %+v", d.Violations)
	}
	in.Principal.Team = "search"
	d, _ = e.Decide(context.Background(), in)
	if d.Allow || !strings.Contains(strings.Join(ruleNames(d.Violations), ","), "secret_team") {
		t.Errorf("another team: %+v", d.Violations)
	}
}

// TestSecretsDataChecked: a secrets entry the proxy could not use as
// written refuses the whole bundle, naming the entry.
func TestSecretsDataChecked(t *testing.T) {
	ok := `"teams": ["payments"], "destinations": ["api.example.test:443"], "header": "Authorization", "env": "DEMO_TOKEN"`
	for name, bad := range map[string]string{
		"bad name":            `"Demo": {` + ok + `}`,
		"no destinations":     `"demo": {"teams": [], "destinations": [], "header": "Authorization", "env": "T"}`,
		"not normalised":      `"demo": {"teams": [], "destinations": ["API.example.test:443"], "header": "Authorization", "env": "T"}`,
		"no port":             `"demo": {"teams": [], "destinations": ["api.example.test"], "header": "Authorization", "env": "T"}`,
		"header Host":         `"demo": {"teams": [], "destinations": ["api.example.test:443"], "header": "host", "env": "T"}`,
		"header with a space": `"demo": {"teams": [], "destinations": ["api.example.test:443"], "header": "X Key", "env": "T"}`,
		"format without":      `"demo": {"teams": [], "destinations": ["api.example.test:443"], "header": "X-Key", "format": "Bearer", "env": "T"}`,
		"format twice":        `"demo": {"teams": [], "destinations": ["api.example.test:443"], "header": "X-Key", "format": "{value}{value}", "env": "T"}`,
		"format CRLF":         `"demo": {"teams": [], "destinations": ["api.example.test:443"], "header": "X-Key", "format": "{value}\r\nX: 1", "env": "T"}`,
		"env reserved":        `"demo": {"teams": [], "destinations": ["api.example.test:443"], "header": "X-Key", "env": "HTTPS_PROXY"}`,
		"env not a name":      `"demo": {"teams": [], "destinations": ["api.example.test:443"], "header": "X-Key", "env": "1X"}`,
		"unknown field":       `"demo": {` + ok + `, "value": "tok"}`,
		"not an object":       `"demo": ["api.example.test:443"]`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := copyBundle(t)
			editData(t, dir, `"secrets": {}`, `"secrets": {`+bad+`}`)
			_, err := policies.New(context.Background(), policies.Options{Dir: dir})
			if errs, ok := policies.IsPolicyInvalid(err); !ok || !strings.Contains(strings.Join(errs, " "), "data.sandgate.config.secrets") {
				t.Errorf("err = %v; want POLICY-INVALID naming data.sandgate.config.secrets", err)
			}
		})
	}
}
