package sandgate_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

func int64p(v int64) *int64 { return &v }

func TestNormalizeDefaults(t *testing.T) {
	got, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}}, sandgate.Defaults{User: "20000:20000", Resources: sandgate.Resources{MemoryMB: 256}})
	if err != nil {
		t.Fatal(err)
	}
	tr := true
	want := sandgate.RunSpec{
		Image: "sandgate/sandbox:latest", Command: []string{"true"}, User: "20000:20000", Network: "none",
		Resources:      sandgate.Resources{MemoryMB: 256, CPUs: 1, Pids: 256, TmpfsMB: 64, Nofile: 1024, WorkspaceMB: 256},
		TimeoutSeconds: 300, OutputLimitBytes: 1 << 20, PullPolicy: sandgate.PullNever, ArtifactLimitBytes: 64 << 20,
		ReadOnlyRootfs: &tr, UID: int64p(20000), GID: int64p(20000),
		Security: &sandgate.SecurityOptions{NoNewPrivileges: true},
	}
	if diff := cmp.Diff(want, got.RunSpec); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNormalizeUser(t *testing.T) {
	tests := []struct {
		user     string
		uid, gid *int64
		wantErr  bool
	}{
		{"10001:10001", int64p(10001), int64p(10001), false},
		{"0", int64p(0), nil, false},
		{"00", int64p(0), nil, false},
		{"0:0", int64p(0), int64p(0), false},
		{"0000:1000", int64p(0), int64p(1000), false},
		{"root", nil, nil, false},
		{"root:0", nil, int64p(0), false},
		{"app:app", nil, nil, false},
		{"-1", nil, nil, false},
		{"99999999999999999999", nil, nil, true},
		{"1:", nil, nil, true},
		{":1", nil, nil, true},
		{"1:2:3", nil, nil, true},
		{"ro ot", nil, nil, true},
		{"0\x00", nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			got, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}, User: tt.user}, sandgate.BuiltinDefaults)
			if tt.wantErr {
				var se *sandgate.Error
				if !errors.As(err, &se) || se.Field != "user" {
					t.Fatalf("err = %v, want a field error on user", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.uid, got.UID); diff != "" {
				t.Errorf("uid (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.gid, got.GID); diff != "" {
				t.Errorf("gid (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNormalizeSecurityOpt(t *testing.T) {
	tests := []struct {
		name    string
		opts    []string
		want    sandgate.SecurityOptions
		wantErr bool
	}{
		{"none", nil, sandgate.SecurityOptions{NoNewPrivileges: true}, false},
		{"seccomp=", []string{"seccomp=unconfined"}, sandgate.SecurityOptions{Seccomp: "unconfined", NoNewPrivileges: true}, false},
		{"seccomp:", []string{"seccomp:Unconfined"}, sandgate.SecurityOptions{Seccomp: "unconfined", NoNewPrivileges: true}, false},
		{"apparmor both", []string{"apparmor=unconfined"}, sandgate.SecurityOptions{AppArmor: "unconfined", NoNewPrivileges: true}, false},
		{"apparmor:", []string{"apparmor:docker-default"}, sandgate.SecurityOptions{AppArmor: "docker-default", NoNewPrivileges: true}, false},
		{"nnp bare", []string{"no-new-privileges"}, sandgate.SecurityOptions{NoNewPrivileges: true}, false},
		{"nnp=false", []string{"no-new-privileges=false"}, sandgate.SecurityOptions{}, false},
		{"nnp:false", []string{"no-new-privileges:false"}, sandgate.SecurityOptions{}, false},
		{"label with colon value", []string{"label=type:container_t", "label:disable"}, sandgate.SecurityOptions{Label: []string{"type:container_t", "disable"}, NoNewPrivileges: true}, false},
		{"systempaths", []string{"systempaths=unconfined"}, sandgate.SecurityOptions{SystemPaths: "unconfined", NoNewPrivileges: true}, false},
		{"unknown", []string{"bogus=1"}, sandgate.SecurityOptions{}, true},
		{"nnp garbage", []string{"no-new-privileges=maybe"}, sandgate.SecurityOptions{}, true},
		{"empty seccomp", []string{"seccomp="}, sandgate.SecurityOptions{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}, SecurityOpt: tt.opts}, sandgate.BuiltinDefaults)
			if tt.wantErr {
				if sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
					t.Fatalf("err = %v, want INVALID-REQUEST", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, *got.Security); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNormalizeCapabilities(t *testing.T) {
	got, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"},
		CapAdd: []string{"CAP_SYS_ADMIN", "sys_admin", " cap_net_bind_service ", "ALL", "Cap_Chown"}}, sandgate.BuiltinDefaults)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"SYS_ADMIN", "SYS_ADMIN", "NET_BIND_SERVICE", "ALL", "CHOWN"}, got.CapAdd); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNormalizeMounts(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(root, "proj")
	if err := os.Mkdir(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(proj, "etc")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		source    string
		want      string
		wantField string
	}{
		{proj, proj, ""},
		{proj + "/", proj, ""},
		{root + "//proj/./", proj, ""},
		{proj + "/../proj", proj, ""},
		{proj + "/etc", "/etc", ""},
		{proj + "/etc/../", proj, ""},
		{"//etc", "/etc", ""},
		{"/./etc/", "/etc", ""},
		{"relative/path", "", "mounts[0].source"},
		{proj + "/missing", "", "mounts[0].source"},
		{proj + "\x00/x", "", "mounts[0].source"},
		{"", "", "mounts[0].source"},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			got, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"},
				Mounts: []sandgate.Mount{{Source: tt.source, Target: "/w/", Propagation: " RPrivate "}}}, sandgate.BuiltinDefaults)
			if tt.wantField != "" {
				var se *sandgate.Error
				if !errors.As(err, &se) || se.Field != tt.wantField {
					t.Fatalf("err = %v, want a field error on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := got.Mounts[0]
			if m.Resolved != tt.want || m.Target != "/w" || m.Propagation != "rprivate" || m.Source != tt.source {
				t.Errorf("mount = %+v, want resolved %s", m, tt.want)
			}
		})
	}
}

// FuzzNormalize feeds arbitrary users, mount sources, security options and
// capabilities through Normalize. Whatever it admits is canonical: mount
// paths absolute, clean and with no symlink left, IDs only for numeric
// users, capabilities upper case without CAP_, and normalising again
// changes nothing.
func FuzzNormalize(f *testing.F) {
	f.Add("10001:10001", "/tmp", "seccomp=unconfined", "cap_sys_admin", "/w")
	f.Add("00", "/tmp/../etc", "no-new-privileges:false", "ALL", "/x/../y")
	f.Add("root", "//etc/", "apparmor:unconfined", " Cap_Chown ", "/")
	f.Add("0000:1000", "/var/run/docker.sock", "label=disable", "NET_BIND_SERVICE", "relative")
	f.Add("a:b:c", "/proc/self/root", "bogus", "\x00", "/w\x00")
	f.Fuzz(func(t *testing.T, user, source, opt, capability, target string) {
		in := sandgate.RunSpec{
			Command:     []string{"true"},
			User:        user,
			Mounts:      []sandgate.Mount{{Source: source, Target: target}},
			SecurityOpt: []string{opt},
			CapAdd:      []string{capability},
		}
		got, err := sandgate.Normalize(in, sandgate.BuiltinDefaults)
		if err != nil {
			var se *sandgate.Error
			if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest || se.Field == "" {
				t.Fatalf("error %v is not an INVALID-REQUEST naming a field", err)
			}
			return
		}
		m := got.Mounts[0]
		if !filepath.IsAbs(m.Resolved) || filepath.Clean(m.Resolved) != m.Resolved || strings.ContainsRune(m.Resolved, 0) {
			t.Fatalf("resolved %q is not a clean absolute path", m.Resolved)
		}
		if again, err := filepath.EvalSymlinks(m.Resolved); err != nil || again != m.Resolved {
			t.Fatalf("resolved %q still resolves to %q (%v)", m.Resolved, again, err)
		}
		if !pathWithin(m.Resolved, m.Resolved) || !pathWithin(m.Resolved, "/") {
			t.Fatalf("PathWithin is wrong for %q", m.Resolved)
		}
		if pathWithin(m.Resolved+"-evil", m.Resolved) && m.Resolved != "/" {
			t.Fatalf("PathWithin admits the string-prefix sibling of %q", m.Resolved)
		}
		name, _, _ := strings.Cut(got.User, ":")
		numeric := name != "" && strings.Trim(name, "0123456789") == ""
		if numeric != (got.UID != nil) {
			t.Fatalf("user %q: uid %v", got.User, got.UID)
		}
		if c := got.CapAdd[0]; c != strings.ToUpper(c) || strings.HasPrefix(c, "CAP_") || strings.TrimSpace(c) != c {
			t.Fatalf("capability %q is not canonical", c)
		}
		again, err := sandgate.Normalize(got.RunSpec, sandgate.BuiltinDefaults)
		if err != nil {
			t.Fatalf("normalising a normalised spec: %v", err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("normalising again changed the spec (-first +second):\n%s", diff)
		}
	})
}

func TestNormalizeWorkspace(t *testing.T) {
	mode := 0o755
	bad := 0o4755
	tests := []struct {
		name      string
		spec      sandgate.RunSpec
		wantField string
		check     func(t *testing.T, s sandgate.RunSpec)
	}{
		{name: "files give a workspace at /workspace", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "./src//main.py", Content: "print(1)"}, {Path: "run.sh", Content: "ZWNobyBoaQo=", Encoding: "base64", Mode: &mode}}},
			check: func(t *testing.T, s sandgate.RunSpec) {
				if s.Workdir != "/workspace" || s.Files[0].Path != "src/main.py" || s.Files[0].Encoding != "utf8" {
					t.Errorf("workdir %q, files %+v", s.Workdir, s.Files)
				}
				if got := string(s.Files[1].Bytes()); got != "echo hi\n" {
					t.Errorf("base64 content decodes to %q", got)
				}
			}},
		{name: "artifacts keep a named workdir", spec: sandgate.RunSpec{Workdir: "/work/", Artifacts: []string{"out/**/*.json", "./report.txt"}},
			check: func(t *testing.T, s sandgate.RunSpec) {
				if s.Workdir != "/work" || s.Artifacts[1] != "report.txt" {
					t.Errorf("workdir %q, artifacts %q", s.Workdir, s.Artifacts)
				}
			}},
		{name: "no workspace, no workdir", spec: sandgate.RunSpec{},
			check: func(t *testing.T, s sandgate.RunSpec) {
				if s.Workdir != "" || s.HasWorkspace() {
					t.Errorf("workdir %q", s.Workdir)
				}
			}},
		{name: "absolute file path", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "/etc/passwd"}}}, wantField: "files[0].path"},
		{name: "dot-dot file path", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "a/../../x"}}}, wantField: "files[0].path"},
		{name: "backslash file path", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "a\\..\\x"}}}, wantField: "files[0].path"},
		{name: "empty file path", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "."}}}, wantField: "files[0].path"},
		{name: "duplicate file path", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "a"}, {Path: "./a"}}}, wantField: "files[1].path"},
		{name: "file inside a file", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "a"}, {Path: "a/b"}}}, wantField: "files[0].path"},
		{name: "unknown encoding", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "a", Encoding: "hex"}}}, wantField: "files[0].encoding"},
		{name: "bad base64", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "a", Content: "!!", Encoding: "base64"}}}, wantField: "files[0].content"},
		{name: "setuid mode", spec: sandgate.RunSpec{Files: []sandgate.File{{Path: "a", Mode: &bad}}}, wantField: "files[0].mode"},
		{name: "artifact outside", spec: sandgate.RunSpec{Artifacts: []string{"../x"}}, wantField: "artifacts[0]"},
		{name: "artifact absolute", spec: sandgate.RunSpec{Artifacts: []string{"/x"}}, wantField: "artifacts[0]"},
		{name: "workspace at the root", spec: sandgate.RunSpec{Workdir: "/", Artifacts: []string{"x"}}, wantField: "workdir"},
		{name: "workspace over /tmp", spec: sandgate.RunSpec{Workdir: "/tmp", Artifacts: []string{"x"}}, wantField: "workdir"},
		{name: "negative artifact limit", spec: sandgate.RunSpec{ArtifactLimitBytes: -1}, wantField: "artifact_limit_bytes"},
		{name: "negative workspace size", spec: sandgate.RunSpec{Resources: sandgate.Resources{WorkspaceMB: -1}}, wantField: "resources.workspace_mb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Command = []string{"true"}
			got, err := sandgate.Normalize(tt.spec, sandgate.BuiltinDefaults)
			if tt.wantField != "" {
				var se *sandgate.Error
				if !errors.As(err, &se) || se.Field != tt.wantField || se.Code != sandgate.CodeInvalidRequest {
					t.Fatalf("err = %v, want INVALID-REQUEST naming %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got.RunSpec)
		})
	}
}

// TestNormalizeLanguage: a request names a language instead of an image;
// sandgate.Normalize replaces it by the image the data maps it to (so policy and
// the trail see the image), and refuses an unknown language or one named
// with an image, naming the field.
func TestNormalizeLanguage(t *testing.T) {
	d := sandgate.Defaults{Languages: map[string]string{"python": "sandgate/python:3", "toolchain": "sandgate/toolchain:1"}}
	n, err := sandgate.Normalize(sandgate.RunSpec{Language: "python", Command: []string{"python3"}}, d)
	if err != nil || n.Image != "sandgate/python:3" || n.Language != "" {
		t.Fatalf("sandgate.Normalize(language python) = image %q language %q, %v", n.Image, n.Language, err)
	}
	// Normalising again (as a mutation does) keeps the image.
	if again, err := sandgate.Normalize(n.RunSpec, d); err != nil || again.Image != n.Image {
		t.Errorf("normalised again = %q, %v", again.Image, err)
	}
	// Without data, the built-in map.
	if n, err := sandgate.Normalize(sandgate.RunSpec{Language: "shell", Command: []string{"true"}}, sandgate.Defaults{}); err != nil || n.Image != sandgate.BuiltinDefaults.Languages["shell"] {
		t.Errorf("built-in shell = %q, %v", n.Image, err)
	}
	for _, tt := range []struct {
		spec sandgate.RunSpec
		want string
	}{
		{sandgate.RunSpec{Language: "cobol", Command: []string{"x"}}, `unknown language "cobol" (the policy maps: python, toolchain)`},
		{sandgate.RunSpec{Language: "python", Image: "busybox", Command: []string{"x"}}, "not both"},
		{sandgate.RunSpec{Language: "PYTHON", Command: []string{"x"}}, "unknown language"},
		// The keys of Go's map are not a path to another entry.
		{sandgate.RunSpec{Language: "python ", Command: []string{"x"}}, "unknown language"},
	} {
		_, err := sandgate.Normalize(tt.spec, d)
		var e *sandgate.Error
		if !errors.As(err, &e) || e.Code != sandgate.CodeInvalidRequest || e.Field != "language" || !strings.Contains(e.Message, tt.want) {
			t.Errorf("sandgate.Normalize(%+v) = %v, want INVALID-REQUEST on language with %q", tt.spec, err, tt.want)
		}
	}
	// Data that maps none ({}) leaves every language unknown.
	if _, err := sandgate.Normalize(sandgate.RunSpec{Language: "shell", Command: []string{"true"}}, sandgate.Defaults{Languages: map[string]string{}}); sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
		t.Errorf("language with an empty map = %v", err)
	}
	// A session names a language too.
	s, _, err := sandgate.NormalizeSession(sandgate.SessionSpec{RunSpec: sandgate.RunSpec{Language: "toolchain"}}, "s1", d)
	if err != nil || s.Image != "sandgate/toolchain:1" {
		t.Errorf("sandgate.NormalizeSession(language toolchain) = %q, %v", s.Image, err)
	}
	if _, _, err := sandgate.NormalizeSession(sandgate.SessionSpec{RunSpec: sandgate.RunSpec{Language: "cobol"}}, "s2", d); sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
		t.Errorf("sandgate.NormalizeSession(language cobol) = %v", err)
	}
}
