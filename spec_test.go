package sandgate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

func TestDecodeRunSpec(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantCode  sandgate.ErrorCode
		wantField string
	}{
		{name: "minimal", body: `{"command":["true"]}`},
		{name: "unknown field is named", body: `{"command":["true"],"comand":["x"]}`, wantCode: sandgate.CodeInvalidRequest, wantField: "comand"},
		{name: "wrong type is named", body: `{"command":"true"}`, wantCode: sandgate.CodeInvalidRequest, wantField: "command"},
		{name: "nested wrong type is named", body: `{"command":["true"],"resources":{"memory_mb":"lots"}}`, wantCode: sandgate.CodeInvalidRequest, wantField: "resources.memory_mb"},
		{name: "trailing data", body: `{"command":["true"]} {}`, wantCode: sandgate.CodeInvalidRequest, wantField: "body"},
		{name: "empty body", body: ` `, wantCode: sandgate.CodeInvalidRequest, wantField: "body"},
		{name: "truncated", body: `{"command":["true"`, wantCode: sandgate.CodeInvalidRequest, wantField: "body"},
		{name: "not an object", body: `[1,2]`, wantCode: sandgate.CodeInvalidRequest, wantField: "body"},
		{name: "invalid UTF-8", body: "{\"command\":[\"\xff\xfe\"]}", wantCode: sandgate.CodeInvalidRequest, wantField: "body"},
		{name: "server-owned uid", body: `{"command":["true"],"uid":0}`, wantCode: sandgate.CodeInvalidRequest, wantField: "uid"},
		{name: "server-owned security", body: `{"command":["true"],"security":{}}`, wantCode: sandgate.CodeInvalidRequest, wantField: "security"},
		{name: "server-owned resolved mount", body: `{"command":["true"],"mounts":[{"source":"/srv","target":"/w","resolved":"/"}]}`, wantCode: sandgate.CodeInvalidRequest, wantField: "mounts[0].resolved"},
		{name: "too large", body: `{"command":["` + strings.Repeat("a", sandgate.MaxSpecBytes) + `"]}`, wantCode: sandgate.CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := sandgate.DecodeRunSpec(strings.NewReader(tt.body))
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("DecodeRunSpec: %v", err)
				}
				if diff := cmp.Diff([]string{"true"}, spec.Command); diff != "" {
					t.Errorf("command (-want +got):\n%s", diff)
				}
				return
			}
			var se *sandgate.Error
			if !errors.As(err, &se) {
				t.Fatalf("DecodeRunSpec error = %v, want *sandgate.Error %s", err, tt.wantCode)
			}
			if se.Code != tt.wantCode || se.Field != tt.wantField {
				t.Errorf("error = code %s field %q (%v), want code %s field %q", se.Code, se.Field, err, tt.wantCode, tt.wantField)
			}
		})
	}
}
