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
		Resources:      sandgate.Resources{MemoryMB: 256, CPUs: 1, Pids: 256, TmpfsMB: 64, Nofile: 1024},
		TimeoutSeconds: 300, OutputLimitBytes: 1 << 20, PullPolicy: sandgate.PullNever,
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
