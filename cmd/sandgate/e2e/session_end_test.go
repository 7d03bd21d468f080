package e2e

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// waitSessionEnded polls a session until it has ended and returns it.
func waitSessionEnded(t *testing.T, c *client.Client, id string, limit time.Duration) api.SessionView {
	t.Helper()
	var ss api.SessionView
	sandgatetest.WaitFor(t, "session "+id+" to end", limit, func() bool {
		var err error
		ss, err = c.Session(context.Background(), id)
		return err == nil && ss.State == sandgate.SessionEnded
	})
	return ss
}

// sessionEndEvent is the session.ended event of a session, once the trail
// has it.
func (s *testServer) sessionEndEvent(t *testing.T, id string) sandgate.AuditRecord {
	t.Helper()
	evs := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {id}, "type": {string(sandgate.EventSessionEnded)}}, func(evs []sandgate.AuditRecord) bool {
		return len(evs) > 0
	})
	return evs[0]
}

// TestSessionExpiry: a session idle for its idle timeout ends with reason
// idle, never while a command runs; one older than its lifetime ends with
// reason lifetime however busy; each is recorded and leaves no container.
func TestSessionExpiry(t *testing.T) {
	s := startServer(t)
	c := s.Client
	idle := openSession(t, c, api.SessionRequest{IdleTimeoutSeconds: 2, MaxLifetimeSeconds: 120})
	// A command longer than the idle timeout keeps the session open.
	r := execWait(t, c, idle.ID, api.ExecRequest{Command: []string{"sh", "-c", "sleep 3; echo still here"}})
	if outcomeOf(r) != sandgate.OutcomeSucceeded || r.Stdout.Data != "still here\n" {
		t.Fatalf("command longer than the idle timeout: %s %q", outcomeOf(r), r.Stdout.Data)
	}
	life := openSession(t, c, api.SessionRequest{IdleTimeoutSeconds: 120, MaxLifetimeSeconds: 3})
	busy, err := c.Exec(context.Background(), life.ID, api.ExecRequest{Command: []string{"sleep", "60"}}, 0)
	if err != nil {
		t.Fatal(err)
	}

	if ss := waitSessionEnded(t, c, idle.ID, 30*time.Second); ss.EndReason != sandgate.SessionIdle {
		t.Errorf("idle session ended with %q, want idle", ss.EndReason)
	}
	if ss := waitSessionEnded(t, c, life.ID, 30*time.Second); ss.EndReason != sandgate.SessionLifetime {
		t.Errorf("old session ended with %q, want lifetime", ss.EndReason)
	}
	if v := s.waitFinished(t, busy.ID, 30*time.Second); outcomeOf(v) != sandgate.OutcomeLost {
		t.Errorf("command running when its session ended: %s, want lost", outcomeOf(v))
	}
	for id, reason := range map[string]string{idle.ID: "idle", life.ID: "lifetime"} {
		if ev := s.sessionEndEvent(t, id); ev.Outcome != reason || ev.Payload["reason"] != reason {
			t.Errorf("session.ended of %s: outcome %q payload %v, want %s", id, ev.Outcome, ev.Payload, reason)
		}
	}
	sandgatetest.WaitFor(t, "the sessions' containers to be removed", 30*time.Second, func() bool { return s.nodeContainers(t) == 0 })
}

// TestSessionOOM: a command that runs the session out of memory is
// oom_killed, recorded with container.oom_killed, and ends its session
// with reason oom.
func TestSessionOOM(t *testing.T) {
	s := startServer(t)
	c := s.Client
	ss := openSession(t, c, api.SessionRequest{RunSpec: sandgate.RunSpec{Resources: sandgate.Resources{MemoryMB: 32}}})
	r := execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"tail", "/dev/zero"}})
	if outcomeOf(r) != sandgate.OutcomeOOMKilled || !r.OOMKilled {
		t.Errorf("memory hog: %s oom %v, want oom_killed", outcomeOf(r), r.OOMKilled)
	}
	if got := waitSessionEnded(t, c, ss.ID, 30*time.Second); got.EndReason != sandgate.SessionOOM {
		t.Errorf("session ended with %q, want oom", got.EndReason)
	}
	evs := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {r.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventContainerOOMKilled)
	})
	if !hasEvent(evs, sandgate.EventContainerExited) {
		t.Errorf("no container.exited for the command (%s)", eventTypes(evs))
	}
	if ev := s.sessionEndEvent(t, ss.ID); ev.Outcome != "oom" {
		t.Errorf("session.ended outcome %q, want oom", ev.Outcome)
	}
}

// TestFaultGatewaySIGKILLSession kills a gateway process with SIGKILL
// while two sessions are open, one with a command running, and restarts
// it on the same database and node: the session whose container still
// runs is adopted (its files and state kept, new commands run, it can be
// deleted), the command that ran across the crash is lost, and the
// session whose container vanished meanwhile ends with reason lost.
//
// With a warm pool, the session kept is opened in a warm session
// container (its workspace named after the container, its agent's key
// gone with the first process): it is adopted the same way, its new
// commands going through docker exec.
func TestFaultGatewaySIGKILLSession(t *testing.T) {
	t.Run("cold", func(t *testing.T) { testGatewaySIGKILLSession(t, false) })
	t.Run("warm", func(t *testing.T) { testGatewaySIGKILLSession(t, true) })
}

func testGatewaySIGKILLSession(t *testing.T, warm bool) {
	env := processEnv(t)
	pooled := 0
	if warm {
		env["SANDGATE_WARM_POOL"] = "1"
		pooled = servedProfiles
	}
	p1 := startProcess(t, env)
	ctx := context.Background()
	if warm {
		sandgatetest.WaitFor(t, "the warm pool to fill", 2*time.Minute, func() bool { return warmIdle(t, env["SANDGATE_NODE"]) == pooled })
	}
	kept := openSession(t, p1.Client, api.SessionRequest{IdleTimeoutSeconds: 300})
	if warm {
		if out := dockerCLI(t, "", "inspect", "-f", "{{index .Config.Labels \"sandgate.pool\"}}", kept.ContainerID); strings.TrimSpace(out) == "" {
			t.Fatalf("the session was not opened warm")
		}
	}
	gone := openSession(t, p1.Client, api.SessionRequest{IdleTimeoutSeconds: 300})
	if _, err := p1.Client.PutFile(ctx, kept.ID, "state.txt", 0, strings.NewReader("before the crash\n")); err != nil {
		t.Fatal(err)
	}
	across, err := p1.Client.Exec(ctx, kept.ID, api.ExecRequest{Command: []string{"sleep", "300"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sandgatetest.WaitFor(t, "the command to run", 30*time.Second, func() bool {
		v, ok := p1.runState(t, across.ID)
		return ok && v.State == sandgate.StateRunning
	})

	// The last use is stored (within about a second) for the restart.
	before, err := p1.Client.Session(ctx, kept.ID)
	if err != nil {
		t.Fatal(err)
	}
	db := audittest.OpenDB(t, env["SANDGATE_DATABASE_URL"])
	sandgatetest.WaitFor(t, "the session's last use to be stored", 30*time.Second, func() bool {
		var stored time.Time
		row := db.QueryRow(`SELECT last_active_at FROM sessions WHERE id = $1`, kept.ID)
		return row.Scan(&stored) == nil && !stored.Before(before.LastActiveAt.Truncate(time.Microsecond))
	})
	p1.Kill(t)
	dockerCLI(t, "", "rm", "-f", gone.ContainerID)

	p2 := startProcess(t, env)
	if ss := waitSessionEnded(t, p2.Client, gone.ID, 60*time.Second); ss.EndReason != sandgate.SessionLost {
		t.Errorf("session whose container vanished ended with %q, want lost", ss.EndReason)
	}
	if v := p2.waitFinished(t, across.ID, 60*time.Second); outcomeOf(v) != sandgate.OutcomeLost || v.Error == nil {
		t.Errorf("command across the crash: %s %+v, want lost with a reason", outcomeOf(v), v.Error)
	}
	var r api.RunView
	sandgatetest.WaitFor(t, "the adopted session to take commands", 60*time.Second, func() bool {
		r, err = p2.Client.Exec(ctx, kept.ID, api.ExecRequest{Command: []string{"cat", "state.txt"}}, 30*time.Second)
		return err == nil
	})
	if outcomeOf(r) != sandgate.OutcomeSucceeded || r.Stdout.Data != "before the crash\n" {
		t.Errorf("adopted session: %s %q", outcomeOf(r), r.Stdout.Data)
	}
	ss, err := p2.Client.Session(ctx, kept.ID)
	if err != nil || ss.State != sandgate.SessionOpen || ss.ContainerID != kept.ContainerID || ss.Runs != 2 {
		t.Errorf("adopted session: %+v %v", ss, err)
	}
	ended, err := p2.Client.DeleteSession(ctx, kept.ID)
	if err != nil || ended.EndReason != sandgate.SessionDeleted {
		t.Fatalf("delete adopted session: %+v %v", ended, err)
	}
	sandgatetest.WaitFor(t, "no container of the node but the warm pool's", 2*time.Minute, func() bool { return p2.nodeContainers(t) == pooled })
	if ev := p2.sessionEndEvent(t, gone.ID); ev.Outcome != "lost" {
		t.Errorf("session.ended of the lost session: %q", ev.Outcome)
	}
}

// TestSessionKeepaliveLanguageImages: the language images have no shell
// and no sleep; a session in each stays open on the keepalive the
// bundle's data names for it, and runs the language's commands.
func TestSessionKeepaliveLanguageImages(t *testing.T) {
	executortest.RequireRecipeImage(t, "python")
	executortest.RequireRecipeImage(t, "node")
	s := startServer(t)
	c := s.Client
	for _, tc := range []struct {
		image, keepalive string
		command          []string
	}{
		{"sandgate/python:3", "python3", []string{"python3", "-c", "open('f','w').write('4'); print(2+2)"}},
		{"sandgate/node:18", "node", []string{"node", "-e", "console.log(require('fs').readFileSync('f','utf8'))"}},
	} {
		ss := openSession(t, c, api.SessionRequest{RunSpec: sandgate.RunSpec{Image: tc.image}})
		if ss.Spec.Command[0] != tc.keepalive {
			t.Errorf("%s: keepalive %q", tc.image, ss.Spec.Command)
		}
		if _, err := c.PutFile(context.Background(), ss.ID, "f", 0, strings.NewReader("4")); err != nil {
			t.Fatal(err)
		}
		r := execWait(t, c, ss.ID, api.ExecRequest{Command: tc.command})
		if outcomeOf(r) != sandgate.OutcomeSucceeded || r.Stdout.Data != "4\n" {
			t.Errorf("%s: %s %q %q", tc.image, outcomeOf(r), r.Stdout.Data, r.Stderr.Data)
		}
		if got, err := c.DeleteSession(context.Background(), ss.ID); err != nil || got.EndReason != sandgate.SessionDeleted {
			t.Errorf("%s: delete %+v %v", tc.image, got, err)
		}
	}
}

// TestSessionHoldsNoRunSlot: a session's container holds a place of the
// node's session budget, never one of its MAX_CONCURRENT run slots, and
// the orphan cleanup leaves it alone. With one run slot and a session
// open, a run submitted beside it runs at once and ends while the session
// is still open (before the fix it waited for the session to end).
func TestSessionHoldsNoRunSlot(t *testing.T) {
	s := startServer(t, withEnv("SANDGATE_MAX_CONCURRENT", "1"), withEnv("SANDGATE_MAX_SESSIONS", "2"))
	c := s.Client
	ss := openSession(t, c, api.SessionRequest{})
	beside, err := c.Submit(context.Background(), sandgate.RunSpec{Command: []string{"echo", "beside"}}, client.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The reaper leaves a live session's container alone.
	if status, _, body := s.do(t, http.MethodPost, "/v1/sandboxes/cleanup", ""); status != http.StatusOK || !strings.Contains(string(body), `"count":0`) {
		t.Errorf("cleanup with a session open: %d %s", status, body)
	}
	r := execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"echo", "inside"}})
	if r.Stdout.Data != "inside\n" {
		t.Errorf("command in the session: %q", r.Stdout.Data)
	}
	if v := s.waitFinished(t, beside.ID, 60*time.Second); outcomeOf(v) != sandgate.OutcomeSucceeded || v.Stdout.Data != "beside\n" {
		t.Errorf("the run beside the session: %s %q", outcomeOf(v), v.Stdout.Data)
	}
	if got, ok := s.sessionState(t, ss.ID); !ok || got != sandgate.SessionOpen {
		t.Errorf("the session after the run beside it: %s, want open", got)
	}
	if _, err := c.DeleteSession(context.Background(), ss.ID); err != nil {
		t.Fatal(err)
	}
}
