package executor_test

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
)

// TestSandboxWgetTimeout runs busybox's wget with a timeout in the default
// sandbox image, as a run behind the egress proxy would: a wget built
// without FEATURE_WGET_TIMEOUT dies of SIGSEGV (exit 139) on -T whatever
// happens, where the user should read why the fetch failed. Each form of
// the option ends with wget's own exit code and message: a refused port
// at once, a server that accepts and never answers at the timeout.
func TestSandboxWgetTimeout(t *testing.T) {
	ex, _ := newTestExecutor(t, nil)
	// A listener on the container's loopback that accepts and stays
	// silent: nc reads its reply from a pipe that stays open.
	stalled := "(sleep 30 | nc -l -p 8080 >/dev/null) & sleep 0.3; "
	for _, tc := range []struct {
		name, script, want string
	}{
		{"-T 3, port closed", "wget -T 3 -O /dev/null http://127.0.0.1:1/", "can't connect"},
		{"-T3, port closed", "wget -T3 -O /dev/null http://127.0.0.1:1/", "can't connect"},
		{"--timeout=3, port closed", "wget --timeout=3 -O /dev/null http://127.0.0.1:1/", "can't connect"},
		{"-T 1, server silent", stalled + "wget -T 1 -O /dev/null http://127.0.0.1:8080/", "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := execute(t, ex, newJob(t, func(s *sandgate.RunSpec) { s.TimeoutSeconds = 60 }, "sh", "-c", tc.script))
			stderr := text(res.Stderr)
			if code := exitCode(res); code != 1 || !strings.Contains(stderr, "wget: ") || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d (outcome %s), stderr %q; want exit 1 with wget's message %q", code, res.Outcome, stderr, tc.want)
			}
		})
	}
}
