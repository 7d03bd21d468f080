package sandgate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestDecodeRefusesWhatCannotBeStored: a NUL or an unpaired surrogate in
// any string of a spec, key or value, at any depth, is INVALID-REQUEST
// naming where it is; escaped backslashes and proper pairs are fine.
func TestDecodeRefusesWhatCannotBeStored(t *testing.T) {
	for _, tc := range []struct {
		name, body, field string
	}{
		{"command element", `{"command":["a","b\u0000"]}`, "command[1]"},
		{"label value", `{"command":["a"],"labels":{"k":"\u0000"}}`, "labels.k"},
		{"label key", `{"command":["a"],"labels":{"k\u0000":"v"}}`, "labels.k\\u0000"},
		{"session_id", `{"command":["a"],"session_id":"s\u0000"}`, "session_id"},
		{"sysctl value", `{"command":["a"],"sysctls":{"net.x":"1\u0000"}}`, "sysctls.net.x"},
		{"mount source", `{"command":["a"],"mounts":[{"source":"/x","target":"/w"},{"source":"/\u0000","target":"/v"}]}`, "mounts[1].source"},
		{"resources", `{"command":["a"],"resources":{"memory_mb":1},"user":"\u0000"}`, "user"},
		{"lone high surrogate", `{"command":["\ud800x"]}`, "command[0]"},
		{"lone low surrogate", `{"command":["\udc00"]}`, "command[0]"},
		{"reversed pair", `{"command":["\udc00\ud800"]}`, "command[0]"},
		{"unknown field with NUL", `{"command":["a"],"x\u0000":1}`, "x\\u0000"},
		{"ok: escaped backslash", `{"command":["\\u0000"]}`, ""},
		{"ok: a pair", `{"command":["\ud83d\ude00"]}`, ""},
		{"ok: U+FFFD itself", `{"command":["\ufffd"]}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRunSpec(strings.NewReader(tc.body))
			var se *Error
			if tc.field == "" {
				if err != nil {
					t.Fatalf("DecodeRunSpec = %v, want nil", err)
				}
				return
			}
			if !errors.As(err, &se) || se.Code != CodeInvalidRequest || se.Field != tc.field {
				t.Fatalf("DecodeRunSpec = %#v, want INVALID-REQUEST naming %q", err, tc.field)
			}
		})
	}
}

// TestCheckBounds: every list and map past its maximum, and a string past
// its, is refused naming the field; at the maximum it is accepted.
func TestCheckBounds(t *testing.T) {
	list := func(n int) []string { return strings.Split(strings.Repeat("x,", n)[:2*n-1], ",") }
	kv := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("K%d", i)] = "v"
		}
		return m
	}
	base := RunSpec{Command: []string{"true"}}
	for _, tc := range []struct {
		name  string
		tune  func(*RunSpec)
		field string
	}{
		{"command at max", func(s *RunSpec) { s.Command = list(MaxCommandArgs) }, ""},
		{"command over", func(s *RunSpec) { s.Command = list(MaxCommandArgs + 1) }, "command"},
		{"cap_add over", func(s *RunSpec) { s.CapAdd = list(95000) }, "cap_add"},
		{"devices over", func(s *RunSpec) { s.Devices = list(MaxDevices + 1) }, "devices"},
		{"security_opt over", func(s *RunSpec) { s.SecurityOpt = list(MaxSecurityOpt + 1) }, "security_opt"},
		{"ports over", func(s *RunSpec) { s.Ports = list(MaxPorts + 1) }, "ports"},
		{"env over", func(s *RunSpec) { s.Env = kv(MaxEnv + 1) }, "env"},
		{"env at max", func(s *RunSpec) { s.Env = kv(MaxEnv) }, ""},
		{"labels over", func(s *RunSpec) { s.Labels = kv(MaxLabels + 1) }, "labels"},
		{"sysctls over", func(s *RunSpec) { s.Sysctls = kv(MaxSysctls + 1) }, "sysctls"},
		{"mounts over", func(s *RunSpec) { s.Mounts = make([]Mount, MaxMounts+1) }, "mounts"},
		{"volumes over", func(s *RunSpec) { s.Volumes = make([]Volume, MaxVolumes+1) }, "volumes"},
		{"long image", func(s *RunSpec) { s.Image = strings.Repeat("a", MaxNameBytes+1) }, "image"},
		{"long session", func(s *RunSpec) { s.SessionID = strings.Repeat("a", MaxIDBytes+1) }, "session_id"},
		{"long argument", func(s *RunSpec) { s.Command = []string{strings.Repeat("a", MaxValueBytes+1)} }, "command[0]"},
		{"long label value", func(s *RunSpec) { s.Labels = map[string]string{"k": strings.Repeat("a", MaxValueBytes+1)} }, "labels.k"},
		{"long mount target", func(s *RunSpec) { s.Mounts = []Mount{{Target: strings.Repeat("a", MaxPathBytes+1)}} }, "mounts[0].target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.tune(&s)
			err := s.CheckBounds()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("CheckBounds = %v, want nil", err)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) || se.Code != CodeInvalidRequest || se.Field != tc.field {
				t.Fatalf("CheckBounds = %v, want INVALID-REQUEST naming %q", err, tc.field)
			}
		})
	}
}
