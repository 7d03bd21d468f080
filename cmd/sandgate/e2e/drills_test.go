//go:build cluster

package e2e

// The cluster drills (make test-cluster): two gateways, each a process of
// the built binary with a node name and a Docker daemon of its own, one
// Postgres primary with a synchronous streaming replica, all on this
// machine (deploy/cluster.sh). SANDGATE_CLUSTER_SHORT=1 makes the load
// phases shorter (the form make test runs).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// cluster is what deploy/cluster.sh up made.
type cluster struct {
	script string
	env    map[string]string // SANDGATE_CLUSTER_* as the script prints them
	// shared is what every node of the drills shares: a tokens file, the
	// cluster secret, the mask key, the registry's timing and the
	// cluster root's public key, which every verifier trusts.
	shared map[string]string
	token  string
	// rootKey is the cluster's root key, kept off the nodes, which
	// endorses each node's checkpoint key as an operator would (audit
	// endorse-key).
	rootKey string
}

// The registry's timing in the drills: a node is taken over after
// drillLapse without a heartbeat, longer than the database failover's
// gap, so that the failover drill takes no node over.
const (
	drillHeartbeat = "500ms"
	drillLapse     = 6 * time.Second
)

// clusterUp runs deploy/cluster.sh up and, when the test ends, down
// (unless SANDGATE_CLUSTER_KEEP=1).
func clusterUp(t *testing.T) *cluster {
	t.Helper()
	executortest.RequireDocker(t) // the sandbox image the script copies
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the cluster drills need root (a second dockerd, pg_createcluster); CI=true")
		}
		t.Skip("the cluster drills need root (a second dockerd, pg_createcluster)")
	}
	script, err := filepath.Abs("../../../deploy/cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{script: script, env: map[string]string{}}
	tokens, tok := writeTokensFile(t, clusterPrincipals)
	dir := t.TempDir()
	secret, mask := filepath.Join(dir, "cluster.secret"), filepath.Join(dir, "mask.key")
	for _, f := range []string{secret, mask} {
		if err := os.WriteFile(f, []byte(sandgatetest.RandomHex(t, 32)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.token = tok["ops"]
	var rootPub string
	c.rootKey, rootPub = clusterRoot(t, dir)
	// Registered before cluster.sh down's cleanup, so it runs after it:
	// the drills leave the host's interfaces as they found them.
	keepsHostInterfaces(t)
	c.shared = map[string]string{
		"SANDGATE_DEV":                 "0",
		"SANDGATE_TOKENS_FILE":         tokens,
		"SANDGATE_CLUSTER_SECRET_FILE": secret,
		"SANDGATE_MASK_KEY_FILE":       mask,
		"SANDGATE_NODE_HEARTBEAT":      drillHeartbeat,
		"SANDGATE_NODE_LAPSE":          drillLapse.String(),
		// Every verifier of the drills trusts the cluster's root: the
		// nodes' GET /v1/audit/verify and the final audit verify.
		"SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE": rootPub,
		// One team's runs are the drills' whole workload.
		"SANDGATE_TEAM_SHARE": "100",
	}
	if os.Getenv("SANDGATE_CLUSTER_KEEP") != "1" {
		t.Cleanup(func() {
			if out, err := exec.Command("bash", script, "down").CombinedOutput(); err != nil {
				t.Errorf("cluster.sh down: %v\n%s", err, out)
			}
		})
	}
	start := time.Now()
	out := c.sh(t, "up")
	t.Logf("cluster.sh up: %v", time.Since(start).Round(100*time.Millisecond))
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && strings.HasPrefix(k, "SANDGATE_CLUSTER_") {
			c.env[k] = strings.Trim(v, "'")
		}
	}
	for _, k := range []string{"SANDGATE_CLUSTER_DSN", "SANDGATE_CLUSTER_REPLICA_DSN", "SANDGATE_CLUSTER_DOCKER_HOST"} {
		if c.env[k] == "" {
			t.Fatalf("cluster.sh up printed no %s:\n%s", k, out)
		}
	}
	return c
}

// sh runs the script with args and returns its standard output.
func (c *cluster) sh(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", append([]string{c.script}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cluster.sh %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// startNode starts one gateway of the cluster on dockerHost.
func (c *cluster) startNode(t *testing.T, name, dockerHost string) *procServer {
	t.Helper()
	state := t.TempDir()
	env := map[string]string{
		"SANDGATE_DATABASE_URL":  c.env["SANDGATE_CLUSTER_DSN"],
		"SANDGATE_SPOOL_DIR":     state + "/spool",
		"SANDGATE_VOLUME_DIR":    state + "/volumes",
		"SANDGATE_WORKSPACE_DIR": state + "/workspaces",
		"SANDGATE_UPLOAD_DIR":    state + "/uploads",
		"SANDGATE_NODE":          name,
		"DOCKER_HOST":            dockerHost,
		// The node's own key, endorsed by the cluster's root before the
		// node first starts with it.
		"SANDGATE_SIGNING_KEY_FILE": state + "/checkpoint.key",
	}
	for k, v := range c.shared {
		env[k] = v
	}
	endorseNodeKey(t, env, c.rootKey)
	p := startProcess(t, env)
	withToken(t, p.testServer, c.token)
	return p
}

// The load: runs that fail with a known code after a while, and runs that
// succeed at once.
var (
	slowRun = []string{"sh", "-c", "sleep 2; exit 7"}
	fastRun = []string{"true"}
)

// submission is one POST /v1/runs of the load and its answer.
type submission struct {
	node       string
	command    []string
	at         time.Time
	status     int
	code       string // the error's code, when not 202
	retryAfter string
	runID      string
}

// wantExit is the exit code the submission's command ends with.
func (s submission) wantExit() int {
	if len(s.command) == 3 {
		return 7
	}
	return 0
}

// submitRaw posts a run to p without failing the test: it is called from
// the load's goroutines.
func submitRaw(p *procServer, command []string) submission {
	sub := submission{node: p.Node, command: command, at: time.Now()}
	body, _ := json.Marshal(map[string]any{"command": command})
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/v1/runs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.Token)
	req.Header.Set("Content-Type", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := p.HTTP.Do(req.WithContext(ctx))
	if err != nil {
		sub.code = "transport: " + err.Error()
		return sub
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	sub.status, sub.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	if resp.StatusCode == http.StatusAccepted {
		var v api.RunView
		if err := json.Unmarshal(data, &v); err == nil {
			sub.runID = v.ID
		}
		return sub
	}
	var e api.ErrorBody
	_ = json.Unmarshal(data, &e)
	sub.code = string(e.Error.Code)
	return sub
}

// load submits runs to every node, alternating slow and fast, until stop
// is closed.
type load struct {
	mu   sync.Mutex
	subs []submission
	stop chan struct{}
	wg   sync.WaitGroup
}

func startLoad(nodes []*procServer, workersPerNode int, pause time.Duration) *load {
	l := &load{stop: make(chan struct{})}
	for _, n := range nodes {
		for w := range workersPerNode {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for i := w; ; i++ {
					select {
					case <-l.stop:
						return
					default:
					}
					cmd := fastRun
					if i%2 == 0 {
						cmd = slowRun
					}
					s := submitRaw(n, cmd)
					l.mu.Lock()
					l.subs = append(l.subs, s)
					l.mu.Unlock()
					select {
					case <-l.stop:
						return
					case <-time.After(pause):
					}
				}
			}()
		}
	}
	return l
}

func (l *load) halt() []submission {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	sort.Slice(l.subs, func(i, j int) bool { return l.subs[i].at.Before(l.subs[j].at) })
	return l.subs
}

// count waits until cond holds for the submissions so far.
func (l *load) waitFor(t *testing.T, what string, cond func([]submission) bool) {
	t.Helper()
	sandgatetest.WaitFor(t, what, 2*time.Minute, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return cond(l.subs)
	})
}

// metric reads one sample of a gateway's /metrics.
func metric(t *testing.T, p *procServer, name string) float64 {
	t.Helper()
	resp, err := http.Get(p.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// drillReport is what a drill reports.
type drillReport struct {
	submitted, admitted, refused, finished int
	limited                                int               // 429: the team's limits on a gateway
	uncertain                              int               // refused after a commit cut mid-flight: run.failed recorded
	lost                                   map[string]string // run → reason
	spooled, redelivered, present          float64
	duplicates                             int
}

func (r drillReport) String() string {
	return fmt.Sprintf("runs submitted %d, admitted %d, refused %d (503; %d of them after a commit cut mid-flight, recorded as run.failed), rate-limited %d (429), finished %d, lost %d %v; events spooled %.0f, delivered %.0f (+%.0f found present); duplicates %d",
		r.submitted, r.admitted, r.refused, r.uncertain, r.limited, r.finished, len(r.lost), r.lost, r.spooled, r.redelivered, r.present, r.duplicates)
}

// TestClusterDrills runs the drills on one cluster: the database fails over
// under load, then one node's Docker daemon stops.
func TestClusterDrills(t *testing.T) {
	short := os.Getenv("SANDGATE_CLUSTER_SHORT") == "1"
	c := clusterUp(t)
	nodeA := c.startNode(t, "node-a", executortest.DockerHost())
	nodeB := c.startNode(t, "node-b", c.env["SANDGATE_CLUSTER_DOCKER_HOST"])
	nodes := []*procServer{nodeA, nodeB}
	for _, n := range nodes {
		status, body := readyzBody(t, n)
		if status != http.StatusOK || !strings.Contains(body, `"name":"database"`) || !strings.Contains(body, "primary 127.0.0.1:") {
			t.Fatalf("%s /readyz before the drill: %d %s", n.Node, status, body)
		}
	}

	t.Run("DatabaseFailover", func(t *testing.T) { databaseFailover(t, c, nodes, short) })
	t.Run("DockerDaemonDown", func(t *testing.T) { dockerDaemonDown(t, c, nodeA, nodeB) })
	t.Run("GatewayKilled", func(t *testing.T) { gatewayKilled(t, nodeA, nodeB) })

	// The survivor's own verify, as its operator sees it: the root
	// vouches for both nodes' keys.
	if status, _, body := nodeA.do(t, http.MethodGet, "/v1/audit/verify", ""); status != http.StatusOK || !strings.Contains(string(body), `"ok":true`) {
		t.Errorf("node-a GET /v1/audit/verify: %d %s", status, body)
	}
	// Clean stops (each writes its final checkpoint), then the trail is
	// verified with the CLI, as an auditor would: with the cluster root's
	// public key (and whatever key file this host has at the default
	// path, which is no node's: issue #26).
	for _, n := range nodes {
		if err := n.Stop(); err != nil {
			t.Errorf("stop %s: %v", n.Node, err)
		}
	}
	verify := exec.Command(sandgateBinary(t), "audit", "verify")
	// As on a machine where make run or the bundle test left a key at
	// the default path (issue #26): a key file that is no node's.
	home := t.TempDir()
	if _, err := proof.LoadSigningKey(filepath.Join(home, "sandgate", "checkpoint.key"), true); err != nil {
		t.Fatal(err)
	}
	verify.Env = append(os.Environ(), "SANDGATE_DATABASE_URL="+c.env["SANDGATE_CLUSTER_DSN"], "XDG_STATE_HOME="+home,
		"SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE="+c.shared["SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE"])
	out, err := verify.CombinedOutput()
	if err != nil {
		t.Fatalf("sandgate audit verify: %v\n%s", err, out)
	}
	var rep proof.Report
	if err := json.Unmarshal(out, &rep); err != nil || !rep.OK {
		t.Fatalf("sandgate audit verify: %v\n%s", err, out)
	}
	t.Logf("sandgate audit verify: ok, %d events checked, %d problems, %d keys, anchors %+v", rep.Checked, len(rep.Problems), len(rep.Keys), rep.Anchors)
}

// readyzBody returns /readyz's status and body.
func readyzBody(t *testing.T, p *procServer) (int, string) {
	t.Helper()
	resp, err := http.Get(p.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// databaseFailover kills the primary under load across both nodes and
// promotes the replica.
func databaseFailover(t *testing.T, c *cluster, nodes []*procServer, short bool) {
	phase := 3 * time.Second
	if short {
		phase = time.Second
	}
	l := startLoad(nodes, 2, 100*time.Millisecond)
	time.Sleep(phase)
	// Some slow runs are in flight when the primary dies.
	l.waitFor(t, "runs admitted before the crash", func(s []submission) bool { return len(s) >= 8 })

	killed := time.Now()
	c.sh(t, "kill-primary")
	l.waitFor(t, "an admission refused after the crash", func(subs []submission) bool {
		for _, s := range subs {
			if s.at.After(killed) && s.status == http.StatusServiceUnavailable {
				return true
			}
		}
		return false
	})
	// While no server takes writes, readiness says so on every node.
	for _, n := range nodes {
		status, body := readyzBody(t, n)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "no writable Postgres among") {
			t.Errorf("%s /readyz with no primary: %d %s", n.Node, status, body)
		} else {
			t.Logf("%s /readyz with no primary: %s", n.Node, body)
		}
	}
	time.Sleep(phase) // the operator (or a failover manager) takes a moment
	// The outage lasts until a run in flight has ended into a spool: the
	// drill proves spooled events delivered after the promotion, so it
	// must have some, however fast this machine answers.
	sandgatetest.WaitFor(t, "an event spooled while no primary exists", 2*time.Minute, func() bool {
		var spooled float64
		for _, n := range nodes {
			spooled += metric(t, n, "sandgate_audit_spooled_events_total")
		}
		return spooled > 0
	})

	c.sh(t, "promote")
	promoted := time.Now()
	l.waitFor(t, "an admission after the promotion", func(subs []submission) bool {
		for _, s := range subs {
			if s.at.After(promoted) && s.status == http.StatusAccepted {
				return true
			}
		}
		return false
	})
	time.Sleep(phase)
	subs := l.halt()

	// Every answer is 202, or 503 with a code and Retry-After.
	var rep drillReport
	rep.lost = map[string]string{}
	var firstRefused, lastRefused, firstAfter time.Time
	var admitted []submission
	for _, s := range subs {
		rep.submitted++
		switch {
		case s.status == http.StatusAccepted && s.runID != "":
			rep.admitted++
			admitted = append(admitted, s)
			if s.at.After(promoted) && firstAfter.IsZero() {
				firstAfter = s.at
			}
		case s.status == http.StatusServiceUnavailable &&
			(s.code == string(sandgate.CodeAuditUnavailable) || s.code == string(sandgate.CodeUnavailable)) && s.retryAfter != "":
			rep.refused++
			if firstRefused.IsZero() {
				firstRefused = s.at
			}
			lastRefused = s.at
			if s.at.Before(killed) {
				t.Errorf("refused before the crash: %+v", s)
			}
		case s.status == http.StatusTooManyRequests && s.code == string(sandgate.CodeRateLimited):
			// The team's concurrency on that gateway: runs whose end waits
			// for the database hold their slots.
			rep.limited++
		default:
			t.Errorf("submission answered neither 202, 503 with a code and Retry-After, nor 429: %+v", s)
		}
	}
	if rep.refused == 0 {
		t.Error("no admission was refused while no primary existed")
	}

	// Every admitted run ends with its real exit code.
	byNode := map[string]*procServer{}
	for _, n := range nodes {
		byNode[n.Node] = n
	}
	for _, s := range admitted {
		v := byNode[s.node].waitFinished(t, s.runID, 3*time.Minute)
		rep.finished++
		want := sandgate.OutcomeSucceeded
		if s.wantExit() != 0 {
			want = sandgate.OutcomeFailed
		}
		if outcomeOf(v) != want || v.ExitCode == nil || *v.ExitCode != s.wantExit() {
			reason := string(outcomeOf(v))
			if v.Error != nil {
				reason += ": " + v.Error.Message
			}
			rep.lost[s.runID] = reason
			t.Errorf("run %s on %s (%v): outcome %s exit %v, want %s exit %d", s.runID, s.node, s.command, outcomeOf(v), v.ExitCode, want, s.wantExit())
		}
	}

	// No lifecycle event lost, none twice: in the new primary's trail.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.env["SANDGATE_CLUSTER_REPLICA_DSN"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	sandgatetest.WaitFor(t, "every node's spool delivered", time.Minute, func() bool {
		for _, n := range nodes {
			if metric(t, n, "sandgate_audit_spool_bytes") != 0 || metric(t, n, "sandgate_audit_queue_depth") != 0 {
				return false
			}
		}
		return true
	})
	ids := make([]string, len(admitted))
	for i, s := range admitted {
		ids[i] = s.runID
	}
	lifecycle := []sandgate.EventType{sandgate.EventRunRequested, sandgate.EventAdmissionAllowed, sandgate.EventContainerCreated,
		sandgate.EventContainerStarted, sandgate.EventContainerExited, sandgate.EventContainerRemoved}
	rows, err := conn.Query(ctx, `SELECT run_id, type, count(*) FROM audit_events WHERE run_id = ANY($1) GROUP BY 1, 2`, ids)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]map[sandgate.EventType]int{}
	for rows.Next() {
		var run, typ string
		var n int
		if err := rows.Scan(&run, &typ, &n); err != nil {
			t.Fatal(err)
		}
		if counts[run] == nil {
			counts[run] = map[sandgate.EventType]int{}
		}
		counts[run][sandgate.EventType(typ)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	missing := 0
	for _, id := range ids {
		for _, typ := range lifecycle {
			switch n := counts[id][typ]; {
			case n == 0:
				missing++
				t.Errorf("run %s: no %s event", id, typ)
			case n > 1:
				rep.duplicates += n - 1
				t.Errorf("run %s: %d %s events", id, n, typ)
			}
		}
	}
	var dupIDs int
	if err := conn.QueryRow(ctx, `SELECT count(*) - count(DISTINCT event_id) FROM audit_events`).Scan(&dupIDs); err != nil {
		t.Fatal(err)
	}
	rep.duplicates += dupIDs
	// Never a half-done run: an admission the trail holds either has its
	// run stored, or a run.failed that says nothing ran.
	var halfDone int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM audit_events a
		WHERE a.type = 'admission.allowed' AND a.run_id IS NOT NULL
		AND NOT EXISTS (SELECT FROM runs r WHERE r.id = a.run_id)
		AND NOT EXISTS (SELECT FROM audit_events f WHERE f.run_id = a.run_id AND f.type = 'run.failed')`).Scan(&halfDone); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE type = 'run.failed'
		AND payload->>'error' LIKE 'the admission''s commit could not be confirmed%'`).Scan(&rep.uncertain); err != nil {
		t.Fatal(err)
	}
	if halfDone != 0 {
		t.Errorf("%d admissions with neither a stored run nor a run.failed event", halfDone)
	}
	for _, n := range nodes {
		rep.spooled += metric(t, n, "sandgate_audit_spooled_events_total")
		rep.redelivered += metric(t, n, "sandgate_audit_redelivered_events_total")
		rep.present += metric(t, n, "sandgate_audit_redelivered_present_total")
	}
	if rep.spooled == 0 || rep.redelivered+rep.present != rep.spooled {
		t.Errorf("spooled %.0f, delivered %.0f + found present %.0f: want every spooled event delivered", rep.spooled, rep.redelivered, rep.present)
	}
	if rep.duplicates != 0 || missing != 0 {
		t.Errorf("%d lifecycle events missing, %d duplicates", missing, rep.duplicates)
	}
	for _, n := range nodes {
		status, body := readyzBody(t, n)
		if status != http.StatusOK || !strings.Contains(body, "primary "+c.replicaAddr()) {
			t.Errorf("%s /readyz after the failover: %d %s", n.Node, status, body)
		}
	}
	t.Logf("failover: primary killed at 0, first 503 at +%v, promoted at +%v, first 202 after the promotion at +%v (%v after it); admissions refused for %v",
		firstRefused.Sub(killed).Round(time.Millisecond), promoted.Sub(killed).Round(time.Millisecond),
		firstAfter.Sub(killed).Round(time.Millisecond), firstAfter.Sub(promoted).Round(time.Millisecond),
		lastRefused.Sub(firstRefused).Round(time.Millisecond))
	t.Logf("database failover drill: %s", rep)
}

// replicaAddr is the replica's host:port.
func (c *cluster) replicaAddr() string {
	var host, port string
	for _, f := range strings.Fields(c.env["SANDGATE_CLUSTER_REPLICA_DSN"]) {
		if v, ok := strings.CutPrefix(f, "host="); ok {
			host = v
		}
		if v, ok := strings.CutPrefix(f, "port="); ok {
			port = v
		}
	}
	return host + ":" + port
}

// dockerDaemonDown stops node B's Docker daemon: node B says so and its
// new runs fail with DOCKER-UNAVAILABLE, node A keeps running runs; with
// the daemon back, node B runs again.
func dockerDaemonDown(t *testing.T, c *cluster, nodeA, nodeB *procServer) {
	inflight := submitRaw(nodeB, []string{"sh", "-c", "sleep 30"})
	if inflight.status != http.StatusAccepted {
		t.Fatalf("run on node B: %+v", inflight)
	}
	sandgatetest.WaitFor(t, "the run on node B to start", time.Minute, func() bool {
		v, ok := nodeB.runState(t, inflight.runID)
		return ok && v.State == sandgate.StateRunning
	})
	c.sh(t, "docker-stop")

	status, body := readyzBody(t, nodeB)
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "docker:") {
		t.Errorf("node B /readyz with its daemon down: %d %s", status, body)
	}
	var rep drillReport
	rep.lost = map[string]string{}
	// The registry hears of it with node B's next heartbeat; from then on
	// node B sends new runs on to node A, which has a daemon and room.
	sandgatetest.WaitFor(t, "the registry to see node B's daemon down", time.Minute, func() bool {
		n, ok := nodeA.nodes(t)["node-b"]
		return ok && !n.DockerHealthy
	})
	for _, cmd := range [][]string{fastRun, slowRun, fastRun} {
		s := submitRaw(nodeB, cmd)
		rep.submitted++
		if s.status != http.StatusAccepted {
			t.Fatalf("run on node B with its daemon down: %+v, want it sent on to node A", s)
		}
		rep.admitted++
		v := nodeB.waitFinished(t, s.runID, 3*time.Minute)
		rep.finished++
		if v.Node != "node-a" || v.ExitCode == nil || *v.ExitCode != s.wantExit() {
			t.Errorf("run sent to node B with its daemon down: node %q outcome %s exit %s error %+v, want it run on node-a with exit %d",
				v.Node, outcomeOf(v), exitText(v.ExitCode), v.Error, s.wantExit())
		}
	}
	// Node A keeps working.
	for _, cmd := range [][]string{slowRun, fastRun, fastRun} {
		s := submitRaw(nodeA, cmd)
		rep.submitted++
		if s.status != http.StatusAccepted {
			t.Fatalf("run on node A while node B's daemon is down: %+v", s)
		}
		rep.admitted++
		v := nodeA.waitFinished(t, s.runID, 3*time.Minute)
		rep.finished++
		if v.ExitCode == nil || *v.ExitCode != s.wantExit() {
			t.Errorf("run on node A: outcome %s exit %v, want exit %d", outcomeOf(v), v.ExitCode, s.wantExit())
		}
	}

	// The run that was in flight on node B when its daemon stopped: node
	// B is alive and ends it itself (Docker stopped its container: an end
	// that is not the program's, never recorded as its exit). Takeover is
	// for a node that is gone (GatewayKilled).
	v, _ := nodeB.runState(t, inflight.runID)
	reason := string(v.State) + "/" + string(outcomeOf(v))
	if v.Error != nil {
		reason += ": " + v.Error.Message
	}
	t.Logf("run in flight on node B when its daemon stopped: %s", reason)

	c.sh(t, "docker-start")
	sandgatetest.WaitFor(t, "node B ready with its daemon back", 2*time.Minute, func() bool {
		status, _ := readyzBody(t, nodeB)
		return status == http.StatusOK
	})
	sandgatetest.WaitFor(t, "the in-flight run on node B to end", 2*time.Minute, func() bool {
		v, ok := nodeB.runState(t, inflight.runID)
		return ok && v.State == sandgate.StateFinished
	})
	v, _ = nodeB.runState(t, inflight.runID)
	reason = string(outcomeOf(v))
	if v.Error != nil {
		reason += ": " + v.Error.Message
	}
	rep.submitted++
	rep.admitted++
	rep.finished++
	rep.lost[inflight.runID] = reason
	s := submitRaw(nodeB, []string{"sh", "-c", "exit 3"})
	rep.submitted++
	if s.status != http.StatusAccepted {
		t.Fatalf("run on node B with its daemon back: %+v", s)
	}
	rep.admitted++
	if v := nodeB.waitFinished(t, s.runID, 3*time.Minute); v.ExitCode == nil || *v.ExitCode != 3 {
		t.Errorf("run on node B with its daemon back: outcome %s exit %v, want exit 3", outcomeOf(v), v.ExitCode)
	}
	rep.finished++
	if o := outcomeOf(v); o == sandgate.OutcomeSucceeded || o == sandgate.OutcomeFailed {
		t.Errorf("the run in flight when node B's daemon stopped ended %s (%s): Docker's stop is not the program's exit", o, reason)
	}
	t.Logf("docker daemon drill: %s", rep)
}

// exitText is an exit code for a message.
func exitText(code *int) string {
	if code == nil {
		return "none"
	}
	return strconv.Itoa(*code)
}

// gatewayKilled SIGKILLs node B with runs in flight on its daemon: once
// its heartbeat lapses, node A (the one survivor) takes it over, adopts
// the containers through node B's Docker daemon (its DOCKER_HOST, the
// second daemon's socket) and finishes the runs with their real exit
// codes; node B's chain is closed by node A's key (verified at the end
// of TestClusterDrills).
func gatewayKilled(t *testing.T, nodeA, nodeB *procServer) {
	var rep drillReport
	rep.lost = map[string]string{}
	cmds := [][]string{{"sh", "-c", "sleep 4; exit 7"}, {"sh", "-c", "sleep 4; exit 3"}, {"sh", "-c", "sleep 5"}}
	var subs []submission
	for _, cmd := range cmds {
		s := submitRaw(nodeB, cmd)
		rep.submitted++
		if s.status != http.StatusAccepted {
			t.Fatalf("run on node B: %+v", s)
		}
		rep.admitted++
		subs = append(subs, s)
	}
	for _, s := range subs {
		sandgatetest.WaitFor(t, "the runs on node B to start", time.Minute, func() bool {
			v, ok := nodeB.runState(t, s.runID)
			return ok && v.State == sandgate.StateRunning
		})
	}
	killed := time.Now()
	nodeB.Kill(t)
	for _, s := range subs {
		v := nodeA.waitFinished(t, s.runID, 2*time.Minute)
		rep.finished++
		want := map[string]int{"sleep 4; exit 7": 7, "sleep 4; exit 3": 3, "sleep 5": 0}[s.command[2]]
		if v.ExitCode == nil || *v.ExitCode != want {
			t.Errorf("run %q of the killed node: outcome %s exit %s error %+v, want its real exit %d", s.command[2], outcomeOf(v), exitText(v.ExitCode), v.Error, want)
			if outcomeOf(v) == sandgate.OutcomeLost && v.Error != nil {
				rep.lost[s.runID] = v.Error.Message
			}
		}
	}
	var taken []sandgate.AuditRecord
	sandgatetest.WaitFor(t, "node.taken_over and audit.chain_closed", time.Minute, func() bool {
		taken = nodeA.auditOfType(t, sandgate.EventNodeTakenOver)
		return len(taken) > 0 && len(nodeA.auditOfType(t, sandgate.EventAuditChainClosed)) > 0
	})
	if len(taken) != 1 || taken[0].Payload["dead_node"] != "node-b" || taken[0].Node != "node-a" {
		t.Errorf("node.taken_over = %+v, want one, of node-b by node-a", taken)
	} else {
		// Runs of the earlier drills still unfinished on node B are taken
		// over with the three: every one is adopted, none lost.
		adopted, _ := taken[0].Payload["adopted"].(float64)
		runs, _ := taken[0].Payload["runs"].(float64)
		lost, _ := taken[0].Payload["lost"].(float64)
		if int(adopted) < len(subs) || adopted != runs || lost != 0 || taken[0].Payload["docker_reachable"] != true {
			t.Errorf("node.taken_over payload %v, want every run (at least these %d) adopted through a reachable daemon, none lost", taken[0].Payload, len(subs))
		}
	}
	if n := nodeA.nodes(t)["node-b"]; n.State != "gone" || n.TakenOverBy != "node-a" {
		t.Errorf("GET /v1/nodes: node-b %+v, want gone, taken over by node-a", n)
	}
	t.Logf("gateway killed drill: %s; node B taken over and its runs finished %v after the kill (lapse %v)", rep, time.Since(killed).Round(100*time.Millisecond), drillLapse)
}

// keepsHostInterfaces checks, when the test ends, that every network
// interface of the host present now is still there, and that the main
// Docker daemon can still start a container on its default bridge (a
// daemon started with --bridge none in the host's namespace deletes
// docker0, and every plain docker run then fails).
func keepsHostInterfaces(t *testing.T) {
	t.Helper()
	before := hostInterfaces(t)
	t.Cleanup(func() {
		after := hostInterfaces(t)
		for name := range before {
			if !after[name] {
				t.Errorf("the host's interface %s is gone after the drills (before: %v, after: %v)", name, before, after)
			}
		}
		if before["docker0"] {
			out, err := exec.Command("docker", "run", "--rm", "--network", "bridge", executor.SandboxImage, "true").CombinedOutput()
			if err != nil {
				t.Errorf("docker run on the main daemon's default bridge after the drills: %v\n%s", err, out)
			}
		}
	})
}

// hostInterfaces returns the names of the network interfaces of this
// process's namespace.
func hostInterfaces(t *testing.T) map[string]bool {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatalf("list interfaces: %v", err)
	}
	names := map[string]bool{}
	for _, i := range ifs {
		names[i.Name] = true
	}
	return names
}
