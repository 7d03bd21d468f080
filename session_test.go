package sandgate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeSessionSpec(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		field string // "" when it decodes
	}{
		{"empty", `{}`, ""},
		{"limits and keepalive", `{"idle_timeout_seconds":60,"max_lifetime_seconds":600,"keepalive":["sleep","infinity"],"env":{"A":"1"}}`, ""},
		{"command refused", `{"command":["sh"]}`, "command"},
		{"stdin refused", `{"stdin":"x"}`, "stdin"},
		{"artifacts refused", `{"artifacts":["out"]}`, "artifacts"},
		{"callback refused", `{"callback_url":"https://x"}`, "callback_url"},
		{"session_id is the server's", `{"session_id":"s"}`, "session_id"},
		{"negative idle", `{"idle_timeout_seconds":-1}`, "idle_timeout_seconds"},
		{"negative lifetime", `{"max_lifetime_seconds":-1}`, "max_lifetime_seconds"},
		{"keepalive too long", `{"keepalive":[` + strings.Repeat(`"x",`, MaxKeepaliveArgs) + `"x"]}`, "keepalive"},
		{"unknown field", `{"idle":1}`, "idle"},
		{"server-owned uid", `{"uid":1}`, "uid"},
		{"bounded like a run", `{"env":{"` + strings.Repeat("k", MaxNameBytes+1) + `":"v"}}`, "env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeSessionSpec(strings.NewReader(tt.body))
			if tt.field == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			e, ok := err.(*Error)
			if !ok || e.Code != CodeInvalidRequest || !strings.HasPrefix(e.Field, tt.field) {
				t.Errorf("err = %#v, want INVALID-REQUEST naming %s", err, tt.field)
			}
		})
	}
}

func TestNormalizeSession(t *testing.T) {
	d := BuiltinDefaults
	d.SessionKeepalive = map[string][]string{"*": {"sleep", "infinity"}, "sandgate/python": {"python3", "-c", "pause"}, "reg:5000/x:1": {"x1"}}
	tests := []struct {
		name      string
		in        SessionSpec
		keepalive []string
		workdir   string
		limits    SessionLimits
	}{
		{"defaults", SessionSpec{}, []string{"sleep", "infinity"}, "/workspace", SessionLimits{600, 3600}},
		{"image default keepalive", SessionSpec{RunSpec: RunSpec{Image: "sandgate/python:3"}}, []string{"python3", "-c", "pause"}, "/workspace", SessionLimits{600, 3600}},
		{"by repository, pinned", SessionSpec{RunSpec: RunSpec{Image: "sandgate/python@sha256:" + strings.Repeat("a", 64)}}, []string{"python3", "-c", "pause"}, "/workspace", SessionLimits{600, 3600}},
		{"by name without digest, registry port", SessionSpec{RunSpec: RunSpec{Image: "reg:5000/x:1@sha256:" + strings.Repeat("b", 64)}}, []string{"x1"}, "/workspace", SessionLimits{600, 3600}},
		{"registry port, no tag: not the tag's entry", SessionSpec{RunSpec: RunSpec{Image: "reg:5000/x"}}, []string{"sleep", "infinity"}, "/workspace", SessionLimits{600, 3600}},
		{"request keepalive, workdir, limits", SessionSpec{RunSpec: RunSpec{Workdir: "/w"}, Keepalive: []string{"tail", "-f", "/dev/null"}, IdleTimeoutSeconds: 5, MaxLifetimeSeconds: 9},
			[]string{"tail", "-f", "/dev/null"}, "/w", SessionLimits{5, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, lim, err := NormalizeSession(tt.in, "sid", d)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.keepalive, n.Command); diff != "" {
				t.Errorf("keepalive (-want +got):\n%s", diff)
			}
			if n.Workdir != tt.workdir || n.SessionID != "sid" || lim != tt.limits {
				t.Errorf("workdir %q session_id %q limits %+v", n.Workdir, n.SessionID, lim)
			}
		})
	}
	d.SessionKeepalive = map[string][]string{"sandgate/python": {"python3"}}
	if _, _, err := NormalizeSession(SessionSpec{}, "sid", d); err == nil || err.(*Error).Field != "keepalive" {
		t.Errorf("no keepalive for the image: %v, want an error naming keepalive", err)
	}
}

func TestExecRunSpec(t *testing.T) {
	uid := int64(10001)
	session := RunSpec{Image: "img", Command: []string{"sleep", "infinity"}, Env: map[string]string{"S": "hash"},
		Workdir: "/workspace", User: "10001:10001", UID: &uid, TimeoutSeconds: 300, OutputLimitBytes: 100,
		Files: []File{{Path: "a"}}, Mounts: []Mount{{Source: "/srv/x", Target: "/x", Resolved: "/srv/x"}}, SessionID: "sid"}
	got := ExecRunSpec(session, ExecSpec{Command: []string{"make"}, Env: map[string]string{"E": "1"}, Workdir: "src", TimeoutSeconds: 5, TaskID: "t"})
	want := RunSpec{Image: "img", Command: []string{"make"}, Env: map[string]string{"E": "1"}, Workdir: "/workspace/src",
		User: "10001:10001", TimeoutSeconds: 5, OutputLimitBytes: 100, Mounts: []Mount{{Source: "/srv/x", Target: "/x"}}, SessionID: "sid", TaskID: "t"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ExecRunSpec (-want +got):\n%s", diff)
	}
	if session.Mounts[0].Resolved == "" || session.UID == nil {
		t.Errorf("the session's spec was changed")
	}
}
