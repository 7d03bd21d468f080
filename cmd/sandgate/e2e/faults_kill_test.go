package e2e

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestFaultGatewaySIGKILL kills a real gateway process with SIGKILL while
// three runs are in flight and restarts it on the same database, spool and
// node: the run whose container still runs is adopted and finished with
// its exit code and the output from then on, the one whose container
// exited meanwhile is recorded with its real exit code, the one whose
// container vanished is lost; no container is left and the trail
// verifies.
func TestFaultGatewaySIGKILL(t *testing.T) {
	t.Parallel()
	env := processEnv(t)
	p1 := startProcess(t, env)

	// The containers end when the test says so: it creates /tmp/go in
	// them with docker exec, which the daemon does not count as a stop.
	const gate = "while [ ! -e /tmp/go ]; do sleep 0.1; done; "
	adopted := p1.submitNoWait(t, "kill-adopted", "sh", "-c", "echo before; "+gate+"echo after; exit 7")
	exited := p1.submitNoWait(t, "kill-exited", "sh", "-c", gate+"exit 5")
	vanished := p1.submitNoWait(t, "kill-vanished", "sh", "-c", "sleep 60")
	containers := map[string]string{}
	for _, id := range []string{adopted, exited, vanished} {
		sandgatetest.WaitFor(t, "run "+id+" to be running with its start in the trail", 30*time.Second, func() bool {
			v, ok := p1.runState(t, id)
			if !ok || v.State != sandgate.StateRunning || v.ContainerID == "" {
				return false
			}
			containers[id] = v.ContainerID
			_, started := findEvent(p1.runEvents(t, id), sandgate.EventContainerStarted)
			return started
		})
	}

	// Killed after its first checkpoint, as a gateway that has served for
	// a while is. (A process killed before any checkpoint leaves chains
	// no key vouches for until the node starts again and signs them:
	// audit/TestRestartSignsKilledProcessRows.)
	waitChainsCheckpointed(t, "a checkpoint of each of the first process's chains", env["SANDGATE_DATABASE_URL"])
	p1.Kill(t)
	dockerCLI(t, "", "rm", "-f", containers[vanished])
	dockerCLI(t, "", "exec", containers[exited], "touch", "/tmp/go")
	if code := dockerCLI(t, "", "wait", containers[exited]); code != "5" {
		t.Fatalf("docker wait %s = %q, want 5", containers[exited], code)
	}

	p2 := startProcess(t, env)
	// Once the new process follows the container, let it finish.
	sandgatetest.WaitFor(t, "the new process to follow the running container", 60*time.Second, func() bool {
		for _, line := range strings.Split(p2.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"following an adopted container"`) && strings.Contains(line, adopted) {
				return true
			}
		}
		return false
	})
	dockerCLI(t, "", "exec", containers[adopted], "touch", "/tmp/go")
	got := map[string]struct {
		outcome sandgate.Outcome
		code    int
	}{}
	for _, id := range []string{adopted, exited, vanished} {
		v := p2.waitFinished(t, id, 60*time.Second)
		if v.Outcome == nil {
			t.Fatalf("run %s finished without an outcome: %+v", id, v)
		}
		code := -1
		if v.ExitCode != nil {
			code = *v.ExitCode
		}
		got[id] = struct {
			outcome sandgate.Outcome
			code    int
		}{*v.Outcome, code}
		switch id {
		case adopted:
			if !strings.Contains(v.Stdout.Data, "after\n") {
				t.Errorf("adopted run stdout = %q, want the output written after the restart", v.Stdout.Data)
			}
		case vanished:
			if v.Error == nil || v.Error.Message == "" {
				t.Errorf("lost run has no reason: %+v", v.Error)
			}
		}
	}
	want := map[string]sandgate.Outcome{adopted: sandgate.OutcomeFailed, exited: sandgate.OutcomeFailed, vanished: sandgate.OutcomeLost}
	wantCode := map[string]int{adopted: 7, exited: 5, vanished: -1}
	for id, g := range got {
		if g.outcome != want[id] || g.code != wantCode[id] {
			t.Errorf("run %s = %s exit %d, want %s exit %d", id, g.outcome, g.code, want[id], wantCode[id])
		}
	}

	// The trail of each run is complete, each lifecycle event once.
	for id, wantTypes := range map[string]map[sandgate.EventType]int{
		adopted: {sandgate.EventContainerCreated: 1, sandgate.EventContainerStarted: 1, sandgate.EventContainerExited: 1, sandgate.EventContainerRemoved: 1},
		exited:  {sandgate.EventContainerCreated: 1, sandgate.EventContainerStarted: 1, sandgate.EventContainerExited: 1, sandgate.EventContainerRemoved: 1},
		vanished: {sandgate.EventContainerCreated: 1, sandgate.EventContainerStarted: 1, sandgate.EventRunLost: 1,
			sandgate.EventContainerExited: 0, sandgate.EventContainerRemoved: 0},
	} {
		var counts map[sandgate.EventType]int
		sandgatetest.WaitFor(t, "the end of run "+id+" in the trail", 30*time.Second, func() bool {
			counts = eventCounts(p2.runEvents(t, id))
			return counts[sandgate.EventContainerRemoved] > 0 || counts[sandgate.EventRunLost] > 0
		})
		for typ, n := range wantTypes {
			if counts[typ] != n {
				t.Errorf("run %s: %d %s event(s), want %d (all: %v)", id, counts[typ], typ, n, counts)
			}
		}
	}
	for id, code := range map[string]int{adopted: 7, exited: 5} {
		ev, _ := findEvent(p2.runEvents(t, id), sandgate.EventContainerExited)
		if ev.ExitCode == nil || *ev.ExitCode != code {
			t.Errorf("run %s: container.exited exit_code = %v, want %d", id, ev.ExitCode, code)
		}
	}

	assertNoContainers(t, env["SANDGATE_NODE"])
	p2.verifyTrail(t)
	if err := p2.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	assertNoContainers(t, env["SANDGATE_NODE"])
}

// waitChainsCheckpointed waits until every chain registered in the
// database at dsn has a checkpoint.
func waitChainsCheckpointed(t testing.TB, what, dsn string) {
	t.Helper()
	sandgatetest.WaitFor(t, what, 30*time.Second, func() bool {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return false
		}
		defer db.Close()
		var uncovered int
		err = db.QueryRow(`SELECT count(*) FROM audit_chains c WHERE NOT EXISTS (SELECT FROM audit_checkpoints k WHERE k.chain_id = c.chain_id)`).Scan(&uncovered)
		return err == nil && uncovered == 0
	})
}
