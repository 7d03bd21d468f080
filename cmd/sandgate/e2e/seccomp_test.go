package e2e

import (
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/seccomp/seccomptest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// probeImage builds an image of the sandbox with the seccomp probe in it
// (sandgate-test/seccomp-probe:<random>), removed when the test ends.
func probeImage(t *testing.T) string {
	t.Helper()
	probe, err := seccomptest.BuildProbe()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.TempDir()
	data, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "probe"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	dockerfile := "FROM sandgate/sandbox:latest\nCOPY probe /usr/local/bin/sandgate-probe\n"
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	image := "sandgate-test/seccomp-probe:" + sandgatetest.RandomHex(t, 4)
	if out, err := exec.Command("docker", "build", "-q", "-t", image, ctx).CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", image, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })
	return image
}

// TestSeccompProfileOnEveryContainer: hostile code in an admitted
// container tries the calls kernel escapes use (io_uring, userfaultfd,
// the keyring, bpf, ptrace, new namespaces, mounts, open_by_handle_at,
// kexec…). Through a serving gateway, in a cold run's container, a warm
// pool member's and a session's (the command started by the in-sandbox
// agent), every one fails with EPERM or ENOSYS, while a plain child
// process starts. Before sandgate's profile, under Docker's default,
// io_uring_setup succeeded and ptrace passed the filter.
func TestSeccompProfileOnEveryContainer(t *testing.T) {
	image := probeImage(t)
	repo, _, _ := strings.Cut(image, ":")
	dir := bundleWith(t, func(cfg map[string]any) {
		cfg["allowed_images"] = append(cfg["allowed_images"].([]any), repo)
		cfg["defaults"].(map[string]any)["image"] = image
	})
	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", dir), withEnv("SANDGATE_WARM_POOL", "1"))
	check := func(what, stdout string) {
		t.Helper()
		got := seccomptest.ParseProbe(stdout)
		if len(got) == 0 {
			t.Fatalf("%s: the probe printed nothing: %q", what, stdout)
		}
		if wrong := seccomptest.Blocked(got); len(wrong) > 0 {
			t.Errorf("%s: %s", what, strings.Join(wrong, " "))
		}
	}

	// Warm: the pool keeps the default image warm.
	sandgatetest.WaitFor(t, "the warm pool to fill", 2*time.Minute, func() bool { return warmIdle(t, s.Node) >= servedProfiles })
	warm := s.submitWait(t, s.Token, `{"command":["/usr/local/bin/sandgate-probe"]}`)
	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {warm.ID}, "type": {string(sandgate.EventContainerCreated)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) > 0 })
	if _, ok := events[0].Payload["warm_pool"]; !ok {
		t.Fatalf("the run was not served by the warm pool: %v", events[0].Payload)
	}
	check("warm run", warm.Stdout.Data)

	// Cold: a run with a file has a workspace, which no warm member has.
	cold := s.submitWait(t, s.Token, `{"command":["/usr/local/bin/sandgate-probe"],"files":[{"path":"x","content":"x"}]}`)
	check("cold run", cold.Stdout.Data)

	// A session: its main process is the agent, and the command the agent
	// starts inherits the container's filter.
	ss := openSession(t, s.Client, api.SessionRequest{RunSpec: sandgate.RunSpec{Image: image}})
	cmd := execWait(t, s.Client, ss.ID, api.ExecRequest{Command: []string{"/usr/local/bin/sandgate-probe"}})
	check("session command", cmd.Stdout.Data)
	if _, err := s.Client.DeleteSession(t.Context(), ss.ID); err != nil {
		t.Fatal(err)
	}
}

// TestSeccompSpecCannotLiftProfile: a spec that asks for another seccomp
// profile, or none, is denied by policy (CIS 5.21/5.22), and the executor
// would refuse it too; "default" is sandgate's profile.
func TestSeccompSpecCannotLiftProfile(t *testing.T) {
	s := startServer(t)
	for _, opt := range []string{"seccomp=unconfined", "seccomp=/etc/my-profile.json"} {
		status, _, body := s.do(t, "POST", "/v1/admission/review", `{"command":["true"],"security_opt":["`+opt+`"]}`)
		var d sandgate.Decision
		if err := json.Unmarshal(body, &d); status != 200 || err != nil || d.Allow {
			t.Fatalf("review of %s = %d %s", opt, status, body)
		}
	}
	probeRun := s.submitWait(t, s.Token, `{"command":["sh","-c","grep Seccomp: /proc/self/status"],"security_opt":["seccomp=default"]}`)
	if !strings.Contains(probeRun.Stdout.Data, "Seccomp:\t2") {
		t.Fatalf("seccomp=default ran without a filter: %q", probeRun.Stdout.Data)
	}
}
