package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// openSession opens a session through the client and fails the test
// unless it is open.
func openSession(t *testing.T, c *client.Client, spec api.SessionRequest) api.SessionView {
	t.Helper()
	ss, err := c.CreateSession(context.Background(), spec)
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	if ss.State != sandgate.SessionOpen || ss.StartedAt == nil || ss.ContainerID == "" {
		t.Fatalf("session = %+v, want open with a running container", ss)
	}
	return ss
}

// execWait runs a command in a session and waits for its end.
func execWait(t *testing.T, c *client.Client, id string, x api.ExecRequest) api.RunView {
	t.Helper()
	run, err := c.Exec(context.Background(), id, x, 60*time.Second)
	if err != nil {
		t.Fatalf("exec %q: %v", x.Command, err)
	}
	if !run.Finished() {
		t.Fatalf("exec %q did not finish: %+v", x.Command, run)
	}
	return run
}

func outcomeOf(r api.RunView) sandgate.Outcome {
	if r.Outcome == nil {
		return ""
	}
	return *r.Outcome
}

// TestEndToEndSession drives a session through a real gateway, daemon and
// database the way an agent does: many commands sharing files, several at
// once, one cancelled while another goes on, one timed out, files in (a
// file and an archive; a hostile archive refused) and out (a file and a
// directory as tar), every command a run listed with its session, and the
// session deleted with its container; the trail holds all of it.
func TestEndToEndSession(t *testing.T) {
	s := startServer(t)
	c := s.Client
	ctx := context.Background()
	ss := openSession(t, c, api.SessionRequest{IdleTimeoutSeconds: 300, RunSpec: sandgate.RunSpec{Env: map[string]string{"GREETING": "hello"}}})
	if ss.Spec.Workdir != "/workspace" || strings.Join(ss.Spec.Command, " ") != "sleep infinity" {
		t.Errorf("session spec: workdir %q keepalive %q", ss.Spec.Workdir, ss.Spec.Command)
	}

	// Many commands, sharing the workspace and the session's environment.
	r := execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "echo $GREETING $EXTRA > note.txt; id -u; pwd"}, Env: map[string]string{"EXTRA": "world"}})
	if outcomeOf(r) != sandgate.OutcomeSucceeded || r.Stdout.Data != "10001\n/workspace\n" {
		t.Fatalf("first command: %s %q %q", outcomeOf(r), r.Stdout.Data, r.Stderr.Data)
	}
	for i := range 3 {
		r = execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"cat", "note.txt"}})
		if r.Stdout.Data != "hello world\n" {
			t.Fatalf("command %d: stdout %q", i, r.Stdout.Data)
		}
	}
	r = execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "read x; echo got $x; exit 3"}, Stdin: "input\n"})
	if outcomeOf(r) != sandgate.OutcomeFailed || r.ExitCode == nil || *r.ExitCode != 3 || r.Stdout.Data != "got input\n" {
		t.Errorf("exit 3: %s %v %q", outcomeOf(r), r.ExitCode, r.Stdout.Data)
	}
	r = execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "touch /etc/x"}})
	if outcomeOf(r) != sandgate.OutcomeFailed {
		t.Errorf("a write to the read-only root file system: %s, want failed", outcomeOf(r))
	}

	// Several at once.
	var wg sync.WaitGroup
	outs := make([]string, 4)
	for i := range outs {
		wg.Go(func() {
			run, err := c.Exec(ctx, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "sleep 0.5; echo $N"}, Env: map[string]string{"N": string(rune('a' + i))}}, 60*time.Second)
			if err != nil {
				t.Errorf("concurrent exec: %v", err)
				return
			}
			outs[i] = run.Stdout.Data
		})
	}
	wg.Wait()
	if got := strings.Join(outs, ""); got != "a\nb\nc\nd\n" {
		t.Errorf("concurrent commands wrote %q", got)
	}

	// One cancelled while another in the same session goes on.
	long, err := c.Exec(ctx, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "sleep 60; echo never"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Exec(ctx, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "sleep 2; echo other"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sandgatetest.WaitFor(t, "the long command to run", 30*time.Second, func() bool {
		v, ok := s.runState(t, long.ID)
		return ok && v.State == sandgate.StateRunning
	})
	cancelled, err := c.Cancel(ctx, long.ID)
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if outcomeOf(cancelled) != sandgate.OutcomeCancelled || strings.Contains(cancelled.Stdout.Data, "never") {
		t.Errorf("cancelled command: %s %q", outcomeOf(cancelled), cancelled.Stdout.Data)
	}
	// The other command's output, followed live as Server-Sent Events.
	var streamed strings.Builder
	var exit *api.ExitData
	err = c.Logs(ctx, other.ID, true, func(ev api.LogEvent) error {
		switch ev.Event {
		case api.EventStdout:
			b, err := ev.Chunk()
			streamed.Write(b)
			return err
		case api.EventExit:
			x, err := ev.Exit()
			exit = &x
			return err
		}
		return nil
	})
	if err != nil || streamed.String() != "other\n" || exit == nil || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Errorf("logs of the other command: %q exit %+v %v", streamed.String(), exit, err)
	}
	if v := s.waitFinished(t, other.ID, 60*time.Second); outcomeOf(v) != sandgate.OutcomeSucceeded || v.Stdout.Data != "other\n" {
		t.Errorf("the other command: %s %q", outcomeOf(v), v.Stdout.Data)
	}
	r = execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "ps -o comm | grep -c sleep || true"}})
	if r.Stdout.Data != "0\n" {
		t.Errorf("sleep processes left after the cancel: %q, want none (the container's main process is the agent)", r.Stdout.Data)
	}
	r = execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sleep", "30"}, TimeoutSeconds: 1})
	if outcomeOf(r) != sandgate.OutcomeTimedOut {
		t.Errorf("timed-out command: %s", outcomeOf(r))
	}

	// Files in: a file, an archive; a hostile archive is refused whole.
	putOne, err := c.PutFile(ctx, ss.ID, "in/data.txt", 0o644, strings.NewReader("from the agent\n"))
	if sum := sha256.Sum256([]byte("from the agent\n")); err != nil || putOne.SHA256 != hex.EncodeToString(sum[:]) || putOne.Bytes != 15 {
		t.Fatalf("put file: %+v %v, want the content's size and SHA-256", putOne, err)
	}
	put, err := c.PutArchive(ctx, ss.ID, "", "tar", bytes.NewReader(sandgatetest.Tar(t, sandgatetest.TarEntry{Name: "src/a.py", Body: "print(1)\n"}, sandgatetest.TarEntry{Name: "src/b.txt", Body: "b\n"})))
	if err != nil || put.Entries != 2 {
		t.Fatalf("put archive: %+v %v", put, err)
	}
	_, err = c.PutArchive(ctx, ss.ID, "", "tar", bytes.NewReader(sandgatetest.Tar(t, sandgatetest.TarEntry{Name: "ok.txt", Body: "x"}, sandgatetest.TarEntry{Name: "../escape.txt", Body: "x"})))
	if sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
		t.Errorf("hostile archive: %v, want INVALID-REQUEST", err)
	}
	_, err = c.PutArchive(ctx, ss.ID, "", "tar", bytes.NewReader(sandgatetest.Tar(t, sandgatetest.TarEntry{Name: "link", Type: tar.TypeSymlink, Link: "/etc/passwd", Mode: 0o777})))
	if sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
		t.Errorf("archive with a symlink: %v, want INVALID-REQUEST", err)
	}
	r = execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "cat in/data.txt src/b.txt; ls ok.txt 2>&1 | head -c0; mkdir -p out && echo result > out/r.txt && ln -s /etc/passwd out/link"}})
	if r.Stdout.Data != "from the agent\nb\n" {
		t.Errorf("files in: %q %q", r.Stdout.Data, r.Stderr.Data)
	}
	// Files out: a file, and a directory as tar without its symlink.
	var buf bytes.Buffer
	if kind, err := c.GetFiles(ctx, ss.ID, "out/r.txt", &buf); err != nil || kind != "file" || buf.String() != "result\n" {
		t.Errorf("get file: %s %q %v", kind, buf.String(), err)
	}
	buf.Reset()
	kind, err := c.GetFiles(ctx, ss.ID, "out", &buf)
	if err != nil || kind != "tar" {
		t.Fatalf("get dir: %s %v", kind, err)
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "r.txt" {
		t.Errorf("directory tar holds %v, want r.txt alone", names)
	}
	if _, err := c.GetFiles(ctx, ss.ID, "out/link", io.Discard); sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
		t.Errorf("get a symlink: %v, want INVALID-REQUEST", err)
	}
	if _, err := c.GetFiles(ctx, ss.ID, "../../etc/passwd", io.Discard); sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
		t.Errorf("get outside the workspace: %v, want INVALID-REQUEST", err)
	}

	// Every command is a run of the session.
	list, err := c.Runs(ctx, client.ListOptions{SessionID: ss.ID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Runs) < 14 {
		t.Errorf("%d runs listed with session_id %s, want every command", len(list.Runs), ss.ID)
	}
	got, err := c.Session(ctx, ss.ID)
	if err != nil || got.Runs != int64(len(list.Runs)) || got.State != sandgate.SessionOpen {
		t.Errorf("session: runs %d state %s %v, want %d open", got.Runs, got.State, err, len(list.Runs))
	}

	ended, err := c.DeleteSession(ctx, ss.ID)
	if err != nil || ended.State != sandgate.SessionEnded || ended.EndReason != sandgate.SessionDeleted {
		t.Fatalf("delete: %+v %v", ended, err)
	}
	if n := s.nodeContainers(t); n != 0 {
		t.Errorf("%d containers left after the session ended", n)
	}
	if _, err := c.Exec(ctx, ss.ID, api.ExecRequest{Command: []string{"true"}}, 0); sandgate.ErrorCodeOf(err) != sandgate.CodeConflict {
		t.Errorf("exec in an ended session: %v, want CONFLICT", err)
	}

	// The trail: the session's life, each command's, each file operation.
	evs := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {ss.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventSessionEnded) && hasEvent(evs, sandgate.EventContainerRemoved)
	})
	for _, typ := range []sandgate.EventType{sandgate.EventRunRequested, sandgate.EventAdmissionAllowed, sandgate.EventContainerCreated,
		sandgate.EventContainerStarted, sandgate.EventSessionCreated, sandgate.EventSessionFilePut, sandgate.EventSessionFileGet,
		sandgate.EventSessionEnded, sandgate.EventContainerRemoved} {
		if !hasEvent(evs, typ) {
			t.Errorf("no %s event for the session (%s)", typ, eventTypes(evs))
		}
	}
	for _, ev := range evs {
		switch ev.Type {
		case sandgate.EventSessionEnded:
			if ev.Outcome != "deleted" || ev.Payload["reason"] != "deleted" {
				t.Errorf("session.ended: outcome %q payload %v", ev.Outcome, ev.Payload)
			}
		case sandgate.EventSessionFilePut, sandgate.EventSessionFileGet:
			if ev.Outcome == "done" && (ev.Payload["sha256"] == "" || ev.Payload["path"] == nil) {
				t.Errorf("%s without path and digest: %v", ev.Type, ev.Payload)
			}
		}
	}
	cevs := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {long.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventRunCancelled)
	})
	for _, typ := range []sandgate.EventType{sandgate.EventRunRequested, sandgate.EventAdmissionAllowed, sandgate.EventContainerStarted,
		sandgate.EventContainerExited, sandgate.EventRunCancelled} {
		if !hasEvent(cevs, typ) {
			t.Errorf("no %s event for the cancelled command (%s)", typ, eventTypes(cevs))
		}
	}
	for _, ev := range cevs {
		if ev.Type == sandgate.EventContainerStarted && ev.Payload["session_id"] != ss.ID {
			t.Errorf("container.started of a command without its session: %v", ev.Payload)
		}
	}
	if status, _, body := s.do(t, http.MethodGet, "/v1/audit/verify", ""); status != http.StatusOK || !strings.Contains(string(body), `"ok":true`) {
		t.Errorf("verify: %d %s", status, body)
	}
}

// sessionCLI runs the sandgate command line against s with stdin, and
// returns its stdout, stderr and exit code.
func sessionCLI(t *testing.T, s *testServer, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"SANDGATE_URL": s.URL, "SANDGATE_TOKEN": s.Token}
	err := cli.Run(context.Background(), args, cli.Env{Getenv: func(k string) string { return env[k] }, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb})
	if err != nil {
		code := cli.ExitCode(err, &errb)
		return out.String(), errb.String(), code
	}
	return out.String(), errb.String(), 0
}

// TestSessionCLI runs the agent loop of docs/sessions.md with the CLI:
// create, copy a directory in, run commands (their exit codes are the
// CLI's), copy a file out, list, remove.
func TestSessionCLI(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	if err := os.MkdirAll(dir+"/src", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/src/main.sh", []byte("echo built > out.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := sessionCLI(t, s, "", "session", "create", "--idle", "5m", "--env", "MODE=test")
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 36 {
		t.Fatalf("session create: %d %q %q", code, out, errs)
	}
	if _, errs, code := sessionCLI(t, s, "", "session", "cp", dir+"/src/.", id+":"); code != 0 {
		t.Fatalf("session cp in: %d %s", code, errs)
	}
	if out, errs, code := sessionCLI(t, s, "", "session", "exec", id, "--", "sh", "-c", "sh main.sh && echo $MODE"); code != 0 || out != "test\n" {
		t.Errorf("session exec: %d %q %q", code, out, errs)
	}
	if _, _, code := sessionCLI(t, s, "", "session", "exec", id, "--", "sh", "-c", "exit 4"); code != 4 {
		t.Errorf("session exec exit 4: code %d", code)
	}
	if out, _, code := sessionCLI(t, s, "line\n", "session", "exec", "-i", id, "--", "cat"); code != 0 || out != "line\n" {
		t.Errorf("session exec -i: %d %q", code, out)
	}
	if _, errs, code := sessionCLI(t, s, "", "session", "cp", id+":out.txt", dir+"/out.txt"); code != 0 {
		t.Fatalf("session cp out: %d %s", code, errs)
	}
	if b, err := os.ReadFile(dir + "/out.txt"); err != nil || string(b) != "built\n" {
		t.Errorf("copied out: %q %v", b, err)
	}
	if out, _, code := sessionCLI(t, s, "", "session", "ls", "--state", "open"); code != 0 || !strings.Contains(out, id) {
		t.Errorf("session ls: %d %q", code, out)
	}
	if out, _, code := sessionCLI(t, s, "", "runs", "list", "--session", id); code != 0 || strings.Count(out, "\n") != 4 {
		t.Errorf("runs list --session: %d %q, want 3 runs", code, out)
	}
	if out, _, code := sessionCLI(t, s, "", "session", "rm", id); code != 0 || out != id+" ended\n" {
		t.Errorf("session rm: %d %q", code, out)
	}
}
