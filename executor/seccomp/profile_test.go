package seccomp_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/seccomp"
	"github.com/sandgate/sandgate/executor/seccomp/seccomptest"
)

// TestProfileIsDockersDefaultLessDenied: no rule of the profile allows a
// denied call, clone is allowed only under the namespace mask, and
// clone3 fails with ENOSYS.
func TestProfileIsDockersDefaultLessDenied(t *testing.T) {
	raw, err := seccomp.Profile()
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		DefaultAction   string `json:"defaultAction"`
		DefaultErrnoRet int    `json:"defaultErrnoRet"`
		Syscalls        []struct {
			Name     string   `json:"name"`
			Names    []string `json:"names"`
			Action   string   `json:"action"`
			ErrnoRet *int     `json:"errnoRet"`
			Args     []struct {
				Index int    `json:"index"`
				Value uint64 `json:"value"`
				Op    string `json:"op"`
			} `json:"args"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" || p.DefaultErrnoRet != 1 {
		t.Fatalf("default action %s errno %d, want SCMP_ACT_ERRNO EPERM", p.DefaultAction, p.DefaultErrnoRet)
	}
	for _, rule := range p.Syscalls {
		if rule.Name != "" {
			t.Errorf("a rule names %s in the deprecated name field, which the profile does not filter", rule.Name)
		}
		for _, name := range rule.Names {
			switch {
			case name == "clone" && rule.Action == "SCMP_ACT_ALLOW":
				if len(rule.Args) != 1 || rule.Args[0].Op != "SCMP_CMP_MASKED_EQ" || rule.Args[0].Value != 0x7E020000 {
					t.Errorf("clone allowed without the namespace mask: %+v", rule.Args)
				}
			case name == "clone3":
				if rule.Action != "SCMP_ACT_ERRNO" || rule.ErrnoRet == nil || *rule.ErrnoRet != 38 {
					t.Errorf("clone3 rule %s, want ENOSYS", rule.Action)
				}
			case slices.Contains(seccomp.Denied, name) && rule.Action == "SCMP_ACT_ALLOW":
				t.Errorf("%s is allowed by a rule of the profile", name)
			}
		}
	}
}

// TestProbeInSandbox runs the probe, a static program that makes each
// denied call, in a locked-down sandbox (non-root, no capabilities,
// no-new-privileges, read-only root) three ways: unconfined, where the
// calls reach the kernel (so the probe can tell); with Docker's default
// profile, which sandgate used before (io_uring and ptrace pass it); and
// with sandgate's profile, where every denied call fails with EPERM or
// ENOSYS and a plain child process still starts.
func TestProbeInSandbox(t *testing.T) {
	executortest.RequireDocker(t)
	probe, err := seccomptest.BuildProbe()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := seccomp.Profile()
	if err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(profile, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(opt string) map[string]string {
		t.Helper()
		args := []string{"run", "--rm", "--user", "10001:10001", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
			"--read-only", "--network", "none", "-v", probe + ":/probe/probe:ro"}
		if opt != "" {
			args = append(args, "--security-opt", opt)
		}
		out, err := exec.Command("docker", append(args, "sandgate/sandbox:latest", "/probe/probe")...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker run the probe (%s): %v\n%s", opt, err, out)
		}
		return seccomptest.ParseProbe(string(out))
	}

	unconfined := run("seccomp=unconfined")
	for _, name := range []string{"io_uring_setup", "keyctl", "add_key", "open_tree", "clone_newuser"} {
		if unconfined[name] != "OK" {
			t.Errorf("unconfined, %s = %s: the probe cannot tell a filtered call from one the kernel refused", name, unconfined[name])
		}
	}
	if passed := seccomptest.Blocked(run("")); len(passed) > 0 {
		t.Logf("Docker's default profile lets through: %s", strings.Join(passed, " "))
	}
	if wrong := seccomptest.Blocked(run("seccomp=" + profile)); len(wrong) > 0 {
		t.Fatalf("sandgate's profile: %s", strings.Join(wrong, " "))
	}
}
