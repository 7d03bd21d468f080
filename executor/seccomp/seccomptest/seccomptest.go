// Package seccomptest builds and reads the seccomp probe for tests: a
// static program that tries, inside a sandbox, every call sandgate's
// profile denies.
package seccomptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/executor/seccomp"
)

var probeOnce struct {
	sync.Once
	path string
	err  error
}

// BuildProbe builds the probe program (executor/seccomp/internal/probe)
// statically (CGO_ENABLED=0) into a temporary directory of its own, once
// per process, and returns its path. Tests mount it read-only into a sandbox and run
// it; its output is one "NAME RESULT" line per call (ParseProbe).
func BuildProbe() (string, error) {
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandgate-seccomp-probe-")
		if err != nil {
			probeOnce.err = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			probeOnce.err = err
			return
		}
		out := filepath.Join(dir, "probe")
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/sandgate/sandgate/executor/seccomp/internal/probe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			probeOnce.err = &exec.Error{Name: "go build probe: " + strings.TrimSpace(string(b)), Err: err}
			return
		}
		probeOnce.path = out
	})
	return probeOnce.path, probeOnce.err
}

// ParseProbe reads the probe's output: the result of each call by name
// ("OK", or the errno's name, "EPERM").
func ParseProbe(out string) map[string]string {
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, res, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			got[name] = res
		}
	}
	return got
}

// Blocked reports whether the probe found every denied call refused by
// the filter (EPERM, or ENOSYS for clone3) and the allowed ones working,
// and lists each call that was not as "name=result".
func Blocked(got map[string]string) []string {
	var wrong []string
	for _, name := range ProbeDenied {
		if r := got[name]; r != "EPERM" && r != "ENOSYS" {
			wrong = append(wrong, name+"="+r)
		}
	}
	for _, name := range ProbeAllowed {
		if r := got[name]; r != "OK" {
			wrong = append(wrong, name+"="+r)
		}
	}
	return wrong
}

// ProbeDenied are the probe's calls the profile must refuse: every name of
// seccomp.Denied but umount (a 32-bit call: 64-bit kernels have umount2
// only), clone with two namespace flags, and a personality the default
// does not list.
var ProbeDenied = func() []string {
	var names []string
	for _, n := range seccomp.Denied {
		if n != "umount" {
			names = append(names, n)
		}
	}
	return append(names, "clone_newuser", "clone_newns", "personality")
}()

// ProbeAllowed are the probe's calls the profile must let through.
var ProbeAllowed = []string{"clone_plain", "getpid"}
