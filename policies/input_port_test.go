package policies

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sandgate/sandgate"
)

// TestInputValuePortMatchesJSON: a port connection's input (operation
// port, the session named, input.port.number) and one naming secrets too
// convert as encoding/json writes sandgate.AdmissionInput.
func TestInputValuePortMatchesJSON(t *testing.T) {
	spec, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}}, sandgate.BuiltinDefaults)
	if err != nil {
		t.Fatal(err)
	}
	for name, secrets := range map[string]map[string]sandgate.SecretState{"port": nil, "port and secrets": {"demo": {Version: 2}}} {
		t.Run(name, func(t *testing.T) {
			in := sandgate.AdmissionInput{APIVersion: sandgate.APIVersion, Operation: sandgate.OperationPort,
				Principal: sandgate.Principal{Name: "a", Team: "t"}, Request: spec, Settings: sandgate.Settings{},
				Session: &sandgate.SessionInput{ID: "s-1"}, Port: &sandgate.PortInput{Number: 8080}, Secrets: secrets}
			raw, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&doc); err != nil {
				t.Fatal(err)
			}
			want, err := ast.InterfaceToValue(doc)
			if err != nil {
				t.Fatal(err)
			}
			got := withPort(withSecrets(withSession(inputValue(in.APIVersion, in.Operation, in.Principal, in.Request.RunSpec, settingsTerm(in.Settings)), in.Session), in.Secrets), in.Port)
			if ast.Compare(want, got) != 0 {
				t.Errorf("inputValue differs from the JSON document\nwant %v\n got %v", want, got)
			}
		})
	}
}
