package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// cutProxy is a TCP proxy on loopback the test controls: it passes
// connections to network/addr until cut, which closes every connection
// and refuses new ones, until restored.
type cutProxy struct {
	ln            net.Listener
	network, addr string
	mu            sync.Mutex
	up            bool
	conns         map[net.Conn]bool
}

func newCutProxy(t testing.TB, network, addr string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, network: network, addr: addr, up: true, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *cutProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.addr
		if !p.up || target == "" {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		u, err := net.Dial(p.network, target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close(); c.Close() }()
		go func() { _, _ = io.Copy(c, u); c.Close(); u.Close() }()
	}
}

// pointAt sets where new connections go.
func (p *cutProxy) pointAt(addr string) {
	p.mu.Lock()
	p.addr = addr
	p.mu.Unlock()
}

// cut closes every connection through the proxy and refuses new ones.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = false
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	p.up = true
	p.mu.Unlock()
}

// proxiedPostgres is a DSN for dsn's database through a cutProxy to its
// server's Unix socket.
func proxiedPostgres(t testing.TB, dsn string) (string, *cutProxy) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Host, "/") {
		t.Skipf("the test database is not on a Unix socket (%s); the drill proxies one", cfg.Host)
	}
	socket := cfg.Host + "/.s.PGSQL." + strconv.Itoa(int(cfg.Port))
	p := newCutProxy(t, "unix", socket)
	out := "host=127.0.0.1 port=" + strconv.Itoa(p.port()) + " dbname=" + cfg.Database + " sslmode=disable connect_timeout=2"
	if cfg.User != "" {
		out += " user=" + cfg.User
	}
	return out, p
}

// endEvents are the event types that end a run's container: a run has
// exactly one of them in the trail.
var endEvents = []sandgate.EventType{
	sandgate.EventContainerExited, sandgate.EventContainerOOMKilled, sandgate.EventRunTimedOut,
	sandgate.EventRunCancelled, sandgate.EventRunFailed, sandgate.EventRunLost,
}

// proxiedDocker is a DOCKER_HOST for the test's Docker daemon through a
// cutProxy.
func proxiedDocker(t testing.TB) (string, *cutProxy) {
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
	p := newCutProxy(t, network, addr)
	return "tcp://127.0.0.1:" + strconv.Itoa(p.port()), p
}

// cutNode is node b of a partition drill, reached by the database, the
// other node and (when docker) its Docker daemon through proxies the test
// cuts; a is the other node.
type cutNode struct {
	a, b            *testServer
	db, api, docker *cutProxy
	runs            []string
	containers      map[string]string
}

// startCutNodes starts b behind its proxies and a, and runs three runs
// on b that wait for /tmp/go, then exit 3, 0 and 5.
func startCutNodes(t *testing.T, docker bool) *cutNode {
	base, tok := clusterBase(t)
	c := &cutNode{containers: map[string]string{}}
	var dbURL string
	dbURL, c.db = proxiedPostgres(t, base["SANDGATE_DATABASE_URL"])
	c.api = newCutProxy(t, "tcp", "")
	envB := nodeEnv(t, base, "cut-b-"+sandgatetest.RandomHex(t, 3))
	envB["SANDGATE_DATABASE_URL"] = dbURL
	envB["SANDGATE_ADVERTISE_URL"] = "http://127.0.0.1:" + strconv.Itoa(c.api.port())
	if docker {
		envB["DOCKER_HOST"], c.docker = proxiedDocker(t)
	}
	c.b = withToken(t, startServerWithEnv(t, envB), tok)
	c.api.pointAt(strings.TrimPrefix(c.b.URL, "http://"))
	c.a = startNode(t, base, tok, "cut-a-"+sandgatetest.RandomHex(t, 3))
	sandgatetest.WaitFor(t, "both nodes alive", 20*time.Second, func() bool {
		ns := c.a.nodes(t)
		return ns[c.a.Node].State == "alive" && ns[c.b.Node].State == "alive"
	})
	for i, code := range []string{"3", "0", "5"} {
		c.runs = append(c.runs, c.b.submitNoWait(t, "cut-off-"+strconv.Itoa(i), "sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.1; done; exit "+code))
	}
	for _, id := range c.runs {
		c.b.waitRunning(t, id)
		v, _ := c.b.runState(t, id)
		c.containers[id] = v.ContainerID
	}
	return c
}

// release lets the runs' containers end.
func (c *cutNode) release(t *testing.T) {
	for _, id := range c.containers {
		dockerCLI(t, "", "exec", id, "touch", "/tmp/go")
	}
}

// endsBy checks that each run has exactly one end event in the trail,
// recorded by node.
func (c *cutNode) endsBy(t *testing.T, node string) {
	t.Helper()
	for _, id := range c.runs {
		var evs []sandgate.AuditRecord
		var n map[sandgate.EventType]int
		ends := 0
		sandgatetest.WaitFor(t, "the end of run "+id+" in the trail", 60*time.Second, func() bool {
			evs = c.a.runEvents(t, id)
			n, ends = eventCounts(evs), 0
			for _, typ := range endEvents {
				ends += n[typ]
			}
			return ends > 0
		})
		if ends != 1 {
			t.Errorf("run %s has %d end events (%v); want one", id, ends, n)
		}
		for _, ev := range evs {
			if slices.Contains(endEvents, ev.Type) && ev.Node != node {
				t.Errorf("run %s's end (%s) recorded by %s, want %s", id, ev.Type, ev.Node, node)
			}
		}
	}
}

// TestClusterFenceCutOffNode is the partition drill: node b runs three
// runs, then TCP proxies the test controls cut b off from the database,
// from the other node and from its Docker daemon. Node a takes b over (b
// neither heartbeats nor answers at its address, and its daemon cannot be
// asked whether b holds it), fences b's chains and records b's runs lost
// (their daemon does not answer). b, which lives on, records their ends
// too, into its spool. When the cut heals, b's spooled ends are refused
// by the database: each run has exactly one end event in the trail, a's.
// b knows it is fenced: /readyz says so, its GET /v1/nodes row and a's
// show the events it holds, its metrics, and a run sent to it is not
// started there. The trail verifies.
func TestClusterFenceCutOffNode(t *testing.T) {
	c := startCutNodes(t, true)
	a, b := c.a, c.b
	c.db.cut()
	c.api.cut()
	c.docker.cut()
	sandgatetest.WaitFor(t, "a to take b over", 90*time.Second, func() bool { return a.nodes(t)[b.Node].State == "gone" })
	for _, id := range c.runs {
		a.waitFinished(t, id, 60*time.Second)
	}
	// b reaches its daemon again; its runs end, and b records their ends
	// into its spool (it cannot reach the database).
	c.docker.restore()
	c.release(t)
	sandgatetest.WaitFor(t, "b to spool the runs' ends", 90*time.Second, func() bool {
		return strings.Count(b.logs.String(), `"msg":"run finished"`) >= len(c.runs)
	})
	c.db.restore()
	c.api.restore()

	// b reaches the database again: its spooled ends are refused as
	// fenced, and held.
	sandgatetest.WaitFor(t, "b's spool to be delivered or held", 60*time.Second, func() bool {
		return b.nodes(t)[b.Node].HeldEvents >= int64(len(c.runs)) || strings.Contains(b.logs.String(), "spooled events delivered")
	})
	c.endsBy(t, a.Node)

	sandgatetest.WaitFor(t, "b to know it is fenced", 60*time.Second, func() bool {
		status, _, body := b.do(t, http.MethodGet, "/readyz", "")
		return status == http.StatusServiceUnavailable && strings.Contains(string(body), "taken over")
	})
	sandgatetest.WaitFor(t, "b's held events on its row, seen from a", 60*time.Second, func() bool {
		return a.nodes(t)[b.Node].HeldEvents >= int64(len(c.runs))
	})
	self := b.nodes(t)[b.Node]
	if self.Fenced == "" || !strings.Contains(self.Fenced, a.Node) || self.HeldEvents < int64(len(c.runs)) {
		t.Errorf("b's own view: %+v, want fenced by %s with its held events", self, a.Node)
	}
	if _, _, m := b.do(t, http.MethodGet, "/metrics", ""); !strings.Contains(string(m), "sandgate_node_fenced 1") ||
		!strings.Contains(string(m), "sandgate_audit_held_events ") || strings.Contains(string(m), "sandgate_audit_held_events 0\n") {
		t.Errorf("b's metrics do not show the fence and the events it holds")
	}
	if !strings.Contains(b.logs.String(), "this node is fenced") {
		t.Error("b did not log that it is fenced")
	}

	// b starts no work: a run sent to it runs on a, or is refused.
	status, _, body := b.do(t, http.MethodPost, "/v1/runs?wait=60s", `{"command":["true"]}`)
	var v api.RunView
	_ = json.Unmarshal(body, &v)
	if status == http.StatusOK && v.Node == b.Node || status != http.StatusOK && status != http.StatusServiceUnavailable {
		t.Errorf("a run sent to the fenced node: %d %s; want it run on %s, or 503", status, body, a.Node)
	}
	a.verifyTrail(t)
}

// TestClusterLeaseHeldNodeNotTakenOver is the partition drill with b cut
// off from the database and the other node but not from its Docker
// daemon, which sees b renew its node lease there: b is alive, so a does
// not take it over (before, a took b over, waited for b's lease to lapse,
// and recorded each run failed with a conflict while its container ran
// on under b). b's runs end during the cut and are recorded once, by b,
// when the database is back; nothing is fenced.
func TestClusterLeaseHeldNodeNotTakenOver(t *testing.T) {
	c := startCutNodes(t, false)
	a, b := c.a, c.b
	c.db.cut()
	c.api.cut()
	sandgatetest.WaitFor(t, "a to find b's lease held", 90*time.Second, func() bool {
		return strings.Contains(a.logs.String(), "its daemon sees its lease renewed by")
	})
	c.release(t)
	sandgatetest.WaitFor(t, "b to spool the runs' ends", 60*time.Second, func() bool {
		return strings.Count(b.logs.String(), `"msg":"run finished"`) >= len(c.runs)
	})
	c.db.restore()
	c.api.restore()
	for _, id := range c.runs {
		v := a.waitFinished(t, id, 90*time.Second)
		if v.Outcome == nil || *v.Outcome == sandgate.OutcomeError {
			t.Errorf("run %s: outcome %v, want its real end", id, v.Outcome)
		}
	}
	c.endsBy(t, b.Node)
	if n := a.nodes(t)[b.Node]; n.TakenOverBy != "" || n.Fenced != "" {
		t.Errorf("b: %+v, want not taken over nor fenced", n)
	}
	if strings.Contains(a.logs.String(), "taking over a node whose heartbeat lapsed") {
		t.Error("a took b over")
	}
	a.verifyTrail(t)
}

// TestClusterLateNodeThatAnswersIsNotTakenOver is the variant of the
// partition drill with the database cut off from node b alone: b's
// heartbeat lapses, but b answers at its address with its name, so node
// a does not take it over (a late heartbeat is not evidence enough). b's
// run ends during the cut and is recorded once, by b, when the database
// is back; nothing is fenced.
func TestClusterLateNodeThatAnswersIsNotTakenOver(t *testing.T) {
	base, tok := clusterBase(t)
	dbURL, dbProxy := proxiedPostgres(t, base["SANDGATE_DATABASE_URL"])
	envB := nodeEnv(t, base, "late-b-"+sandgatetest.RandomHex(t, 3))
	envB["SANDGATE_DATABASE_URL"] = dbURL
	b := withToken(t, startServerWithEnv(t, envB), tok)
	a := startNode(t, base, tok, "late-a-"+sandgatetest.RandomHex(t, 3))
	sandgatetest.WaitFor(t, "both nodes alive", 20*time.Second, func() bool {
		ns := a.nodes(t)
		return ns[a.Node].State == "alive" && ns[b.Node].State == "alive"
	})
	id := b.submitNoWait(t, "late-run", "sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.1; done; exit 6")
	b.waitRunning(t, id)
	v, _ := b.runState(t, id)

	dbProxy.cut()
	sandgatetest.WaitFor(t, "a to see b lapsed", 60*time.Second, func() bool { return a.nodes(t)[b.Node].State == "lapsed" })
	sandgatetest.WaitFor(t, "a to find b late but answering", 60*time.Second, func() bool {
		return strings.Contains(a.logs.String(), "it is alive: it is not taken over")
	})
	dockerCLI(t, "", "exec", v.ContainerID, "touch", "/tmp/go")
	sandgatetest.WaitFor(t, "b to see its run end", 30*time.Second, func() bool {
		return strings.Contains(b.logs.String(), `"msg":"run finished"`)
	})
	if st := a.nodes(t)[b.Node].State; st == "gone" {
		t.Fatalf("b was taken over while it answered")
	}
	dbProxy.restore()

	if v := a.waitFinished(t, id, 60*time.Second); v.ExitCode == nil || *v.ExitCode != 6 || v.Node != b.Node {
		t.Errorf("b's run = %+v, want exit 6 on %s", v, b.Node)
	}
	var n map[sandgate.EventType]int
	sandgatetest.WaitFor(t, "the end of b's run in the trail", 30*time.Second, func() bool {
		n = eventCounts(a.runEvents(t, id))
		return n[sandgate.EventContainerRemoved] > 0
	})
	ends := 0
	for _, typ := range endEvents {
		ends += n[typ]
	}
	if ends != 1 || n[sandgate.EventContainerExited] != 1 {
		t.Errorf("b's run has %d end events (%v); want one container.exited", ends, n)
	}
	if taken := a.auditOfType(t, sandgate.EventNodeTakenOver); len(taken) != 0 {
		t.Errorf("node.taken_over recorded: %+v", taken)
	}
	if st, _, body := b.do(t, http.MethodGet, "/readyz", ""); st != http.StatusOK {
		t.Errorf("b's readiness once the database is back: %d %s", st, body)
	}
}
