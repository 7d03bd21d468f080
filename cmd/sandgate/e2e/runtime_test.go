package e2e

import (
	"context"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// crunPath is Debian's crun, which bootstrap installs.
func crunPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("crun")
	if err != nil {
		t.Fatalf("crun is not installed (deploy/bootstrap.sh installs it): %v", err)
	}
	return p
}

// runtimeBundle allows team dev runc and crun, and runsc, which no daemon
// here has.
func runtimeBundle(t *testing.T) string {
	return bundleWith(t, func(cfg map[string]any) {
		cfg["runtimes"] = map[string]any{
			"default":      []any{"runc"},
			"teams":        map[string]any{"dev": []any{"runc", "crun", "runsc"}},
			"team_default": map[string]any{},
		}
	})
}

// TestRuntimeByPolicy: on a daemon with Debian's crun registered (a
// private dockerd, in a network namespace of its own), a run that asks
// for crun runs under it (the container's HostConfig says so); a runtime
// off the team's list is denied by policy; one the policy allows but the
// daemon does not have fails with SBX-001 naming the runtime before any
// container is created.
func TestRuntimeByPolicy(t *testing.T) {
	d := startPrivateDockerOpts(t, true, "--add-runtime", "crun="+crunPath(t))
	s := startServer(t, withEnv("DOCKER_HOST", d.Host), withEnv("SANDGATE_POLICY_DIR", runtimeBundle(t)))

	ctx := context.Background()
	v, err := s.Client.Submit(ctx, sandgate.RunSpec{Command: []string{"sleep", "60"}, Runtime: "crun"}, client.SubmitOptions{})
	if err != nil {
		t.Fatalf("submit a crun run: %v", err)
	}
	var runtime string
	sandgatetest.WaitFor(t, "the crun run's container", 60*time.Second, func() bool {
		id := strings.TrimSpace(dockerCLI(t, d.Host, "ps", "-q", "--filter", "label="+sandgate.LabelRunID+"="+v.ID))
		if id == "" {
			return false
		}
		runtime = strings.TrimSpace(dockerCLI(t, d.Host, "inspect", "--format", "{{.HostConfig.Runtime}}", id))
		return true
	})
	if runtime != "crun" {
		t.Fatalf("the run's container has runtime %q, want crun", runtime)
	}
	if _, err := s.Client.Cancel(ctx, v.ID); err != nil {
		t.Fatal(err)
	}

	ok := s.submitWait(t, s.Token, `{"command":["sh","-c","echo under crun"],"runtime":"crun"}`)
	if ok.ExitCode == nil || *ok.ExitCode != 0 || ok.Stdout.Data != "under crun\n" {
		t.Fatalf("crun run: %+v", ok)
	}

	status, _, body := s.do(t, http.MethodPost, "/v1/runs", `{"command":["true"],"runtime":"kata"}`)
	if status != http.StatusForbidden || !strings.Contains(string(body), "runtime_allowlist") {
		t.Fatalf("a runtime off the team's list = %d %s", status, body)
	}

	missing := s.submitWait(t, s.Token, `{"command":["true"],"runtime":"runsc"}`)
	if missing.Error == nil || missing.Error.Code != sandgate.CodeContainerCreate || !strings.Contains(missing.Error.Message, "no runtime runsc") || !strings.Contains(missing.Error.Message, "crun") {
		t.Fatalf("a runtime the daemon lacks: %+v", missing)
	}
	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {missing.ID}}, func(ev []sandgate.AuditRecord) bool {
		return hasEvent(ev, sandgate.EventRunFailed)
	})
	if hasEvent(events, sandgate.EventContainerCreated) {
		t.Fatalf("a container was created for a runtime the daemon lacks: %s", eventTypes(events))
	}
}

// TestRuntimeMissingOnDefaultDaemon: the test daemon has no crun
// registered (bootstrap never reconfigures a daemon it did not start), so
// an admitted crun run fails with the reason, and no container is made.
func TestRuntimeMissingOnDefaultDaemon(t *testing.T) {
	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", runtimeBundle(t)))
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), `"crun"`) {
		t.Skip("the test daemon has crun registered")
	}
	run := s.submitWait(t, s.Token, `{"command":["true"],"runtime":"crun"}`)
	var view api.RunView = run
	if view.Error == nil || view.Error.Code != sandgate.CodeContainerCreate || !strings.Contains(view.Error.Message, "no runtime crun") {
		t.Fatalf("crun on a daemon without it: %+v", view)
	}
}
