package e2e

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// findAgent is a shell snippet that sets $a to the PID of the session's
// agent (the process whose command name is "agent").
const findAgent = `a=; for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = agent ] && a=${p#/proc/}; done; `

// TestSessionAgentKilledFromInside: code in the sandbox may kill the
// agent (it runs as the same user); the session then ends with its
// reason, and the command that was running is recorded as lost, never
// left running or silently dropped.
func TestSessionAgentKilledFromInside(t *testing.T) {
	s := startServer(t)
	c := s.Client
	ss := openSession(t, c, api.SessionRequest{})
	long, err := c.Exec(context.Background(), ss.ID, api.ExecRequest{Command: []string{"sleep", "60"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	killer, err := c.Exec(context.Background(), ss.ID, api.ExecRequest{Command: []string{"sh", "-c", findAgent + `sleep 0.3; kill -9 $a; sleep 30`}}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ended := waitSessionEnded(t, c, ss.ID, 30*time.Second)
	if ended.EndReason == sandgate.SessionDeleted || ended.EndReason == "" {
		t.Errorf("session ended with %q", ended.EndReason)
	}
	for _, id := range []string{long.ID, killer.ID} {
		v := s.waitFinished(t, id, 30*time.Second)
		if outcomeOf(v) != sandgate.OutcomeLost {
			t.Errorf("command %s: outcome %s, want lost", id, outcomeOf(v))
		}
		evs := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {id}}, func(evs []sandgate.AuditRecord) bool {
			return hasEvent(evs, sandgate.EventRunLost)
		})
		if !hasEvent(evs, sandgate.EventContainerStarted) {
			t.Errorf("command %s: no container.started (%s)", id, eventTypes(evs))
		}
	}
	if ev := s.sessionEndEvent(t, ss.ID); ev.Outcome == "" {
		t.Errorf("session.ended without a reason: %+v", ev)
	}
}

// TestSessionAgentCannotBeDriven: code in the sandbox cannot read the
// agent's memory, environment or file descriptors (it is not dumpable),
// and what it writes into the container's stdio is not a frame the agent
// takes: either the write is refused, or the agent refuses the stream and
// the session ends. No command it tried to smuggle in runs.
func TestSessionAgentCannotBeDriven(t *testing.T) {
	s := startServer(t)
	c := s.Client
	ss := openSession(t, c, api.SessionRequest{})
	r := execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", findAgent +
		`[ -n "$a" ] || echo no-agent; ls /proc/$a/fd/ >/dev/null 2>&1 && echo fds; cat /proc/$a/environ >/dev/null 2>&1 && echo environ; ` +
		`head -c 1 /proc/$a/mem >/dev/null 2>&1 && echo mem; echo checked`}})
	if r.Stdout.Data != "checked\n" {
		t.Fatalf("the agent is open to the sandbox: %q", r.Stdout.Data)
	}
	// A start frame of a made-up key, and garbage, into the stdin of the
	// container's init (the agent's stdin), then the same into stdout.
	forged := `printf '\002\000\000\000\001\000\000\000\000\000\000\000\002\000\000\000\046{"argv":["touch","/workspace/pwned"]}' `
	r = execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c",
		forged + `>/proc/1/fd/0 2>/dev/null && echo wrote-stdin; ` + forged + `>/proc/1/fd/1 2>/dev/null && echo wrote-stdout; sleep 1; echo done`}, TimeoutSeconds: 20})
	if outcomeOf(r) != sandgate.OutcomeLost {
		// Nothing reached the agent: it runs on, and nothing ran.
		if outcomeOf(r) != sandgate.OutcomeSucceeded || strings.Contains(r.Stdout.Data, "wrote") {
			t.Errorf("the forging command: %s %q, yet the session is open", outcomeOf(r), r.Stdout.Data)
		}
		p := execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "ls /workspace/pwned 2>/dev/null; true"}})
		if p.Stdout.Data != "" {
			t.Errorf("a forged command ran: %q", p.Stdout.Data)
		}
		return
	}
	// The agent or the gateway refused the stream: the session fails
	// closed (it does not stay open with an agent no command reaches),
	// and the command is recorded as lost with it: started and lost, or,
	// when the stream broke before the agent's word that it started,
	// lost as a command that may have run.
	got := waitSessionEnded(t, c, ss.ID, 30*time.Second)
	t.Logf("the forged frames ended the session (%s); the command: %s %q", got.EndReason, outcomeOf(r), r.Stdout.Data)
	if got.EndReason == sandgate.SessionDeleted || got.Error == nil {
		t.Errorf("session ended with %q, error %+v; want the agent's end named", got.EndReason, got.Error)
	}
	evs := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {r.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventRunLost)
	})
	if !hasEvent(evs, sandgate.EventContainerStarted) {
		for _, ev := range evs {
			if msg, _ := ev.Payload["error"].(string); ev.Type == sandgate.EventRunLost && !strings.Contains(msg, "may have run") {
				t.Errorf("the forging command: lost without container.started, and not as a command that may have run: %s", ev.Payload)
			}
		}
	}
}

// TestWarmSession: with a warm pool, a session is opened in a warm
// session container (its agent dialled, its workspace mounted): files go
// in and out of its workspace, commands run, and deleting it removes the
// container and its workspace like a cold session's.
func TestWarmSession(t *testing.T) {
	s := startServer(t, withEnv("SANDGATE_WARM_POOL", "1"))
	c := s.Client
	deadline := time.Now().Add(2 * time.Minute)
	for warmIdle(t, s.Node) != servedProfiles {
		if time.Now().After(deadline) {
			t.Fatal("the warm pool did not fill within 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx := context.Background()
	ss := openSession(t, c, api.SessionRequest{})
	evs := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {ss.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventSessionCreated)
	})
	warm := false
	for _, ev := range evs {
		if ev.Type == sandgate.EventContainerCreated {
			_, warm = ev.Payload["warm_pool"]
		}
	}
	if !warm {
		t.Fatalf("the session was not opened in a warm container (%s)", eventTypes(evs))
	}
	if _, err := c.PutFile(ctx, ss.ID, "in.txt", 0o644, strings.NewReader("warm\n")); err != nil {
		t.Fatal(err)
	}
	// A reaper pass (the API's, with running orphans) leaves the open warm
	// session, its workspace and the idle warm containers alone.
	if status, _, body := s.do(t, http.MethodPost, "/v1/sandboxes/cleanup", ""); status != http.StatusOK || !strings.Contains(string(body), `"count":0`) {
		t.Fatalf("cleanup: %d %s", status, body)
	}
	r := execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "cat in.txt; pwd; id -u; echo out > out.txt"}})
	if want := "warm\n" + ss.Spec.Workdir + "\n10001\n"; outcomeOf(r) != sandgate.OutcomeSucceeded || r.Stdout.Data != want {
		t.Errorf("command: %s %q, want %q", outcomeOf(r), r.Stdout.Data, want)
	}
	// A command's usage is the kernel's account of its processes.
	if u := r.Usage; u == nil || u.Source != sandgate.UsageRusage || u.CPUMS == nil || u.CPUUserMS == nil {
		t.Errorf("command usage %+v, want rusage with CPU time", u)
	}
	var buf strings.Builder
	if kind, err := c.GetFiles(ctx, ss.ID, "out.txt", &buf); err != nil || kind != "file" || buf.String() != "out\n" {
		t.Errorf("get out.txt: %q %q %v", kind, buf.String(), err)
	}
	if _, err := c.DeleteSession(ctx, ss.ID); err != nil {
		t.Fatal(err)
	}
	if got := waitSessionEnded(t, c, ss.ID, 30*time.Second); got.EndReason != sandgate.SessionDeleted {
		t.Errorf("ended with %q", got.EndReason)
	}
	s.waitAuditEvents(t, s.Token, url.Values{"run_id": {ss.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventContainerRemoved)
	})
	if n := countContainers(t, sandgate.LabelNode, s.Node); n != servedProfiles {
		t.Errorf("%d containers of the node after the delete, want the %d warm ones", n, servedProfiles)
	}
}

// TestSessionAgentExitsAtOnce: a session whose agent exits at once (here
// a static binary that is not sandgate's agent) is refused by
// POST /v1/sessions with the executor's error, never answered 201 and
// ended afterwards; the session is recorded as ended with its reason.
func TestSessionAgentExitsAtOnce(t *testing.T) {
	busybox := "/bin/busybox"
	if !static(busybox) {
		if os.Getenv("CI") == "true" {
			t.Fatal("no static busybox on this host to stand for an agent that exits at once (bootstrap installs busybox-static; CI=true)")
		}
		t.Skip("no static busybox on this host to stand for an agent that exits at once")
	}
	s := startServer(t, withEnv("SANDGATE_AGENT_BINARY", busybox))
	c := s.Client
	_, err := c.CreateSession(context.Background(), api.SessionRequest{})
	if sandgate.ErrorCodeOf(err) != sandgate.CodeContainerCreate {
		t.Fatalf("create = %v, want %s", err, sandgate.CodeContainerCreate)
	}
	list, err := c.Sessions(context.Background(), "", 10)
	if err != nil || len(list.Sessions) != 1 {
		t.Fatalf("sessions %+v %v", list, err)
	}
	if ss := list.Sessions[0]; ss.State != sandgate.SessionEnded || ss.EndReason != sandgate.SessionError {
		t.Errorf("the session: %s %s, want ended with reason error", ss.State, ss.EndReason)
	}
}
