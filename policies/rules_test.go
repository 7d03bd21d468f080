package policies_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// TestDecideRules runs every default rule through the engine, with real
// normalisation, in both directions.
func TestDecideRules(t *testing.T) {
	root := resolvedDir(t)
	work := filepath.Join(root, "work")
	evil := work + "-evil"
	// The principal's team is payments: it may mount under work/payments
	// alone.
	own, other := filepath.Join(work, "payments"), filepath.Join(work, "search")
	outside := resolvedDir(t)
	for _, d := range []string{work, own, filepath.Join(own, "proj"), other, filepath.Join(other, "proj"), own + "-evil", evil} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustSymlink(t, "/etc", filepath.Join(own, "etc-link"))
	mustSymlink(t, filepath.Join(own, "proj"), filepath.Join(own, "proj-link"))
	mustSymlink(t, filepath.Join(other, "proj"), filepath.Join(own, "other-team-link"))
	mustSymlink(t, outside, filepath.Join(own, "outside-link"))
	sock := filepath.Join(own, "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	mustSymlink(t, sock, filepath.Join(own, "innocent"))

	e := newEngine(t, policies.Options{Settings: sandgate.Settings{MountRoots: []string{work}}})

	mount := func(src string) []sandgate.Mount { return []sandgate.Mount{{Source: src, Target: "/workspace"}} }
	with := func(f func(*sandgate.RunSpec)) sandgate.RunSpec {
		s := baseSpec()
		f(&s)
		return s
	}
	tests := []struct {
		name string
		spec sandgate.RunSpec
		// deny lists the deny rules expected; none means allowed.
		deny []string
	}{
		{"defaults", baseSpec(), nil},
		{"privileged", with(func(s *sandgate.RunSpec) { s.Privileged = true }), []string{"no_privileged"}},

		{"user numeric", with(func(s *sandgate.RunSpec) { s.User = "10001:10001" }), nil},
		{"user other numeric", with(func(s *sandgate.RunSpec) { s.User = "20000:20000" }), nil},
		{"user uid only", with(func(s *sandgate.RunSpec) { s.User = "20000" }), []string{"numeric_group"}},
		{"user group name", with(func(s *sandgate.RunSpec) { s.User = "10001:docker" }), []string{"numeric_group"}},
		{"user gid 0", with(func(s *sandgate.RunSpec) { s.User = "10001:0" }), []string{"privileged_group"}},
		{"user gid 000", with(func(s *sandgate.RunSpec) { s.User = "10001:000" }), []string{"privileged_group"}},
		{"user gid shadow", with(func(s *sandgate.RunSpec) { s.User = "10001:42" }), []string{"privileged_group"}},
		{"user 0", with(func(s *sandgate.RunSpec) { s.User = "0" }), []string{"non_root_user", "numeric_group"}},
		{"user 00", with(func(s *sandgate.RunSpec) { s.User = "00" }), []string{"non_root_user", "numeric_group"}},
		{"user 0:0", with(func(s *sandgate.RunSpec) { s.User = "0:0" }), []string{"non_root_user", "privileged_group"}},
		{"user 0000:1000", with(func(s *sandgate.RunSpec) { s.User = "0000:1000" }), []string{"non_root_user"}},
		{"user root", with(func(s *sandgate.RunSpec) { s.User = "root" }), []string{"non_root_user", "numeric_group"}},
		{"user root:root", with(func(s *sandgate.RunSpec) { s.User = "root:root" }), []string{"non_root_user", "numeric_group"}},
		{"user name", with(func(s *sandgate.RunSpec) { s.User = "nobody" }), []string{"non_root_user", "numeric_group"}},

		{"mount in team dir", with(func(s *sandgate.RunSpec) { s.Mounts = mount(filepath.Join(own, "proj")) }), nil},
		{"mount the team dir itself", with(func(s *sandgate.RunSpec) { s.Mounts = mount(own) }), nil},
		{"mount link within team dir", with(func(s *sandgate.RunSpec) { s.Mounts = mount(filepath.Join(own, "proj-link")) }), nil},
		{"mount with trailing slash and dots", with(func(s *sandgate.RunSpec) { s.Mounts = mount(own + "//proj/./") }), nil},
		{"mount the root itself", with(func(s *sandgate.RunSpec) { s.Mounts = mount(work) }), []string{"mount_outside_team_dir"}},
		{"mount another team's dir", with(func(s *sandgate.RunSpec) { s.Mounts = mount(filepath.Join(other, "proj")) }), []string{"mount_outside_team_dir"}},
		{"link to another team's dir", with(func(s *sandgate.RunSpec) { s.Mounts = mount(filepath.Join(own, "other-team-link")) }), []string{"mount_outside_team_dir"}},
		{"traversal into another team's dir", with(func(s *sandgate.RunSpec) { s.Mounts = mount(own + "/../search/proj") }), []string{"mount_outside_team_dir"}},
		{"team name prefix trick", with(func(s *sandgate.RunSpec) { s.Mounts = mount(own + "-evil") }), []string{"mount_outside_team_dir"}},
		{"string prefix trick", with(func(s *sandgate.RunSpec) { s.Mounts = mount(evil) }), []string{"mount_outside_roots"}},
		{"traversal", with(func(s *sandgate.RunSpec) { s.Mounts = mount(own + "/proj/../../../../../../../etc") }), []string{"mount_outside_roots", "no_sensitive_mounts"}},
		{"traversal out of root", with(func(s *sandgate.RunSpec) { s.Mounts = mount(work + "/../work-evil") }), []string{"mount_outside_roots"}},
		{"symlink escape to /etc", with(func(s *sandgate.RunSpec) { s.Mounts = mount(filepath.Join(own, "etc-link")) }), []string{"mount_outside_roots", "no_sensitive_mounts"}},
		{"symlink escape out of root", with(func(s *sandgate.RunSpec) { s.Mounts = mount(filepath.Join(own, "outside-link")) }), []string{"mount_outside_roots"}},
		{"//etc", with(func(s *sandgate.RunSpec) { s.Mounts = mount("//etc") }), []string{"mount_outside_roots", "no_sensitive_mounts"}},
		{"/etc/", with(func(s *sandgate.RunSpec) { s.Mounts = mount("/etc/") }), []string{"mount_outside_roots", "no_sensitive_mounts"}},
		{"/./etc", with(func(s *sandgate.RunSpec) { s.Mounts = mount("/./etc") }), []string{"mount_outside_roots", "no_sensitive_mounts"}},
		{"host root", with(func(s *sandgate.RunSpec) { s.Mounts = mount("/") }), []string{"mount_outside_roots", "no_sensitive_mounts"}},
		{"/proc", with(func(s *sandgate.RunSpec) { s.Mounts = mount("/proc/self") }), []string{"mount_outside_roots", "no_sensitive_mounts"}},
		{"docker socket in root", with(func(s *sandgate.RunSpec) { s.Mounts = mount(sock) }), []string{"no_docker_socket"}},
		{"docker socket behind a link", with(func(s *sandgate.RunSpec) { s.Mounts = mount(filepath.Join(own, "innocent")) }), []string{"no_docker_socket"}},
		{"shared propagation", with(func(s *sandgate.RunSpec) {
			s.Mounts = []sandgate.Mount{{Source: own, Target: "/w", Propagation: "RShared"}}
		}), []string{"mount_propagation"}},
		{"slave propagation", with(func(s *sandgate.RunSpec) {
			s.Mounts = []sandgate.Mount{{Source: own, Target: "/w", Propagation: "slave"}}
		}), []string{"mount_propagation"}},
		{"unknown propagation", with(func(s *sandgate.RunSpec) {
			s.Mounts = []sandgate.Mount{{Source: own, Target: "/w", Propagation: "sideways"}}
		}), []string{"mount_propagation"}},
		{"private propagation", with(func(s *sandgate.RunSpec) {
			s.Mounts = []sandgate.Mount{{Source: own, Target: "/w", Propagation: "rprivate"}}
		}), nil},

		{"volume plain name", with(func(s *sandgate.RunSpec) { s.Volumes = []sandgate.Volume{{Name: "npm-cache", Target: "/cache"}} }), nil},
		{"volume name /etc", with(func(s *sandgate.RunSpec) { s.Volumes = []sandgate.Volume{{Name: "/etc", Target: "/cache"}} }), []string{"volume_name"}},
		{"volume name ../x", with(func(s *sandgate.RunSpec) { s.Volumes = []sandgate.Volume{{Name: "../x", Target: "/cache"}} }), []string{"volume_name"}},
		{"volume name a/b", with(func(s *sandgate.RunSpec) { s.Volumes = []sandgate.Volume{{Name: "a/b", Target: "/cache"}} }), []string{"volume_name"}},
		{"volume name with a dot", with(func(s *sandgate.RunSpec) { s.Volumes = []sandgate.Volume{{Name: "npm.cache", Target: "/cache"}} }), []string{"volume_name"}},

		{"network none", with(func(s *sandgate.RunSpec) { s.Network = "none" }), nil},
		{"network bridge", with(func(s *sandgate.RunSpec) { s.Network = "bridge" }), nil},
		{"network host", with(func(s *sandgate.RunSpec) { s.Network = "host" }), []string{"no_host_network"}},
		{"network HOST", with(func(s *sandgate.RunSpec) { s.Network = "HOST" }), []string{"no_host_network"}},
		{"network container", with(func(s *sandgate.RunSpec) { s.Network = "container:abc" }), []string{"network_allowlist"}},

		{"pid host", with(func(s *sandgate.RunSpec) { s.PIDMode = "host" }), []string{"host_pid"}},
		{"ipc host", with(func(s *sandgate.RunSpec) { s.IPCMode = "host" }), []string{"host_ipc"}},
		{"ipc private", with(func(s *sandgate.RunSpec) { s.IPCMode = "private" }), nil},
		{"ipc none", with(func(s *sandgate.RunSpec) { s.IPCMode = "none" }), nil},
		{"ipc NONE", with(func(s *sandgate.RunSpec) { s.IPCMode = "NONE" }), []string{"host_ipc"}},
		{"ipc shareable", with(func(s *sandgate.RunSpec) { s.IPCMode = "shareable" }), []string{"host_ipc"}},
		{"uts host", with(func(s *sandgate.RunSpec) { s.UTSMode = "host" }), []string{"host_uts"}},
		{"userns host", with(func(s *sandgate.RunSpec) { s.UsernsMode = "host" }), []string{"host_userns"}},

		{"cap NET_BIND_SERVICE", with(func(s *sandgate.RunSpec) { s.CapAdd, s.Network = []string{"NET_BIND_SERVICE"}, "bridge" }), nil},
		{"cap cap_net_bind_service", with(func(s *sandgate.RunSpec) { s.CapAdd, s.Network = []string{"cap_net_bind_service"}, "bridge" }), nil},
		{"cap NET_BIND_SERVICE without a network", with(func(s *sandgate.RunSpec) { s.CapAdd = []string{"NET_BIND_SERVICE"} }), []string{"capability_needs_network"}},
		{"cap CAP_SYS_ADMIN", with(func(s *sandgate.RunSpec) { s.CapAdd = []string{"CAP_SYS_ADMIN"} }), []string{"capabilities"}},
		{"cap sys_admin", with(func(s *sandgate.RunSpec) { s.CapAdd = []string{"sys_admin"} }), []string{"capabilities"}},
		{"cap ALL", with(func(s *sandgate.RunSpec) { s.CapAdd = []string{"ALL"} }), []string{"capabilities"}},

		{"devices", with(func(s *sandgate.RunSpec) { s.Devices = []string{"/dev/fuse"} }), []string{"no_devices"}},
		{"safe sysctl", with(func(s *sandgate.RunSpec) { s.Sysctls = map[string]string{"net.ipv4.tcp_syncookies": "1"} }), nil},
		{"unsafe sysctl", with(func(s *sandgate.RunSpec) { s.Sysctls = map[string]string{"kernel.sysrq": "1"} }), []string{"sysctls"}},

		{"seccomp default profile", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"seccomp=default"} }), nil},
		{"seccomp runtime/default", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"seccomp:runtime/default"} }), nil},
		{"seccomp builtin", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"seccomp=builtin"} }), []string{"seccomp_profile"}},
		{"seccomp profile file", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"seccomp=/etc/permissive.json"} }), []string{"seccomp_profile"}},
		{"apparmor default", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"apparmor=docker-default"} }), nil},
		{"apparmor other profile", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"apparmor=my-profile"} }), []string{"apparmor_profile"}},
		{"label=type:spc_t", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"label=type:spc_t"} }), []string{"selinux_disabled"}},
		{"label:TYPE:UNCONFINED_T", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"label:TYPE:UNCONFINED_T"} }), []string{"selinux_disabled"}},
		{"label=level:s0", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"label=level:s0"} }), []string{"selinux_label"}},
		{"systempaths=other", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"systempaths=other"} }), []string{"systempaths_unconfined"}},
		{"seccomp=unconfined", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"seccomp=unconfined"} }), []string{"seccomp_unconfined"}},
		{"seccomp:unconfined", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"seccomp:unconfined"} }), []string{"seccomp_unconfined"}},
		{"apparmor=unconfined", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"apparmor=unconfined"} }), []string{"apparmor_unconfined"}},
		{"label=disable", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"label=disable"} }), []string{"selinux_disabled"}},
		{"systempaths=unconfined", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"systempaths=unconfined"} }), []string{"systempaths_unconfined"}},
		{"no-new-privileges", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"no-new-privileges"} }), nil},
		{"no-new-privileges=false", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"no-new-privileges=false"} }), []string{"no_new_privileges"}},
		{"no-new-privileges:false", with(func(s *sandgate.RunSpec) { s.SecurityOpt = []string{"no-new-privileges:false"} }), []string{"no_new_privileges"}},

		{"read-only rootfs", with(func(s *sandgate.RunSpec) { s.ReadOnlyRootfs = boolPtr(true) }), nil},
		{"writable rootfs", with(func(s *sandgate.RunSpec) { s.ReadOnlyRootfs = boolPtr(false) }), []string{"read_only_rootfs"}},

		{"limits at maxima", with(func(s *sandgate.RunSpec) {
			s.Resources = sandgate.Resources{MemoryMB: 4096, CPUs: 4, Pids: 1024, TmpfsMB: 1024, Nofile: 65536}
			s.TimeoutSeconds, s.OutputLimitBytes = 3600, 16<<20
		}), nil},
		{"limits at minima", with(func(s *sandgate.RunSpec) {
			s.Resources = sandgate.Resources{MemoryMB: 6, CPUs: 0.01, Pids: 2, TmpfsMB: 1, Nofile: 64}
			s.TimeoutSeconds, s.OutputLimitBytes = 1, 1
		}), nil},
		{"memory 1", with(func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 1 }), []string{"memory_limit"}},
		{"cpus 0.001", with(func(s *sandgate.RunSpec) { s.Resources.CPUs = 0.001 }), []string{"cpu_limit"}},
		{"pids 1", with(func(s *sandgate.RunSpec) { s.Resources.Pids = 1 }), []string{"pids_limit"}},
		{"nofile 8", with(func(s *sandgate.RunSpec) { s.Resources.Nofile = 8 }), []string{"nofile_limit"}},
		{"memory over", with(func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 4097 }), []string{"memory_limit"}},
		{"cpus over", with(func(s *sandgate.RunSpec) { s.Resources.CPUs = 4.5 }), []string{"cpu_limit"}},
		{"pids over", with(func(s *sandgate.RunSpec) { s.Resources.Pids = 1025 }), []string{"pids_limit"}},
		{"tmpfs over", with(func(s *sandgate.RunSpec) { s.Resources.TmpfsMB = 1025 }), []string{"tmpfs_limit"}},
		{"nofile over", with(func(s *sandgate.RunSpec) { s.Resources.Nofile = 65537 }), []string{"nofile_limit"}},
		{"timeout over", with(func(s *sandgate.RunSpec) { s.TimeoutSeconds = 3601 }), []string{"timeout_limit"}},
		{"output over", with(func(s *sandgate.RunSpec) { s.OutputLimitBytes = 16<<20 + 1 }), []string{"output_limit"}},

		{"image default", with(func(s *sandgate.RunSpec) { s.Image = "sandgate/sandbox:latest" }), nil},
		{"image hub spelling", with(func(s *sandgate.RunSpec) { s.Image = "docker.io/sandgate/sandbox:1" }), nil},
		{"image other repo", with(func(s *sandgate.RunSpec) { s.Image = "alpine:3" }), []string{"image_allowlist"}},
		{"image other registry", with(func(s *sandgate.RunSpec) { s.Image = "evil.example/sandgate/sandbox" }), []string{"image_allowlist"}},
		{"image other repository of the namespace", with(func(s *sandgate.RunSpec) { s.Image = "sandgate/anything:latest" }), []string{"image_allowlist"}},
		{"image with an empty tag", with(func(s *sandgate.RunSpec) { s.Image = "sandgate/sandbox:" }), []string{"image_reference"}},
		{"pull always", with(func(s *sandgate.RunSpec) { s.PullPolicy = sandgate.PullAlways }), []string{"image_pull_registry"}},
		{"pull if not present", with(func(s *sandgate.RunSpec) { s.PullPolicy = sandgate.PullIfNotPresent }), []string{"image_pull_registry"}},

		{"ports", with(func(s *sandgate.RunSpec) { s.Ports = []string{"8080:80"} }), []string{"no_published_ports"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(t, e, tt.spec)
			want := tt.deny
			if want == nil {
				want = []string{}
			}
			if diff := cmp.Diff(want, ruleNames(d.Violations)); diff != "" {
				t.Errorf("deny rules (-want +got):\n%s\nviolations: %+v", diff, d.Violations)
			}
			if d.Allow != (len(tt.deny) == 0) {
				t.Errorf("Allow = %v, want %v", d.Allow, len(tt.deny) == 0)
			}
			for _, v := range d.Violations {
				if v.Message == "" || len(v.Controls) == 0 || v.Action != "deny" {
					t.Errorf("incomplete violation %+v", v)
				}
			}
		})
	}
}

// TestDockerSocketSpellings judges the Docker socket by its resolved path
// in both the spellings a host may resolve it to; on a host where the
// socket exists, normalisation resolves /var/run/docker.sock itself.
func TestDockerSocketSpellings(t *testing.T) {
	e := newEngine(t, policies.Options{Settings: sandgate.Settings{MountRoots: []string{"/"}}})
	for _, p := range []string{"/var/run/docker.sock", "/run/docker.sock"} {
		t.Run("resolved "+p, func(t *testing.T) {
			spec, err := sandgate.Normalize(baseSpec(), e.Defaults())
			if err != nil {
				t.Fatal(err)
			}
			spec.Mounts = []sandgate.Mount{{Source: p, Target: "/var/run/docker.sock", Resolved: p}}
			d := decideNormalized(t, e, spec)
			if d.Allow || !contains(ruleNames(d.Violations), "no_docker_socket") {
				t.Errorf("socket %s: allow=%v violations %+v", p, d.Allow, d.Violations)
			}
		})
		t.Run("requested "+p, func(t *testing.T) {
			s := baseSpec()
			s.Mounts = []sandgate.Mount{{Source: p, Target: "/sock"}}
			n, err := sandgate.Normalize(s, e.Defaults())
			if err != nil {
				// No socket on this host: normalisation refuses the
				// mount, which is a refusal too.
				if sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
					t.Fatalf("Normalize: %v", err)
				}
				return
			}
			d := decideNormalized(t, e, n)
			if d.Allow || !contains(ruleNames(d.Violations), "no_docker_socket") {
				t.Errorf("socket %s (resolved %s): allow=%v violations %+v", p, n.Mounts[0].Resolved, d.Allow, d.Violations)
			}
		})
	}
}

// TestNormalizeRefusesNUL shows that a NUL byte never reaches policy.
func TestNormalizeRefusesNUL(t *testing.T) {
	for _, src := range []string{"/srv/work\x00/etc", "/etc\x00", "\x00"} {
		s := baseSpec()
		s.Mounts = []sandgate.Mount{{Source: src, Target: "/w"}}
		_, err := sandgate.Normalize(s, sandgate.BuiltinDefaults)
		var se *sandgate.Error
		if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest || se.Field != "mounts[0].source" {
			t.Errorf("Normalize(%q) = %v, want INVALID-REQUEST on mounts[0].source", src, err)
		}
	}
}

// TestNoMountRoots refuses every bind mount when no root is configured.
func TestNoMountRoots(t *testing.T) {
	e := newEngine(t, policies.Options{})
	s := baseSpec()
	s.Mounts = []sandgate.Mount{{Source: resolvedDir(t), Target: "/w"}}
	d := decide(t, e, s)
	if diff := cmp.Diff([]string{"mount_outside_roots"}, ruleNames(d.Violations)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestAirGapped forces network none and pull policy never by mutation and
// evaluates the mutated spec again.
func TestAirGapped(t *testing.T) {
	e := newEngine(t, policies.Options{Settings: sandgate.Settings{AirGapped: true}})
	tests := []struct {
		name          string
		spec          sandgate.RunSpec
		wantAllow     bool
		wantMutations []string
	}{
		{"compliant", baseSpec(), true, []string{}},
		{"bridge and always", func() sandgate.RunSpec {
			s := baseSpec()
			s.Network, s.PullPolicy = "bridge", sandgate.PullAlways
			return s
		}(), true, []string{"air_gapped_network", "air_gapped_pull"}},
		{"host stays denied", func() sandgate.RunSpec {
			s := baseSpec()
			s.Network = "host"
			return s
		}(), false, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(t, e, tt.spec)
			if d.Allow != tt.wantAllow {
				t.Errorf("Allow = %v, want %v (%+v)", d.Allow, tt.wantAllow, d.Violations)
			}
			got := []string{}
			for _, m := range d.Mutations {
				got = append(got, m.Rule)
			}
			if diff := cmp.Diff(tt.wantMutations, got); diff != "" {
				t.Errorf("mutations (-want +got):\n%s", diff)
			}
			if d.Allow && (d.Spec.Network != "none" || d.Spec.PullPolicy != sandgate.PullNever) {
				t.Errorf("admitted spec has network %q, pull policy %q", d.Spec.Network, d.Spec.PullPolicy)
			}
		})
	}
}

// TestAirGappedFromInput lets a caller's input add air-gapped mode.
func TestAirGappedFromInput(t *testing.T) {
	e := newEngine(t, policies.Options{})
	s := baseSpec()
	s.Network = "bridge"
	n, err := sandgate.Normalize(s, e.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Decide(context.Background(), sandgate.AdmissionInput{Request: n, Settings: sandgate.Settings{AirGapped: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allow || d.Spec.Network != "none" {
		t.Errorf("allow=%v network=%q, want an admitted spec with network none", d.Allow, d.Spec.Network)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
