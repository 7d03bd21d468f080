package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The cluster tests run several gateways on one database, each a node of
// its own name, spool and directories, all on this machine's Docker
// daemon (a node's daemon is what its DOCKER_HOST names, so a survivor
// reaches it exactly as it would a remote one). The nodes share a tokens
// file, a cluster secret and a mask key, heartbeat every 300 ms and are taken over
// after 3 s of silence. Each node's checkpoint key is endorsed by the
// cluster's root before the node first starts, and every verifier trusts
// that root, as an operator sets a cluster up (docs/operations.md): a
// survivor signs the checkpoints of the chains it adopts with its own key,
// which any node's verify must trust.

// clusterPrincipals: one principal with every role a test needs.
var clusterPrincipals = []authPrincipal{
	{"ops", "alpha", []sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleAdmin, sandgate.RoleAuditor}},
}

// clusterBase is the environment every node of one test's cluster shares,
// and the bearer token of its principal.
func clusterBase(t testing.TB) (map[string]string, string) {
	t.Helper()
	executortest.RequireDocker(t)
	tokens, tok := writeTokensFile(t, clusterPrincipals)
	dir := t.TempDir()
	secret, mask := filepath.Join(dir, "cluster.secret"), filepath.Join(dir, "mask.key")
	for _, f := range []string{secret, mask} {
		if err := os.WriteFile(f, []byte(sandgatetest.RandomHex(t, 32)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, rootPub := clusterRoot(t, dir)
	return map[string]string{
		"SANDGATE_DEV":                        "0",
		"SANDGATE_TOKENS_FILE":                tokens,
		"SANDGATE_CLUSTER_SECRET_FILE":        secret,
		"SANDGATE_MASK_KEY_FILE":              mask,
		"SANDGATE_DATABASE_URL":               audittest.NewDatabase(t),
		"SANDGATE_NODE_HEARTBEAT":             "300ms",
		"SANDGATE_NODE_LAPSE":                 "3s",
		"DOCKER_HOST":                         executortest.DockerHost(),
		"SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE": rootPub,
		// One team (ops) is the cluster's whole workload: it may fill
		// each node, as the tests' runs held at once need.
		"SANDGATE_TEAM_SHARE": "100",
	}, tok["ops"]
}

// clusterRoot makes a cluster root key in dir and writes its public half
// beside it: root.key (kept off the nodes) and root.pub.
func clusterRoot(t testing.TB, dir string) (key, pub string) {
	t.Helper()
	key, pub = filepath.Join(dir, "root.key"), filepath.Join(dir, "root.pub")
	if _, err := proof.LoadSigningKey(key, true); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runApp(context.Background(), []string{"audit", "public-key", "--signing-key-file", key}, nil, &out, nil); err != nil {
		t.Fatalf("the root's public key: %v\n%s", err, out.String())
	}
	if err := os.WriteFile(pub, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return key, pub
}

// endorseNodeKey endorses the checkpoint key env's node signs with (made
// if missing) with the cluster root's key, and names the endorsement in
// env, as an operator does before a node first starts.
func endorseNodeKey(t testing.TB, env map[string]string, rootKey string) {
	t.Helper()
	endorsement := filepath.Join(filepath.Dir(env["SANDGATE_SPOOL_DIR"]), "endorsement.json")
	var out bytes.Buffer
	if err := runApp(context.Background(), []string{"audit", "endorse-key", "--root-key-file", rootKey,
		"-o", endorsement}, env, &out, nil); err != nil {
		t.Fatalf("endorse %s's key: %v\n%s", env["SANDGATE_NODE"], err, out.String())
	}
	env["SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE"] = endorsement
}

// nodeEnv is base with a node's own name and directories.
func nodeEnv(t testing.TB, base map[string]string, name string) map[string]string {
	t.Helper()
	env := maps.Clone(base)
	state := t.TempDir()
	env["SANDGATE_LISTEN"] = "127.0.0.1:0"
	env["SANDGATE_NODE"] = name
	env["SANDGATE_SPOOL_DIR"] = state + "/spool"
	env["SANDGATE_VOLUME_DIR"] = state + "/volumes"
	env["SANDGATE_WORKSPACE_DIR"] = state + "/workspaces"
	env["SANDGATE_UPLOAD_DIR"] = state + "/uploads"
	env["SANDGATE_SIGNING_KEY_FILE"] = state + "/checkpoint.key"
	if pub := base["SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE"]; pub != "" {
		endorseNodeKey(t, env, filepath.Join(filepath.Dir(pub), "root.key"))
	}
	return env
}

// withToken gives a server of the cluster the cluster principal's token.
func withToken(t testing.TB, s *testServer, tok string) *testServer {
	t.Helper()
	s.Token = tok
	s.Client = clientAs(t, s, tok)
	return s
}

// startNode starts an in-process node of the cluster.
func startNode(t testing.TB, base map[string]string, tok, name string) *testServer {
	t.Helper()
	return withToken(t, startServerWithEnv(t, nodeEnv(t, base, name)), tok)
}

// nodes reads GET /v1/nodes.
func (s *testServer) nodes(t *testing.T) map[string]api.NodeView {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, "/v1/nodes", "")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/nodes: %d %s", status, body)
	}
	var l api.NodeList
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	out := map[string]api.NodeView{}
	for _, n := range l.Nodes {
		out[n.Name] = n
	}
	return out
}

// auditOfType returns every event of a type.
func (s *testServer) auditOfType(t *testing.T, typ sandgate.EventType) []sandgate.AuditRecord {
	t.Helper()
	return s.auditEvents(t, s.Token, url.Values{"type": {string(typ)}, "limit": {"1000"}})
}

// TestClusterAnyNodeAnswers runs two nodes on one database. Both list
// each other as alive with their daemon and key; a run submitted to the
// first is followed live through the second (each line arrives while the
// run still runs, which no reading of the database could give: output is
// stored when a run ends), then cancelled through the second; a session
// opened on the first takes commands and files through the second; a
// request that claims to be forwarded without the cluster's signature is
// refused.
func TestClusterAnyNodeAnswers(t *testing.T) {
	base, tok := clusterBase(t)
	a := startNode(t, base, tok, "clu-a-"+sandgatetest.RandomHex(t, 3))
	b := startNode(t, base, tok, "clu-b-"+sandgatetest.RandomHex(t, 3))

	sandgatetest.WaitFor(t, "both nodes alive in the registry", 10*time.Second, func() bool {
		ns := a.nodes(t)
		return ns[a.Node].State == "alive" && ns[b.Node].State == "alive"
	})
	ns := b.nodes(t)
	for _, n := range []api.NodeView{ns[a.Node], ns[b.Node]} {
		if !n.DockerHealthy || n.Capacity != 4 || n.KeyID == "" || len(n.PublicKey) != 64 || !strings.HasPrefix(n.AdvertiseURL, "http://127.0.0.1:") {
			t.Errorf("node %s = %+v, want a healthy daemon, capacity 4, its key and address", n.Name, n)
		}
	}
	if !ns[b.Node].Self || ns[a.Node].Self {
		t.Errorf("self flags: a=%v b=%v, want only b (it answered)", ns[a.Node].Self, ns[b.Node].Self)
	}

	t.Run("follow and cancel through another node", func(t *testing.T) {
		id := a.submitNoWait(t, "clu-follow", "sh", "-c", "echo one; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo two; sleep 60")
		a.waitRunning(t, id)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		lines := make(chan string, 16)
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			_ = b.Client.Logs(ctx, id, true, func(ev api.LogEvent) error {
				if ev.Event == api.EventStdout {
					p, _ := ev.Chunk()
					for _, l := range strings.Fields(string(p)) {
						lines <- l
					}
				}
				return nil
			})
		}()
		expect := func(want string) {
			t.Helper()
			select {
			case l := <-lines:
				if l != want {
					t.Fatalf("followed line %q, want %q", l, want)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no line %q through the other node", want)
			}
		}
		expect("one")
		v, _ := a.runState(t, id)
		dockerCLI(t, "", "exec", v.ContainerID, "touch", "/tmp/go")
		expect("two")
		if v, _ := a.runState(t, id); v.State != sandgate.StateRunning {
			t.Fatalf("the run is %s once its second line arrived; the line did not come live", v.State)
		}
		got, err := b.Client.Cancel(ctx, id)
		if err != nil {
			t.Fatalf("cancel through %s: %v", b.Node, err)
		}
		if got.State != sandgate.StateFinished || got.Outcome == nil || *got.Outcome != sandgate.OutcomeCancelled {
			t.Fatalf("cancel through the other node answered %+v, want finished and cancelled", got)
		}
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatal("the followed stream did not end with the run")
		}
		if v := a.waitFinished(t, id, 30*time.Second); v.Node != a.Node {
			t.Errorf("the run's node is %q, want %q (it ran there)", v.Node, a.Node)
		}
	})

	t.Run("session through another node", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		ss, err := a.Client.CreateSession(ctx, api.SessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		status, _, body := b.do(t, http.MethodPut, "/v1/sessions/"+ss.ID+"/files?path=in.txt", "from-b",
			"Content-Type", "application/octet-stream")
		if status != http.StatusOK {
			t.Fatalf("PUT a file through %s: %d %s", b.Node, status, body)
		}
		status, _, body = b.do(t, http.MethodPost, "/v1/sessions/"+ss.ID+"/runs?wait=60s", `{"command":["cat","in.txt"]}`)
		if status != http.StatusOK {
			t.Fatalf("command through %s: %d %s", b.Node, status, body)
		}
		var run api.RunView
		if err := json.Unmarshal(body, &run); err != nil {
			t.Fatal(err)
		}
		if run.Stdout.Data != "from-b" || run.ExitCode == nil || *run.ExitCode != 0 {
			t.Errorf("command = %q exit %v, want from-b exit 0", run.Stdout.Data, run.ExitCode)
		}
		status, _, body = b.do(t, http.MethodGet, "/v1/sessions/"+ss.ID+"/files?path=in.txt", "")
		if status != http.StatusOK || string(body) != "from-b" {
			t.Errorf("GET the file through %s: %d %q", b.Node, status, body)
		}
		if _, err := b.Client.DeleteSession(ctx, ss.ID); err != nil {
			t.Fatalf("delete the session through %s: %v", b.Node, err)
		}
	})

	t.Run("forged forward", func(t *testing.T) {
		id := a.submitNoWait(t, "clu-forged", "sleep", "30")
		a.waitRunning(t, id)
		defer func() { _, _ = a.Client.Cancel(context.Background(), id) }()
		status, _, body := b.do(t, http.MethodDelete, "/v1/runs/"+id, "",
			"X-Sandgate-Forwarded-By", a.Node, "X-Sandgate-Forwarded-At", fmt.Sprint(time.Now().Unix()),
			"X-Sandgate-Forward-Signature", strings.Repeat("0", 64))
		if status != http.StatusUnauthorized {
			t.Errorf("a forged forward: %d %s, want 401", status, body)
		}
	})

	// Each node's key is in the audit key registry once it has signed
	// its first checkpoint, and the registry says so.
	sandgatetest.WaitFor(t, "both nodes' keys in the key registry", 60*time.Second, func() bool {
		ns := a.nodes(t)
		return ns[a.Node].KeyRegistered && ns[b.Node].KeyRegistered
	})
}

// waitTakeover waits for the node.taken_over event, recorded once the
// survivor has closed the dead node's chains (which waits for the
// survivor's own key to be registered, at its first checkpoint), and a
// moment more for a second one, which must not come.
func (s *testServer) waitTakeover(t *testing.T) []sandgate.AuditRecord {
	t.Helper()
	sandgatetest.WaitFor(t, "node.taken_over in the trail", 60*time.Second, func() bool {
		return len(s.auditOfType(t, sandgate.EventNodeTakenOver)) > 0
	})
	time.Sleep(2 * time.Second)
	return s.auditOfType(t, sandgate.EventNodeTakenOver)
}

// waitRunning waits until the run's container runs.
func (s *testServer) waitRunning(t *testing.T, id string) {
	t.Helper()
	sandgatetest.WaitFor(t, "run "+id+" to run", 60*time.Second, func() bool {
		v, ok := s.runState(t, id)
		return ok && v.State == sandgate.StateRunning && v.ContainerID != ""
	})
}

// TestClusterIdempotencyRace sends the same Idempotency-Key from the same
// principal to two nodes at once, for several keys (the body holds a
// secret, which the stored spec keeps only as a keyed hash): each key
// yields one run, both answers name it, the trail holds one admission per
// key, and the key reused with another body is refused on either node.
func TestClusterIdempotencyRace(t *testing.T) {
	base, tok := clusterBase(t)
	a := startNode(t, base, tok, "idem-a-"+sandgatetest.RandomHex(t, 3))
	b := startNode(t, base, tok, "idem-b-"+sandgatetest.RandomHex(t, 3))
	const keys = 6
	for i := range keys {
		key := fmt.Sprintf("race-%d-%s", i, sandgatetest.RandomHex(t, 4))
		ids := make([]string, 2)
		var wg sync.WaitGroup
		for j, s := range []*testServer{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := s.Client.Submit(context.Background(), sandgate.RunSpec{Command: []string{"echo", "once"},
					Env: map[string]string{"TOKEN": "s3cret-" + key}}, client.SubmitOptions{IdempotencyKey: key})
				if err != nil {
					t.Errorf("submit to %s: %v", s.Node, err)
					return
				}
				ids[j] = v.ID
			}()
		}
		wg.Wait()
		if ids[0] == "" || ids[0] != ids[1] {
			t.Fatalf("key %s: the nodes answered runs %q and %q, want one", key, ids[0], ids[1])
		}
		a.waitFinished(t, ids[0], 60*time.Second)
		// The same key with another body, on the other node: refused.
		_, err := b.Client.Submit(context.Background(), sandgate.RunSpec{Command: []string{"echo", "twice"},
			Env: map[string]string{"TOKEN": "s3cret-" + key}}, client.SubmitOptions{IdempotencyKey: key})
		if sandgate.ErrorCodeOf(err) != sandgate.CodeConflict {
			t.Errorf("key %s reused with another body: %v, want CONFLICT", key, err)
		}
	}
	for typ, want := range map[sandgate.EventType]int{sandgate.EventRunRequested: keys, sandgate.EventAdmissionAllowed: keys, sandgate.EventContainerCreated: keys} {
		if got := len(a.auditOfType(t, typ)); got != want {
			t.Errorf("%d %s events, want %d (one per key)", got, typ, want)
		}
	}
	status, _, body := a.do(t, http.MethodGet, "/v1/runs?limit=100", "")
	var l api.RunList
	if status != http.StatusOK || json.Unmarshal(body, &l) != nil || len(l.Runs) != keys {
		t.Errorf("GET /v1/runs: %d, %d runs, want %d", status, len(l.Runs), keys)
	}
}

// TestClusterTakeoverAdopts SIGKILLs a node (its own process) while two of
// its runs are in flight, with two survivors watching: exactly one takes
// it over through the dead node's Docker daemon; the run still running is
// adopted and ends with its real exit code (7) when let go, the one that
// exited while no gateway watched is recorded with its (3); its open
// session is adopted too and takes commands through either survivor; the
// dead node's chain is closed by the survivor's signed checkpoint;
// nothing of the dead node is left on the daemon, and the trail verifies.
func TestClusterTakeoverAdopts(t *testing.T) {
	base, tok := clusterBase(t)
	dead := nodeEnv(t, base, "dead-"+sandgatetest.RandomHex(t, 3))
	// The dead node's session workspace stays mounted on its host (here,
	// this one) until it starts again.
	t.Cleanup(func() { unmountUnder(t, dead["SANDGATE_WORKSPACE_DIR"]) })
	p := startProcess(t, dead)
	withToken(t, p.testServer, tok)
	a := startNode(t, base, tok, "surv-a-"+sandgatetest.RandomHex(t, 3))
	b := startNode(t, base, tok, "surv-b-"+sandgatetest.RandomHex(t, 3))

	const gate = "while [ ! -e /tmp/go ]; do sleep 0.1; done; "
	running := p.submitNoWait(t, "takeover-running", "sh", "-c", "echo before; "+gate+"echo after; exit 7")
	// This one ends while its node is dead: let go of right after the
	// kill (a fixed sleep ended it before the kill on a loaded host).
	exited := p.submitNoWait(t, "takeover-exited", "sh", "-c", strings.ReplaceAll(gate, "/tmp/go", "/tmp/end")+"exit 3")
	p.waitRunning(t, running)
	p.waitRunning(t, exited)
	v, _ := p.runState(t, running)
	container := v.ContainerID
	ve, _ := p.runState(t, exited)
	ss, err := p.Client.CreateSession(context.Background(), api.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p.Kill(t)
	dockerCLI(t, "", "exec", ve.ContainerID, "touch", "/tmp/end")

	var taker string
	sandgatetest.WaitFor(t, "a survivor to take the dead node over", 60*time.Second, func() bool {
		n := a.nodes(t)[p.Node]
		taker = n.TakenOverBy
		return n.State == "gone" && taker != ""
	})
	if taker != a.Node && taker != b.Node {
		t.Fatalf("taken over by %q, want one of the survivors", taker)
	}
	owner, other := a, b
	if taker == b.Node {
		owner, other = b, a
	}
	sandgatetest.WaitFor(t, "the survivor to follow the running container", 60*time.Second, func() bool {
		for _, line := range strings.Split(owner.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"following an adopted container"`) && strings.Contains(line, running) {
				return true
			}
		}
		return false
	})
	// The adopted run is followed through the other survivor, forwarded
	// to the one that holds it now: its output from the adoption on.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	followed := make(chan string, 1)
	go func() {
		var out strings.Builder
		_ = other.Client.Logs(ctx, running, true, func(ev api.LogEvent) error {
			if ev.Event == api.EventStdout {
				p, _ := ev.Chunk()
				out.Write(p)
			}
			return nil
		})
		followed <- out.String()
	}()
	dockerCLI(t, "", "exec", container, "touch", "/tmp/go")
	select {
	case out := <-followed:
		if !strings.Contains(out, "after\n") {
			t.Errorf("followed through %s: %q, want the line written after the takeover", other.Node, out)
		}
	case <-ctx.Done():
		t.Fatal("the follow through the other survivor did not end with the run")
	}
	for id, code := range map[string]int{running: 7, exited: 3} {
		v := a.waitFinished(t, id, 60*time.Second)
		if v.Outcome == nil || *v.Outcome != sandgate.OutcomeFailed || v.ExitCode == nil || *v.ExitCode != code {
			t.Errorf("run %s = %v exit %v, want failed with its real exit code %d", id, v.Outcome, v.ExitCode, code)
		}
		if v.Node != taker {
			t.Errorf("run %s: node %q, want the survivor %q", id, v.Node, taker)
		}
		var evs []sandgate.AuditRecord
		sandgatetest.WaitFor(t, "the end of run "+id+" in the trail", 30*time.Second, func() bool {
			evs = a.runEvents(t, id)
			return eventCounts(evs)[sandgate.EventContainerRemoved] > 0
		})
		ev, _ := findEvent(evs, sandgate.EventContainerExited)
		if ev.ExitCode == nil || *ev.ExitCode != code || ev.Node != taker || ev.Payload["taken_over_from"] != p.Node {
			t.Errorf("run %s: container.exited %+v, want exit %d recorded by %s, taken over from %s", id, ev, code, taker, p.Node)
		}
	}
	taken := a.waitTakeover(t)
	if len(taken) != 1 || taken[0].Node != taker || taken[0].Payload["dead_node"] != p.Node ||
		taken[0].Payload["docker_reachable"] != true || taken[0].Payload["adopted"] != float64(2) {
		t.Fatalf("node.taken_over events = %+v, want one by %s adopting 2 runs", taken, taker)
	}
	closed := a.auditOfType(t, sandgate.EventAuditChainClosed)
	if len(closed) == 0 {
		t.Fatal("no audit.chain_closed event")
	}
	for _, ev := range closed {
		if ev.Node != taker || ev.Payload["closed_node"] != p.Node || ev.Payload["signed_by_node"] != taker {
			t.Errorf("audit.chain_closed = %+v, want %s closing %s's chain", ev.Payload, taker, p.Node)
		}
	}
	// The session lives on through the survivor: a command sent to
	// either survivor runs in its container on the dead node's daemon.
	if taken[0].Payload["sessions_adopted"] != float64(1) {
		t.Errorf("node.taken_over sessions_adopted = %v, want 1", taken[0].Payload["sessions_adopted"])
	}
	for _, s := range []*testServer{a, b} {
		status, _, body := s.do(t, http.MethodPost, "/v1/sessions/"+ss.ID+"/runs?wait=60s", `{"command":["echo","still here"]}`)
		var run api.RunView
		if status != http.StatusOK || json.Unmarshal(body, &run) != nil || run.Stdout.Data != "still here\n" || run.Node != taker {
			t.Errorf("a command in the adopted session through %s: %d %s", s.Node, status, body)
		}
	}
	if _, err := b.Client.DeleteSession(context.Background(), ss.ID); err != nil {
		t.Errorf("delete the adopted session: %v", err)
	}
	sandgatetest.WaitFor(t, "the adopted session's container to be removed", 30*time.Second, func() bool {
		return countContainers(t, sandgate.LabelNode, p.Node) == 0
	})
	assertNoContainers(t, p.Node)
	// Both survivors find the trail whole: the adopted chains' checkpoints,
	// signed by the taker's key, are trusted through the cluster's root
	// by the node that did not take over too.
	owner.verifyTrail(t)
	other.verifyTrail(t)
}

// TestClusterTakeoverDaemonGone runs a node whose Docker daemon is reached
// through a proxy the test closes when it SIGKILLs the node: the survivor
// cannot reach the daemon the registry names, and records the node's run
// lost with the reason. Then a node whose daemon goes away while it lives
// sends a new run on to the node whose daemon answers.
func TestClusterTakeoverDaemonGone(t *testing.T) {
	base, tok := clusterBase(t)
	proxy := startDockerProxy(t)
	dead := nodeEnv(t, base, "gone-"+sandgatetest.RandomHex(t, 3))
	dead["DOCKER_HOST"] = proxy.host
	p := startProcess(t, dead)
	withToken(t, p.testServer, tok)
	a := startNode(t, base, tok, "surv-"+sandgatetest.RandomHex(t, 3))

	id := p.submitNoWait(t, "daemon-gone", "sleep", "120")
	p.waitRunning(t, id)
	p.Kill(t)
	proxy.Close()
	t.Cleanup(func() { removeNodeContainers(t, p.Node) })

	v := a.waitFinished(t, id, 60*time.Second)
	if v.Outcome == nil || *v.Outcome != sandgate.OutcomeLost || v.Error == nil ||
		!strings.Contains(v.Error.Message, "does not answer") || !strings.Contains(v.Error.Message, proxy.host) {
		t.Fatalf("run = %v %+v, want lost with the unreachable daemon as its reason", v.Outcome, v.Error)
	}
	ev, ok := findEvent(a.runEvents(t, id), sandgate.EventRunLost)
	if !ok || ev.Node != a.Node || ev.Payload["taken_over"] != true {
		t.Errorf("run.lost = %+v (%v), want one recorded by %s", ev, ok, a.Node)
	}
	taken := a.waitTakeover(t)
	if len(taken) != 1 || taken[0].Payload["docker_reachable"] != false || taken[0].Payload["lost"] != float64(1) {
		t.Fatalf("node.taken_over = %+v, want one with the daemon unreachable and 1 run lost", taken)
	}
	a.verifyTrail(t)

	// A node alive whose daemon went away sends new runs on to a node
	// whose daemon answers.
	sickProxy := startDockerProxy(t)
	sickEnv := nodeEnv(t, base, "sick-"+sandgatetest.RandomHex(t, 3))
	sickEnv["DOCKER_HOST"] = sickProxy.host
	sick := withToken(t, startServerWithEnv(t, sickEnv), tok)
	sickProxy.Close()
	sandgatetest.WaitFor(t, "the registry to see the sick node's daemon gone", 30*time.Second, func() bool {
		n := a.nodes(t)[sick.Node]
		return n.State == "alive" && !n.DockerHealthy
	})
	v = sick.submitWait(t, tok, `{"command":["sh","-c","exit 4"]}`)
	if v.Node != a.Node || v.ExitCode == nil || *v.ExitCode != 4 {
		t.Errorf("a run sent to the node without a daemon ran on %q with exit %v, want on %s with 4", v.Node, v.ExitCode, a.Node)
	}
}

// dockerProxy is a TCP proxy in front of the test's Docker daemon that
// the test can close, as a daemon that goes away.
type dockerProxy struct {
	host string
	ln   net.Listener
	mu   sync.Mutex
	conn []net.Conn
	once sync.Once
}

func startDockerProxy(t *testing.T) *dockerProxy {
	t.Helper()
	target := executortest.DockerHost()
	if target == "" {
		target = "unix:///var/run/docker.sock"
	}
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	network, addr := "tcp", u.Host
	if u.Scheme == "unix" {
		network, addr = "unix", u.Path
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dockerProxy{host: "tcp://" + ln.Addr().String(), ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial(network, addr)
			if err != nil {
				c.Close()
				continue
			}
			d.mu.Lock()
			d.conn = append(d.conn, c, up)
			d.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(d.Close)
	return d
}

// Close stops the proxy and cuts every connection through it.
func (d *dockerProxy) Close() {
	d.once.Do(func() {
		d.ln.Close()
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, c := range d.conn {
			c.Close()
		}
	})
}

// removeNodeContainers removes what a node left on the daemon.
func removeNodeContainers(t *testing.T, node string) {
	t.Helper()
	ids := dockerCLI(t, "", "ps", "-aq", "--filter", "label="+sandgate.LabelNode+"="+node)
	for _, id := range strings.Fields(ids) {
		dockerCLI(t, "", "rm", "-f", id)
	}
}

// TestClusterScheduling holds one team to 2 runs (1 running, 1 queued)
// across two nodes, the first of which has a single container slot: a
// second run sent to the first node goes to the second, which has room;
// a third, sent to the second node (which holds only one of the team's
// runs itself), is refused because the cluster holds two.
func TestClusterScheduling(t *testing.T) {
	base, tok := clusterBase(t)
	base["SANDGATE_POLICY_DIR"] = bundleWith(t, func(c map[string]any) {
		c["team_limits"] = map[string]any{"default": map[string]any{"concurrent": 1, "queued": 1, "memory_mb": 0, "cpus": 0}, "teams": map[string]any{}}
	})
	small := nodeEnv(t, base, "small-"+sandgatetest.RandomHex(t, 3))
	small["SANDGATE_MAX_CONCURRENT"] = "1"
	a := withToken(t, startServerWithEnv(t, small), tok)
	b := startNode(t, base, tok, "roomy-"+sandgatetest.RandomHex(t, 3))
	sandgatetest.WaitFor(t, "both nodes alive", 10*time.Second, func() bool {
		ns := a.nodes(t)
		return ns[a.Node].State == "alive" && ns[b.Node].State == "alive"
	})

	first := a.submitNoWait(t, "sched-1", "sleep", "60")
	a.waitRunning(t, first)
	second := a.submitNoWait(t, "sched-2", "sleep", "60")
	b.waitRunning(t, second)
	for id, node := range map[string]string{first: a.Node, second: b.Node} {
		if v, _ := b.runState(t, id); v.Node != node {
			t.Errorf("run %s went to %q, want %q", id, v.Node, node)
		}
	}
	status, _, body := b.do(t, http.MethodPost, "/v1/runs", `{"command":["true"]}`)
	if status != http.StatusTooManyRequests || apiError(body).Error.Details["scope"] != "cluster" {
		t.Errorf("a third run of the team: %d %s, want 429 for the cluster's count", status, body)
	}
	ctx := context.Background()
	for _, id := range []string{first, second} {
		if _, err := a.Client.Cancel(ctx, id); err != nil {
			t.Errorf("cancel %s: %v", id, err)
		}
	}
	// Their slots are given back: the team may run again.
	sandgatetest.WaitFor(t, "the team's slots to be given back", 30*time.Second, func() bool {
		status, _, _ := b.do(t, http.MethodPost, "/v1/runs?wait=30s", `{"command":["true"]}`)
		return status == http.StatusOK
	})
}

// unmountUnder unmounts every file system mounted under dir, newest
// first, as root's tests leave the workspaces of a killed node.
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			if out, err := exec.Command("umount", "-l", f[4]).CombinedOutput(); err != nil {
				t.Logf("umount %s: %v: %s", f[4], err, out)
			}
		}
	}
}
