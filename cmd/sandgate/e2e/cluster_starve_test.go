package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// stalledDownload opens a connection to s with a 4 KiB receive buffer,
// asks for path with token and never reads the answer: the server's
// writes to it block once the socket buffers are full.
func stalledDownload(t *testing.T, s *testServer, token, path string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: sandgate\r\nAuthorization: Bearer %s\r\n\r\n", path, token)
	return c
}

// TestClusterStarvedNodeNotTakenOver is the starvation drill: alice
// leaves a 32 MiB artifact on node a and opens 10 downloads of it that
// never read (a 4 KiB receive buffer), while bob's run is in flight on
// a. They hold no database connection of a's: a's heartbeat goes on, bob
// lists his runs on a, node b never takes a over, and bob's run ends
// once, recorded by a. Before, each stalled download held one of a's 8
// pooled connections with its cursor open, a's heartbeat aged, b took a
// over and the run's end was recorded by both.
func TestClusterStarvedNodeNotTakenOver(t *testing.T) {
	base, _ := clusterBase(t)
	tokens, tok := writeTokensFile(t, []authPrincipal{
		{"ops", "alpha", []sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleAdmin, sandgate.RoleAuditor}},
		{"alice", "alpha", []sandgate.Role{sandgate.RoleSubmitter}},
		{"bob", "beta", []sandgate.Role{sandgate.RoleSubmitter}},
	})
	base["SANDGATE_TOKENS_FILE"] = tokens
	a := startNode(t, base, tok["ops"], "starve-a-"+sandgatetest.RandomHex(t, 3))
	b := startNode(t, base, tok["ops"], "starve-b-"+sandgatetest.RandomHex(t, 3))
	sandgatetest.WaitFor(t, "both nodes alive", 20*time.Second, func() bool {
		ns := b.nodes(t)
		return ns[a.Node].State == "alive" && ns[b.Node].State == "alive"
	})

	big := a.submitWait(t, tok["alice"], `{"command":["sh","-c","head -c 33554432 /dev/urandom > big.bin"],"artifacts":["big.bin"],"timeout_seconds":120}`)
	if big.Node != a.Node || big.ExitCode == nil || *big.ExitCode != 0 {
		t.Fatalf("the artifact's run: %+v", big)
	}
	status, _, body := a.doAs(t, tok["bob"], http.MethodPost, "/v1/runs",
		`{"command":["sh","-c","while [ ! -e /tmp/go ]; do sleep 0.1; done; exit 4"]}`)
	if status != http.StatusAccepted {
		t.Fatalf("bob's run: %d %s", status, body)
	}
	bobs := runIDOf(t, body)
	a.waitRunning(t, bobs)

	var stalled []net.Conn
	for range 10 {
		stalled = append(stalled, stalledDownload(t, a, tok["alice"], "/v1/runs/"+big.ID+"/artifacts/big.bin"))
	}
	// Four lapses with the downloads stalled: b watches a all along.
	var states []string
	until := time.Now().Add(4 * 3 * time.Second)
	for time.Now().Before(until) {
		st := b.nodes(t)[a.Node].State
		if len(states) == 0 || states[len(states)-1] != st {
			states = append(states, st)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if slices.Contains(states, "gone") {
		t.Errorf("node a was taken over while its downloads stalled (states seen from b: %v)", states)
	}
	t.Logf("node a's states seen from b while its downloads stalled: %v", states)
	req, _ := http.NewRequest(http.MethodGet, a.URL+"/v1/runs?limit=5", nil)
	req.Header.Set("Authorization", "Bearer "+tok["bob"])
	if resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("bob's GET /v1/runs on a while the downloads stall: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	for _, c := range stalled {
		c.Close()
	}

	v, _ := a.runState(t, bobs)
	dockerCLI(t, "", "exec", v.ContainerID, "touch", "/tmp/go")
	if v := a.waitFinished(t, bobs, 60*time.Second); v.ExitCode == nil || *v.ExitCode != 4 || v.Node != a.Node {
		t.Errorf("bob's run = %+v, want exit 4 on %s", v, a.Node)
	}
	sandgatetest.WaitFor(t, "the end of bob's run in the trail", 30*time.Second, func() bool {
		return eventCounts(a.runEvents(t, bobs))[sandgate.EventContainerRemoved] > 0
	})
	n := eventCounts(a.runEvents(t, bobs))
	ends := 0
	for _, typ := range endEvents {
		ends += n[typ]
	}
	if ends != 1 {
		t.Errorf("bob's run has %d end events (%v); want one", ends, n)
	}
	if taken := a.auditOfType(t, sandgate.EventNodeTakenOver); len(taken) != 0 {
		t.Errorf("node.taken_over recorded: %+v", taken)
	}
}

// runIDOf reads the run ID of a run answer.
func runIDOf(t *testing.T, body []byte) string {
	t.Helper()
	var v api.RunView
	if err := json.Unmarshal(body, &v); err != nil || v.ID == "" {
		t.Fatalf("no run in %s: %v", body, err)
	}
	return v.ID
}
