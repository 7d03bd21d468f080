package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
	"github.com/sandgate/sandgate/gateway/api"
)

// The errors that teach: each test is a mistake a newcomer makes against
// a real gateway, and the answer that tells them what to do.

// cliRun is one command line's end: its streams and its exit code.
type cliRun struct {
	stdout, stderr string
	code           int
}

// runCLI runs the sandgate command line with env (SANDGATE_URL and the
// token of the server's development principal unless env sets them).
func runCLI(t *testing.T, s *testServer, env map[string]string, args ...string) cliRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := map[string]string{"SANDGATE_URL": s.URL, "SANDGATE_TOKEN": s.Token}
	for k, v := range env {
		full[k] = v
	}
	var stdout, stderr syncBuffer
	err := cli.Run(ctx, args, cli.Env{Getenv: func(k string) string { return full[k] }, Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr})
	code := 0
	if err != nil {
		code = cli.ExitCode(err, &stderr)
	}
	return cliRun{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// TestSessionMissingProgram: a command whose program is not in the
// session's image ends as a shell would end it, exit 127 with
// `exec: "make": not found` on its stderr, as a plain run's does; not as
// sandgate's own failure (SBX-001, exit 125).
func TestSessionMissingProgram(t *testing.T) {
	s := startServer(t)
	plain := s.submitWait(t, s.Token, `{"command":["make","test"]}`)
	if plain.ExitCode == nil || *plain.ExitCode != 127 {
		t.Errorf("plain run of make: exit %v, want 127", plain.ExitCode)
	}
	ss, err := s.Client.CreateSession(t.Context(), api.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Client.DeleteSession(context.Background(), ss.ID)
	run, err := s.Client.Exec(t.Context(), ss.ID, api.ExecRequest{Command: []string{"make", "test"}}, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome == nil || *run.Outcome != sandgate.OutcomeFailed || run.ExitCode == nil || *run.ExitCode != 127 || run.Error != nil {
		t.Errorf("session command make: outcome %v exit %v error %+v; want failed, 127, no error", run.Outcome, run.ExitCode, run.Error)
	}
	if stderr, _ := run.Stderr.Decode(); !strings.Contains(string(stderr), `exec: "make": not found`) {
		t.Errorf("session command make: stderr %q", stderr)
	}
	// The session goes on, and the CLI exits as the shell would.
	got := runCLI(t, s, nil, "session", "exec", ss.ID, "--", "make", "test")
	if got.code != 127 || !strings.Contains(got.stderr, `exec: "make": not found`) {
		t.Errorf("sandgate session exec -- make test: exit %d, stderr %q; want 127 and the reason", got.code, got.stderr)
	}
	if got := runCLI(t, s, nil, "session", "exec", ss.ID, "--", "true"); got.code != 0 {
		t.Errorf("the session after a missing program: exit %d %s", got.code, got.stderr)
	}
}

// TestUnknownFieldOverHTTP: a nested unknown field is named by its path,
// with the field meant, in the API's answer and in the CLI's.
func TestUnknownFieldOverHTTP(t *testing.T) {
	s := startServer(t)
	status, _, body := s.do(t, http.MethodPost, "/v1/runs", `{"command":["true"],"resources":{"memory":512}}`)
	e := apiError(body).Error
	if status != http.StatusBadRequest || e.Code != sandgate.CodeInvalidRequest ||
		!strings.Contains(e.Message, "resources.memory: unknown field; did you mean memory_mb?") {
		t.Errorf("POST /v1/runs with resources.memory = %d %s", status, body)
	}
}

// TestReloadEmbeddedBundle: a reload of the bundle built into the binary
// does not quietly do nothing; it says how to load a bundle that can be
// reloaded.
func TestReloadEmbeddedBundle(t *testing.T) {
	s := startServer(t)
	status, _, body := s.do(t, http.MethodPost, "/v1/policies/reload", "")
	e := apiError(body).Error
	if status != http.StatusConflict || e.Code != sandgate.CodeConflict || !strings.Contains(e.Message, "SANDGATE_POLICY_DIR") {
		t.Errorf("reload of the embedded bundle = %d %s, want 409 naming SANDGATE_POLICY_DIR", status, body)
	}
}

// TestDevTokenSurvivesRestart: the development token a developer
// exported from `make run` still works after make run is started again.
func TestDevTokenSurvivesRestart(t *testing.T) {
	s := startServer(t)
	first := s.Token
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	again := startServerWithEnv(t, s.Env)
	if again.Token != first {
		t.Fatalf("the restarted gateway printed another token")
	}
	if status, _, body := again.doAs(t, first, http.MethodGet, "/v1/whoami", ""); status != http.StatusOK {
		t.Errorf("the first start's token after a restart = %d %s", status, body)
	}
}
