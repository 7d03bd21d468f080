package policies

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sandgate/sandgate"
)

// TestInputValueMatchesJSON holds the fast input converter to the document
// encoding/json makes of sandgate.AdmissionInput, which is what the docs
// and `sandgate policy eval` show policy authors.
func TestInputValueMatchesJSON(t *testing.T) {
	uid, gid := int64(0), int64(1000)
	ro, mode := false, 0o755
	full := sandgate.RunSpec{
		Image: "sandgate/sandbox:latest", Command: []string{"sh", "-c", "echo hi"}, Stdin: "in",
		Env: map[string]string{"B": "2", "A": "1"}, Workdir: "/w", User: "0000:1000",
		Mounts:  []sandgate.Mount{{Source: "/srv/a", Target: "/a", ReadOnly: true, Propagation: "rshared", Resolved: "/srv/a"}, {Source: "/b", Target: "/b"}},
		Volumes: []sandgate.Volume{{Name: "c", Target: "/c", ReadOnly: true}, {Name: "d", Target: "/d"}},
		Network: "bridge", Resources: sandgate.Resources{MemoryMB: 512, CPUs: 0.25, Pids: 10, TmpfsMB: 1, Nofile: 7, WorkspaceMB: 64},
		TimeoutSeconds: 30, OutputLimitBytes: 1 << 40, PullPolicy: sandgate.PullAlways, SessionID: "s", TaskID: "t",
		Labels: map[string]string{"k": "v"}, Privileged: true, CapAdd: []string{"ALL"}, Devices: []string{"/dev/x"},
		Sysctls: map[string]string{"a.b": "1"}, PIDMode: "host", IPCMode: "host", UTSMode: "host", UsernsMode: "host",
		SecurityOpt: []string{"seccomp=unconfined"}, ReadOnlyRootfs: &ro, Ports: []string{"80"}, UID: &uid, GID: &gid,
		Security:  &sandgate.SecurityOptions{Seccomp: "unconfined", Label: []string{"disable"}},
		Files:     []sandgate.File{{Path: "a", Content: "x", Encoding: "utf8", Mode: &mode}, {Path: "b", Content: "eA=="}},
		Artifacts: []string{"out/**"}, ArtifactLimitBytes: 1 << 20,
		Workspace:   &sandgate.WorkspaceArchive{Format: "zip", SHA256: "ab", ArchiveBytes: 1, Entries: 2, UnpackedBytes: 3},
		CallbackURL: "https://hooks.example.com/done",
		Egress:      []string{"pypi.org:443", "10.2.0.0/16:5432"}, EgressLimits: &sandgate.EgressLimits{Connections: 5, Bytes: 1 << 20},
		Secrets: []string{"demo", "npm"},
	}
	normalized, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}}, sandgate.BuiltinDefaults)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		spec     sandgate.RunSpec
		pr       sandgate.Principal
		settings sandgate.Settings
		session  *sandgate.SessionInput
		secrets  map[string]sandgate.SecretState
	}{
		{"zero", sandgate.RunSpec{}, sandgate.Principal{}, sandgate.Settings{}, nil, nil},
		{"empty lists", sandgate.RunSpec{Command: []string{}, CapAdd: []string{}, Env: map[string]string{}},
			sandgate.Principal{Roles: []sandgate.Role{}}, sandgate.Settings{MountRoots: []string{}}, nil, nil},
		{"normalised", normalized.RunSpec, sandgate.Principal{Name: "a", Team: "t", Roles: []sandgate.Role{"submitter"}}, sandgate.Settings{MountRoots: []string{"/srv"}}, nil, nil},
		{"every field", full, sandgate.Principal{Name: "a", Team: "t", Roles: []sandgate.Role{"admin", "security"}}, sandgate.Settings{AirGapped: true, MountRoots: []string{"/srv", "/x"}}, nil, nil},
		{"session", normalized.RunSpec, sandgate.Principal{Name: "a"}, sandgate.Settings{},
			&sandgate.SessionInput{ID: "s-1", IdleTimeoutSeconds: 60, MaxLifetimeSeconds: 600}, nil},
		{"secrets", full, sandgate.Principal{Name: "a"}, sandgate.Settings{}, nil, map[string]sandgate.SecretState{"demo": {Version: 3}, "npm": {Version: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := sandgate.AdmissionInput{APIVersion: sandgate.APIVersion, Operation: sandgate.OperationReview, Principal: tt.pr, Request: sandgate.Normalized{RunSpec: tt.spec}, Settings: tt.settings, Session: tt.session, Secrets: tt.secrets}
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
			got := withSecrets(withSession(inputValue(in.APIVersion, in.Operation, in.Principal, in.Request.RunSpec, settingsTerm(in.Settings)), in.Session), in.Secrets)
			if ast.Compare(want, got) != 0 {
				t.Errorf("inputValue differs from the JSON document\nwant %v\n got %v", want, got)
			}
		})
	}
}

func TestSetPointer(t *testing.T) {
	tests := []struct {
		name    string
		pointer string
		value   any
		want    any
		wantErr bool
	}{
		{"replace member", "/network", "none", map[string]any{"network": "none", "a": []any{"x"}, "o": map[string]any{"k": 1}}, false},
		{"add missing member", "/pull_policy", "never", map[string]any{"network": "host", "pull_policy": "never", "a": []any{"x"}, "o": map[string]any{"k": 1}}, false},
		{"array element", "/a/0", "y", map[string]any{"network": "host", "a": []any{"y"}, "o": map[string]any{"k": 1}}, false},
		{"nested", "/o/k", 2, map[string]any{"network": "host", "a": []any{"x"}, "o": map[string]any{"k": 2}}, false},
		{"escaped", "/o/a~1b~0", 3, map[string]any{"network": "host", "a": []any{"x"}, "o": map[string]any{"k": 1, "a/b~": 3}}, false},
		{"array out of range", "/a/1", "z", nil, true},
		{"below a scalar", "/network/x", "z", nil, true},
		{"relative", "network", "z", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := map[string]any{"network": "host", "a": []any{"x"}, "o": map[string]any{"k": 1}}
			got, err := setPointer(doc, tt.pointer, tt.value)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzInputValue checks the converter against encoding/json on arbitrary
// strings and numbers.
func FuzzInputValue(f *testing.F) {
	f.Add("sandgate/sandbox", "10001", "/srv/a", int64(512), 1.5, true)
	f.Add("", "", "\x00", int64(-1), 0.0, false)
	f.Fuzz(func(t *testing.T, image, user, path string, n int64, cpus float64, b bool) {
		spec := sandgate.RunSpec{Image: image, User: user, Command: []string{image, user},
			Mounts:    []sandgate.Mount{{Source: path, Target: path, Resolved: path, ReadOnly: b}},
			Resources: sandgate.Resources{MemoryMB: n, CPUs: cpus}, OutputLimitBytes: n, Privileged: b,
			Env: map[string]string{"X": path}}
		if n >= 0 {
			spec.UID = &n
		}
		raw, err := json.Marshal(sandgate.AdmissionInput{Request: sandgate.Normalized{RunSpec: spec}})
		if err != nil {
			return // NaN and infinities have no JSON form
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
		if got := inputValue("", "", sandgate.Principal{}, spec, settingsTerm(sandgate.Settings{})); ast.Compare(want, got) != 0 {
			t.Errorf("inputValue differs\nwant %v\n got %v", want, got)
		}
	})
}
