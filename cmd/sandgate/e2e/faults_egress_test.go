package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestFaultGatewaySIGKILLEgress kills a real gateway process with SIGKILL
// while an egress run and an egress session are open, and restarts it on
// the same database, spool and node: the new process's proxy takes both
// containers' addresses over, so the run's next connection from its
// container, and a command of the adopted session, reach the allowed
// upstream again and are recorded with their correlation IDs; the run's
// result carries the connections made since the restart.
func TestFaultGatewaySIGKILLEgress(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "upstream-answer")
	})}
	go upstream.Serve(ln)
	defer upstream.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	target := "http://127.0.0.1:" + port + "/"
	env := processEnv(t)
	for k, v := range egressEnv(t, ln.Addr().(*net.TCPAddr).Port) {
		env[k] = v
	}
	dests := []string{"127.0.0.1:" + port}
	ctx := context.Background()

	p1 := startProcess(t, env)
	// The run fetches once, waits for /tmp/go (made with docker exec
	// after the restart), and fetches again.
	run, err := p1.Client.Submit(ctx, sandgate.RunSpec{
		Network: sandgate.NetworkEgress, Egress: dests,
		Command: []string{"sh", "-c", "wget -q -O - " + target + " && echo before-ok; " +
			"while [ ! -e /tmp/go ]; do sleep 0.1; done; " +
			"wget -q -O - " + target + " && echo after-ok"},
	}, client.SubmitOptions{CorrelationID: "corr-egress-restart"})
	if err != nil {
		t.Fatal(err)
	}
	ss := openSession(t, p1.Client, api.SessionRequest{IdleTimeoutSeconds: 300,
		RunSpec: sandgate.RunSpec{Network: sandgate.NetworkEgress, Egress: dests}})
	if r := execWait(t, p1.Client, ss.ID, api.ExecRequest{Command: []string{"wget", "-q", "-O", "-", target}}); !strings.Contains(r.Stdout.Data, "upstream-answer") {
		t.Fatalf("session command before the restart: %s %q %q", outcomeOf(r), r.Stdout.Data, r.Stderr.Data)
	}
	var containerID string
	sandgatetest.WaitFor(t, "the run's first connection in the trail", 30*time.Second, func() bool {
		v, ok := p1.runState(t, run.ID)
		containerID = v.ContainerID
		return ok && countEvents(p1.runEvents(t, run.ID), sandgate.EventEgressAllowed) == 1
	})

	p1.Kill(t)
	p2 := startProcess(t, env)
	sandgatetest.WaitFor(t, "the new process to follow the run's container", 60*time.Second, func() bool {
		for _, line := range strings.Split(p2.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"following an adopted container"`) && strings.Contains(line, run.ID) {
				return true
			}
		}
		return false
	})
	dockerCLI(t, "", "exec", containerID, "touch", "/tmp/go")
	v := p2.waitFinished(t, run.ID, 60*time.Second)
	if outcomeOf(v) != sandgate.OutcomeSucceeded || !strings.Contains(v.Stdout.Data, "after-ok") {
		t.Errorf("adopted egress run: %s stdout %q stderr %q", outcomeOf(v), v.Stdout.Data, v.Stderr.Data)
	}
	if e := v.Egress; e == nil || e.ConnectionsAllowed != 1 || e.ConnectionsDenied != 0 {
		t.Errorf("adopted run's egress summary %+v, want the one connection since the restart", v.Egress)
	}
	allowed := p2.waitAuditEvents(t, p2.Token, url.Values{"run_id": {run.ID}, "type": {string(sandgate.EventEgressAllowed)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 2 })
	for _, ev := range allowed {
		if ev.CorrelationID != "corr-egress-restart" || ev.Payload["address"] != "127.0.0.1" {
			t.Errorf("egress.allowed %+v", ev)
		}
	}
	if n := countEvents(p2.runEvents(t, run.ID), sandgate.EventEgressDenied); n != 0 {
		t.Errorf("%d egress.denied for the adopted run", n)
	}

	var r api.RunView
	sandgatetest.WaitFor(t, "the adopted session to take commands", 60*time.Second, func() bool {
		r, err = p2.Client.Exec(ctx, ss.ID, api.ExecRequest{Command: []string{"wget", "-q", "-O", "-", target}}, 30*time.Second)
		return err == nil
	})
	if outcomeOf(r) != sandgate.OutcomeSucceeded || !strings.Contains(r.Stdout.Data, "upstream-answer") {
		t.Errorf("adopted session's command: %s %q %q", outcomeOf(r), r.Stdout.Data, r.Stderr.Data)
	}
	ended, err := p2.Client.DeleteSession(ctx, ss.ID)
	if err != nil || ended.Egress == nil || ended.Egress.ConnectionsAllowed != 1 {
		t.Errorf("adopted session ended: %+v %v", ended.Egress, err)
	}
	p2.waitAuditEvents(t, p2.Token, url.Values{"run_id": {ss.ID}, "type": {string(sandgate.EventEgressAllowed)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 2 })
	sandgatetest.WaitFor(t, "no container of the node", 30*time.Second, func() bool { return p2.nodeContainers(t) == 0 })
}
