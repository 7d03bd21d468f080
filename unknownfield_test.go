package sandgate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
)

// TestUnknownFieldNamesItsPath holds the decoder to naming a nested
// unknown field by its path in the document, with the known field it was
// probably meant to be, as a newcomer needs to fix the request at once.
func TestUnknownFieldNamesItsPath(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"nested, with a suggestion", `{"command":["true"],"resources":{"memory":512}}`,
			"resources.memory: unknown field; did you mean memory_mb?"},
		{"top level misspelt", `{"comand":["true"]}`, "comand: unknown field; did you mean command?"},
		{"in an array element", `{"command":["true"],"mounts":[{"source":"/a","target":"/b"},{"source":"/c","target":"/d","readonly":true}]}`,
			"mounts[1].readonly: unknown field; did you mean read_only?"},
		{"nothing close", `{"command":["true"],"resources":{"accelerators":1}}`, "resources.accelerators: unknown field"},
		{"timeout in the wrong unit", `{"command":["true"],"timeout":30}`, "timeout: unknown field; did you mean timeout_seconds?"},
		{"a map's value is not walked as fields", `{"command":["true"],"labels":{"memory":"x"},"resources":{"memroy_mb":1}}`,
			"resources.memroy_mb: unknown field; did you mean memory_mb?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sandgate.DecodeRunSpec(strings.NewReader(tt.body))
			var se *sandgate.Error
			if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest {
				t.Fatalf("DecodeRunSpec(%s) = %v, want INVALID-REQUEST", tt.body, err)
			}
			if got := se.Field + ": " + se.Message; got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestUnknownFieldInExecSpec: a session command's body names its path too.
func TestUnknownFieldInExecSpec(t *testing.T) {
	_, err := sandgate.DecodeExecSpec(strings.NewReader(`{"command":["true"],"workdr":"/x"}`))
	var se *sandgate.Error
	if !errors.As(err, &se) || se.Field != "workdr" || !strings.Contains(se.Message, "did you mean workdir?") {
		t.Fatalf("DecodeExecSpec = %v, want workdr with a suggestion of workdir", err)
	}
}
