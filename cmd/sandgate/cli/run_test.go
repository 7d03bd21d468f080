package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// fakeGatewayAPI answers the gateway endpoints the client commands use. The
// command's first word picks the behaviour: deny, unavailable, or a run
// whose log stream ends as cliExits[word] says.
type fakeGatewayAPI struct {
	// hung is closed by DELETE: the "hang" run's log stream waits for it.
	hung     chan struct{}
	hungOnce sync.Once
	// holdCancel keeps the "hang" run going after its DELETE, as a
	// container that takes its grace period to stop does.
	holdCancel bool
	mu         sync.Mutex
	specs      []sandgate.RunSpec
	headers    []http.Header
	canceled   []string
}

var cliExits = map[string]api.ExitData{
	"ok":      {Outcome: sandgate.OutcomeSucceeded, ExitCode: cliIntPtr(0)},
	"fail":    {Outcome: sandgate.OutcomeFailed, ExitCode: cliIntPtr(3)},
	"timeout": {Outcome: sandgate.OutcomeTimedOut, DurationMS: 2000},
	"oom":     {Outcome: sandgate.OutcomeOOMKilled, ExitCode: cliIntPtr(137), OOMKilled: true},
	"cancel":  {Outcome: sandgate.OutcomeCancelled},
	"error":   {Outcome: sandgate.OutcomeError, Error: &sandgate.ErrorInfo{Code: sandgate.CodeImageUnavailable, Message: "image x is not present"}},
	"trunc":   {Outcome: sandgate.OutcomeSucceeded, ExitCode: cliIntPtr(0), Stdout: api.StreamTotals{Bytes: 5000, Truncated: true}},
}

func cliIntPtr(n int) *int { return &n }

func (f *fakeGatewayAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer tok" {
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: sandgate.CodeUnauthenticated, Message: "the bearer token is not valid"}})
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/v1/runs")
	id, rest, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	word := strings.TrimPrefix(id, "run-")
	switch {
	case r.Method == http.MethodPost && path == "":
		var spec sandgate.RunSpec
		_ = json.NewDecoder(r.Body).Decode(&spec)
		f.mu.Lock()
		f.specs = append(f.specs, spec)
		f.headers = append(f.headers, r.Header.Clone())
		f.mu.Unlock()
		switch spec.Command[0] {
		case "deny":
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{
				Code: sandgate.CodePolicyDenied, Message: "denied by policy", CorrelationID: "corr-1",
				Details: map[string]any{"decision_id": "dec-9", "policy_revision": "sha256:abc", "allow": false,
					"violations": []map[string]any{{"rule": "no_privileged", "message": "privileged mode is forbidden", "controls": []string{"CIS-5.5"}, "action": "deny"}}},
			}})
		case "unavailable":
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: sandgate.CodeAuditUnavailable, Message: "retry later", CorrelationID: "corr-2"}})
		default:
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(api.RunView{ID: "run-" + spec.Command[0], State: sandgate.StatePending, Warnings: []string{"net: bridge"},
				Spec: sandgate.RunSpec{Command: spec.Command, OutputLimitBytes: 4096}})
		}
	case r.Method == http.MethodGet && rest == "logs" && word == "broken" && r.Header.Get("Last-Event-ID") == "3":
		// The resumed stream goes on after event 3.
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "id: 4\nevent: exit\ndata: {\"outcome\":\"failed\",\"exit_code\":4}\n\n")
	case r.Method == http.MethodGet && rest == "logs" && word == "gone" && r.Header.Get("Last-Event-ID") != "":
		// Nothing after the last event, and no end: the stream stays short.
		w.Header().Set("Content-Type", "text/event-stream")
	case r.Method == http.MethodGet && rest == "logs":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "id: 1\nevent: state\ndata: {\"state\":\"running\"}\n\n")
		fmt.Fprintf(w, "id: 2\nevent: stdout\ndata: {\"data\":\"out\\n\",\"encoding\":\"utf-8\"}\n\n")
		fmt.Fprintf(w, "id: 3\nevent: stderr\ndata: {\"data\":\"ZXJyCg==\",\"encoding\":\"base64\"}\n\n")
		if word == "broken" || word == "gone" {
			return
		}
		if word == "hang" {
			w.(http.Flusher).Flush()
			<-f.hung
			fmt.Fprintf(w, "id: 4\nevent: exit\ndata: {\"outcome\":\"cancelled\"}\n\n")
			return
		}
		x, _ := json.Marshal(cliExits[word])
		fmt.Fprintf(w, "id: 4\nevent: exit\ndata: %s\n\n", x)
	case r.Method == http.MethodGet && strings.HasPrefix(id, "run-") && rest == "":
		out := sandgate.OutcomeFailed
		_ = json.NewEncoder(w).Encode(api.RunView{ID: id, State: sandgate.StateFinished, Outcome: &out, ExitCode: cliIntPtr(4),
			Stdout: api.OutputView{Data: "stored out\n", Encoding: "utf-8"}, Stderr: api.OutputView{Data: "stored err\n"}})
	case r.Method == http.MethodGet && path == "":
		out := sandgate.OutcomeSucceeded
		next := "c2"
		_ = json.NewEncoder(w).Encode(api.RunList{Runs: []api.RunView{{ID: "run-a", State: sandgate.StateFinished, Outcome: &out,
			ExitCode: cliIntPtr(0), Principal: "alice", Team: "payments", Spec: sandgate.RunSpec{Command: []string{"echo", "hi"}}}}, NextCursor: &next})
	case r.Method == http.MethodDelete:
		f.mu.Lock()
		f.canceled = append(f.canceled, id)
		f.mu.Unlock()
		if f.hung != nil && !f.holdCancel {
			f.hungOnce.Do(func() { close(f.hung) })
		}
		out := sandgate.OutcomeCancelled
		_ = json.NewEncoder(w).Encode(api.RunView{ID: id, State: sandgate.StateFinished, Outcome: &out})
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: sandgate.CodeNotFound, Message: "run " + id + " not found"}})
	}
}

type cliResult struct {
	stdout, stderr string
	code           int
	message        string
}

// runCLI runs the binary's command tree against the fake API.
func runCLI(t *testing.T, fake *fakeGatewayAPI, token string, stdin string, args ...string) cliResult {
	t.Helper()
	ts := httptest.NewServer(fake)
	defer ts.Close()
	env := map[string]string{"SANDGATE_URL": ts.URL, "SANDGATE_TOKEN": token}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &stdout, &stderr)
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		var ee *ExitError
		if !errors.As(err, &ee) {
			res.code, res.message = 1, err.Error()
		} else {
			res.code, res.message = ee.Code, ee.Message
		}
	}
	return res
}

// TestRunExitCodes checks what `sandgate run` prints and cliExits with for
// each way a run can end.
func TestRunExitCodes(t *testing.T) {
	defer func(d time.Duration) { streamRetryWait = d }(streamRetryWait)
	streamRetryWait = time.Millisecond
	tests := []struct {
		word       string
		wantCode   int
		wantStdout string
		wantStderr string
		wantMsg    string
	}{
		{"ok", 0, "out\n", "sandgate: warning: net: bridge\nerr\n", ""},
		{"fail", 3, "out\n", "sandgate: warning: net: bridge\nerr\n", ""},
		{"timeout", exitTimedOut, "out\n", "sandgate: warning: net: bridge\nerr\n", "run run-timeout timed out after 2s"},
		{"oom", 137, "out\n", "sandgate: warning: net: bridge\nerr\n", "run run-oom was killed: it exceeded its memory limit"},
		{"cancel", exitCancelled, "out\n", "sandgate: warning: net: bridge\nerr\n", "run run-cancel was cancelled"},
		{"error", exitPlatform, "out\n", "sandgate: warning: net: bridge\nerr\n", "run run-error failed: SANDGATE-SBX-002: image x is not present"},
		{"trunc", 0, "out\n", "sandgate: warning: net: bridge\nerr\nsandgate: stdout was truncated at the run's output limit of 4096 bytes (4 KiB); the run produced 5000 bytes. Raise the limit with --output-limit BYTES (output_limit_bytes in the spec), up to the policy's maximum (maxima.output_limit_bytes of GET /v1/config), or write large output to a file and collect it with --artifact\n", ""},
		{"broken", 4, "out\n", "sandgate: warning: net: bridge\nerr\nsandgate: output stream interrupted (it ended before the run did); reconnecting\n", ""},
		{"gone", 4, "out\n", "sandgate: warning: net: bridge\nerr\n" + strings.Repeat("sandgate: output stream interrupted (it ended before the run did); reconnecting\n", 3) + "sandgate: waiting for run run-gone to end\n", ""},
		{"deny", exitDenied, "", "", "run denied by policy (decision dec-9, policy sha256:abc):\n  - no_privileged: privileged mode is forbidden [CIS-5.5]"},
		{"unavailable", exitPlatform, "", "", "SANDGATE-AUDIT-UNAVAILABLE: retry later (correlation ID corr-2)"},
	}
	for _, tc := range tests {
		t.Run(tc.word, func(t *testing.T) {
			got := runCLI(t, &fakeGatewayAPI{}, "tok", "", "run", "--", tc.word, "arg")
			want := cliResult{stdout: tc.wantStdout, stderr: tc.wantStderr, code: tc.wantCode, message: tc.wantMsg}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(cliResult{})); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunFlags checks how the flags become the run spec.
func TestRunFlags(t *testing.T) {
	fake := &fakeGatewayAPI{}
	dir := t.TempDir()
	got := runCLI(t, fake, "tok", "input data", "run", "--image", "img:1", "--env", "A=1", "-e", "HOME", "--mount", dir+":/w:ro",
		"--mount", "/srv/x:/cache", "--network", "bridge", "--memory", "256", "--cpus", "0.5", "--timeout", "90.5s",
		"--label", "ticket=ENG-1", "--session", "s1", "--task", "t1", "--idempotency-key", "k1", "-i", "--detach",
		"sh", "-c", "echo hi")
	if got.code != 0 || got.stdout != "run-sh\n" {
		t.Fatalf("result = %+v", got)
	}
	want := sandgate.RunSpec{
		Image: "img:1", Command: []string{"sh", "-c", "echo hi"}, Stdin: "input data",
		Env:     map[string]string{"A": "1", "HOME": ""},
		Mounts:  []sandgate.Mount{{Source: dir, Target: "/w", ReadOnly: true}, {Source: "/srv/x", Target: "/cache"}},
		Network: "bridge", Resources: sandgate.Resources{MemoryMB: 256, CPUs: 0.5}, TimeoutSeconds: 91,
		SessionID: "s1", TaskID: "t1", Labels: map[string]string{"ticket": "ENG-1"},
	}
	if diff := cmp.Diff(want, fake.specs[0]); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if k := fake.headers[0].Get("Idempotency-Key"); k != "k1" {
		t.Errorf("Idempotency-Key = %q", k)
	}
}

// TestRunUsageErrors checks refusals before anything is sent.
func TestRunUsageErrors(t *testing.T) {
	tests := []struct {
		name  string
		token string
		args  []string
		want  string
	}{
		{"no token", "", []string{"run", "true"}, "SANDGATE_TOKEN is not set: export the bearer token the gateway gave you (make run prints a development one)"},
		{"bad mount", "tok", []string{"run", "--mount", "/a", "true"}, `--mount "/a": want SRC:DST[:ro]`},
		{"bad mount mode", "tok", []string{"run", "--mount", "/a:/b:rx", "true"}, `--mount "/a:/b:rx": want SRC:DST[:ro]`},
		{"bad label", "tok", []string{"run", "--label", "x", "true"}, `--label "x": want K=V`},
		{"negative memory", "tok", []string{"run", "--memory", "-1", "true"}, "--memory must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeGatewayAPI{}
			got := runCLI(t, fake, tc.token, "", tc.args...)
			if got.code != exitPlatform || got.message != tc.want {
				t.Errorf("code %d message %q, want %d %q", got.code, got.message, exitPlatform, tc.want)
			}
			if len(fake.specs) != 0 {
				t.Errorf("a request was sent")
			}
		})
	}
	if got := runCLI(t, &fakeGatewayAPI{}, "wrong", "", "run", "true"); got.code != exitPlatform || !strings.Contains(got.message, "SANDGATE-UNAUTHENTICATED") {
		t.Errorf("wrong token: %+v", got)
	}
}

// TestRunWait checks --wait: no stream, the stored output, the exit code.
func TestRunWait(t *testing.T) {
	got := runCLI(t, &fakeGatewayAPI{}, "tok", "", "run", "--wait", "--", "x")
	want := cliResult{stdout: "stored out\n", stderr: "sandgate: warning: net: bridge\nstored err\n", code: 4}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(cliResult{})); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

// TestRunsCommands checks list, get, cancel and logs.
func TestRunsCommands(t *testing.T) {
	fake := &fakeGatewayAPI{}
	tests := []struct {
		name   string
		args   []string
		want   cliResult
		checks func(t *testing.T, r cliResult)
	}{
		{"list", []string{"runs", "list", "--state", "finished"}, cliResult{}, func(t *testing.T, r cliResult) {
			if !strings.Contains(r.stdout, "run-a") || !strings.Contains(r.stdout, "echo hi") || !strings.HasPrefix(r.stdout, "ID ") {
				t.Errorf("stdout = %q", r.stdout)
			}
			if r.stderr != "more runs: sandgate runs list --cursor c2\n" {
				t.Errorf("stderr = %q", r.stderr)
			}
		}},
		{"list json", []string{"runs", "list", "--json"}, cliResult{}, func(t *testing.T, r cliResult) {
			var l api.RunList
			if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || len(l.Runs) != 1 {
				t.Errorf("stdout = %q, %v", r.stdout, err)
			}
		}},
		{"get", []string{"runs", "get", "run-x"}, cliResult{}, func(t *testing.T, r cliResult) {
			var v api.RunView
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.ID != "run-x" || *v.ExitCode != 4 {
				t.Errorf("stdout = %q, %v", r.stdout, err)
			}
		}},
		{"cancel", []string{"runs", "cancel", "run-y"}, cliResult{}, func(t *testing.T, r cliResult) {
			if r.stdout != "run run-y: cancelled\n" || len(fake.canceled) != 1 {
				t.Errorf("stdout = %q, canceled %v", r.stdout, fake.canceled)
			}
		}},
		{"logs", []string{"runs", "logs", "-f", "run-ok"}, cliResult{}, func(t *testing.T, r cliResult) {
			if r.stdout != "out\n" || r.stderr != "err\n" {
				t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
			}
		}},
		{"bad since", []string{"runs", "list", "--since", "yesterday"}, cliResult{}, func(t *testing.T, r cliResult) {
			if r.code != exitUsage || !strings.Contains(r.message, "neither an RFC 3339 time nor a duration") {
				t.Errorf("result = %+v", r)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, fake, "tok", "", tc.args...)
			if tc.name != "bad since" && r.code != 0 {
				t.Fatalf("code %d: %s", r.code, r.message)
			}
			tc.checks(t, r)
		})
	}
	got := runCLI(t, fake, "tok", "", "runs", "get", "missing/../x")
	if got.code != 1 || !strings.Contains(got.message, "SANDGATE-NOT-FOUND") {
		t.Errorf("missing run: %+v", got)
	}
}

// TestRunsLogsExitCode: sandgate runs logs exits as sandgate run does once
// the run has ended: with the run's code, or sandgate's codes for the rest.
func TestRunsLogsExitCode(t *testing.T) {
	fake := &fakeGatewayAPI{}
	for word, want := range map[string]int{"ok": 0, "fail": 3, "timeout": exitTimedOut, "oom": 137, "cancel": exitCancelled, "error": exitPlatform} {
		got := runCLI(t, fake, "tok", "", "runs", "logs", "-f", "run-"+word)
		if got.code != want || got.stdout != "out\n" {
			t.Errorf("runs logs -f run-%s: exit %d stdout %q (%s), want %d", word, got.code, got.stdout, got.message, want)
		}
	}
}

// TestRunInterrupt checks that an interrupt cancels the run and that the
// command still reports its end.
func TestRunInterrupt(t *testing.T) {
	fake := &fakeGatewayAPI{hung: make(chan struct{})}
	ts := httptest.NewServer(fake)
	defer ts.Close()
	env := map[string]string{"SANDGATE_URL": ts.URL, "SANDGATE_TOKEN": "tok"}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"run", "--", "hang"}, func(k string) string { return env[k] }, strings.NewReader(""), &stdout, &stderr)
	}()
	// Interrupt once the output has arrived.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(stdout.String(), "out") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after the interrupt")
	}
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != exitCancelled {
		t.Fatalf("err = %v, want exit %d", err, exitCancelled)
	}
	if !strings.Contains(stderr.String(), "sandgate: cancelling run run-hang") {
		t.Errorf("stderr = %q", stderr.String())
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if diff := cmp.Diff([]string{"run-hang"}, fake.canceled); diff != "" {
		t.Errorf("cancelled (-want +got):\n%s", diff)
	}
}

// TestRunSecondInterrupt: a Ctrl-C while the run is being stopped is
// answered with what the command is waiting for, and the command still
// ends with the run's end.
func TestRunSecondInterrupt(t *testing.T) {
	fake := &fakeGatewayAPI{hung: make(chan struct{}), holdCancel: true}
	ts := httptest.NewServer(fake)
	defer ts.Close()
	env := map[string]string{"SANDGATE_URL": ts.URL, "SANDGATE_TOKEN": "tok"}
	ctx, cancel := context.WithCancel(context.Background())
	interrupts := make(chan os.Signal, 1)
	var stdout, stderr lockedBuffer
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, []string{"run", "--", "hang"}, Env{Getenv: func(k string) string { return env[k] },
			Stdout: &stdout, Stderr: &stderr, Interrupts: interrupts})
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: stderr %q", what, stderr.String())
			}
		}
	}
	waitFor("the output", func() bool { return strings.Contains(stdout.String(), "out") })
	cancel()
	waitFor("the cancel", func() bool {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return len(fake.canceled) == 1
	})
	interrupts <- os.Interrupt
	waitFor("the second Ctrl-C answered", func() bool {
		return strings.Contains(stderr.String(), "sandgate: still waiting for run run-hang to stop: the gateway sends SIGTERM, waits 10 s, then SIGKILL")
	})
	fake.hungOnce.Do(func() { close(fake.hung) })
	select {
	case err := <-errc:
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != exitCancelled {
			t.Fatalf("err = %v, want exit %d", err, exitCancelled)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return once the run ended")
	}
}

// lockedBuffer is a bytes.Buffer safe to read while a command writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunEgressFlag: --egress lists the destinations and, without
// --network, makes the run's network egress; session create has it too.
func TestRunEgressFlag(t *testing.T) {
	if newSessionCreateCmd(&app{}).Flags().Lookup("egress") == nil {
		t.Errorf("sandgate session create has no --egress")
	}
	a := &app{getenv: func(string) string { return "" }}
	spec, err := buildSpec(a, runOptions{egress: []string{"pypi.org:443", "*.npmjs.org:443"}}, []string{"true"})
	if err != nil || spec.Network != sandgate.NetworkEgress || len(spec.Egress) != 2 {
		t.Errorf("spec network %q egress %v, %v", spec.Network, spec.Egress, err)
	}
	spec, _ = buildSpec(a, runOptions{network: "bridge", egress: []string{"pypi.org:443"}}, []string{"true"})
	if spec.Network != "bridge" {
		t.Errorf("--network bridge --egress gave network %q; the policy judges what was asked", spec.Network)
	}
}
