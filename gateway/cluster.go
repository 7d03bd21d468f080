package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate"
)

// A cluster is several gateway nodes on one database. Each node registers
// in the node registry and heartbeats (load, Docker health, signing key);
// a request for a run or session another node owns is forwarded to that
// node over its advertised address (cluster_forward.go); team limits are
// counted across the nodes (run slots); an idempotency key is claimed in
// the database before its request is decided; and a node whose heartbeat
// lapsed is taken over by exactly one survivor, which adopts its
// containers through the dead node's Docker daemon or records its runs
// lost, and closes its audit chains. docs/operations.md has the whole of
// it.

// ClusterStore is the node registry and the cluster's shared counts
// (package runstore). Every method answers UNAVAILABLE when the database
// does not.
type ClusterStore interface {
	// RegisterNode records the node as active with a fresh heartbeat.
	RegisterNode(ctx context.Context, n sandgate.Node) error
	// Heartbeat stamps the node's heartbeat and load; NOT-FOUND when it is
	// no longer registered as active (a survivor took it over).
	Heartbeat(ctx context.Context, n sandgate.Node) error
	// LeaveNode marks the node gone after a clean shutdown.
	LeaveNode(ctx context.Context, name string) error
	// ListNodes returns every node, its state judged with lapse.
	ListNodes(ctx context.Context, lapse time.Duration) ([]sandgate.Node, error)
	// TakeOver takes dead over for survivor when its heartbeat is older
	// than lapse: exactly one caller gets ok.
	TakeOver(ctx context.Context, dead, survivor string, lapse time.Duration) (sandgate.Takeover, bool, error)
	// RecordTakeover keeps what a takeover did on the dead node's row.
	RecordTakeover(ctx context.Context, dead string, summary []byte) error
	// ReportHeld records on the node's row, whatever its state, the
	// audit events it holds because they were refused as fenced.
	ReportHeld(ctx context.Context, name string, held int64) error
	// ReserveSlot counts a run against its team's limits across the
	// cluster; ok is false when it does not fit.
	ReserveSlot(ctx context.Context, slot sandgate.Slot, l sandgate.SlotLimits) (sandgate.SlotUse, bool, error)
	// HoldSlot counts a run whatever the limits.
	HoldSlot(ctx context.Context, slot sandgate.Slot) error
	// ReleaseSlot gives a run's slot back.
	ReleaseSlot(ctx context.Context, runID string) error
	// ReleaseNodeSlots drops the node's slots but those of keep.
	ReleaseNodeSlots(ctx context.Context, node string, keep []string) error
	// NodeSlots counts the slots each node holds.
	NodeSlots(ctx context.Context) (map[string]int, error)
}

// RemoteReconciler is a dead node's Docker daemon as a survivor reaches
// it: the adoption of the containers it runs, labelled with the dead
// node's name, and the commands of the sessions adopted there. Close lets
// go of the connection once every adopted run and session has ended.
type RemoteReconciler interface {
	sandgate.Reconciler
	// Holder names the live gateway holding the dead node's lease on its
	// daemon, "" when none does.
	Holder(ctx context.Context) (string, error)
	// Sessions runs commands in the sessions adopted through Adopt.
	Sessions() sandgate.SessionExecutor
	Close() error
}

// RemoteReconcilers dials the Docker daemon dockerHost of the dead node
// node and checks that it answers; DOCKER-UNAVAILABLE when it does not.
type RemoteReconcilers func(ctx context.Context, node, dockerHost string) (RemoteReconciler, error)

// ChainCloser closes the audit chains of a dead node with a final
// checkpoint signed by this node, recording audit.chain_closed for each
// (package audit's Store.CloseChainsOf, adapted); it returns how many it
// closed.
type ChainCloser func(ctx context.Context, deadNode, reason string) (int, error)

// Defaults of the cluster settings.
const (
	defaultNodeHeartbeat = 2 * time.Second
	defaultNodeLapse     = 15 * time.Second
	// forwardSkew bounds how far a forwarded request's time may be from
	// the receiving node's.
	forwardSkew = time.Minute
)

// cluster is this node's part in a cluster: its heartbeat and its
// takeovers of dead nodes.
type cluster struct {
	n     *node
	store ClusterStore
	// beats is the registry over connections of their own: what the
	// heartbeat loop and the takeovers use (Deps.ClusterControl).
	beats ClusterStore
	stop  context.CancelFunc
	done  chan struct{}

	mu    sync.Mutex
	nodes map[string]sandgate.Node
	seen  time.Time
	// taking are the takeovers under way, each in its own goroutine: the
	// heartbeat must go on meanwhile, or this node would lapse too.
	taking map[string]bool
	twg    sync.WaitGroup
	// healthySince is when this node's heartbeats last began to succeed
	// without a failure; zero while they fail. Only a node that has seen
	// the registry for a whole lapse takes others over: after the
	// database was away, every node's heartbeat is old, and the others
	// get a lapse to beat again before anyone is judged dead.
	healthySince time.Time
	// nonces are the forwards this node accepted in the last two skews.
	nonces usedNonces
	// fence is set once this node learns it was taken over
	// (cluster_fence.go); reported is the held count its row shows.
	fence    fenceState
	reported int64
	// lateLogged is when each late node that answers was last logged.
	lateLogged map[string]time.Time
}

func newCluster(n *node, store, control ClusterStore) *cluster {
	if control == nil {
		control = store
	}
	// reported starts unknown, so the first heartbeat tells the row.
	return &cluster{n: n, store: store, beats: control, done: make(chan struct{}), reported: -1}
}

// JoinCluster registers this node in the node registry and starts its
// heartbeat, which also takes over the nodes whose heartbeat lapsed.
// advertise is where the other nodes reach this one when
// Config.AdvertiseURL does not say. Call it after Reconcile, once
// listening; Shutdown leaves the cluster. Without Deps.Cluster it does
// nothing.
func (s *Server) JoinCluster(ctx context.Context, advertise string) error {
	n := s.node
	if n.cluster == nil {
		return nil
	}
	if n.cfg.AdvertiseURL == "" {
		n.cfg.AdvertiseURL = advertise
		s.cfg.AdvertiseURL = advertise
	}
	c := n.cluster
	live := make([]string, 0)
	for id := range n.runs.live.all() {
		live = append(live, id)
	}
	// The slots a previous process of this node left for runs that are
	// over; the adopted runs hold theirs.
	if err := c.store.ReleaseNodeSlots(ctx, s.cfg.Node, live); err != nil {
		return err
	}
	if err := c.beats.RegisterNode(ctx, n.nodeRecord(ctx)); err != nil {
		return err
	}
	for _, col := range fenceCollectors(n) {
		if err := n.metrics.reg.Register(col); err != nil {
			s.log.Warn("register the fence metrics", "error", err)
		}
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.stop = cancel
	go c.loop(hctx)
	s.log.Info("joined the cluster", "advertise_url", s.cfg.AdvertiseURL, "heartbeat", s.cfg.NodeHeartbeat, "lapse", s.cfg.NodeLapse)
	return nil
}

// halt stops the heartbeat and waits for the takeovers under way, before
// the runs are shut down (a takeover starts runs).
func (c *cluster) halt() {
	if c.stop == nil {
		return
	}
	c.stop()
	<-c.done
	c.twg.Wait()
}

// leave marks the node gone, once its runs have ended.
func (c *cluster) leave(ctx context.Context) {
	if c.stop == nil {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.beats.LeaveNode(lctx, c.n.cfg.Node); err != nil {
		c.n.log.Warn("leave the cluster", "error", err)
	}
}

// nodeRecord is this node as the registry shows it now.
func (n *node) nodeRecord(ctx context.Context) sandgate.Node {
	rec := sandgate.Node{
		Name: n.cfg.Node, AdvertiseURL: n.cfg.AdvertiseURL, DockerHost: n.cfg.DockerHost,
		Running: n.runs.live.count(), Capacity: n.cfg.Capacity, KeyID: n.cfg.KeyID, PublicKey: n.cfg.PublicKey,
		Version: n.cfg.Version, DockerHealthy: true,
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := n.d.Executor.Ping(pctx); err != nil {
		rec.DockerHealthy, rec.DockerError = false, sandgate.ErrorMessageOf(err)
	}
	return rec
}

func (c *cluster) loop(ctx context.Context) {
	defer close(c.done)
	s := c.n
	t := time.NewTicker(s.cfg.NodeHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.beat(ctx)
	}
}

// beat is one heartbeat: this node's, then a look for lapsed nodes.
func (c *cluster) beat(ctx context.Context) {
	s := c.n
	hctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	me := s.nodeRecord(hctx)
	err := c.beats.Heartbeat(hctx, me)
	if sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound {
		// Taken over while away (its heartbeat lapsed): its runs and
		// sessions are a survivor's, its chains fenced. It is fenced until
		// restarted (cluster_fence.go).
		c.fenceTakenOver(hctx)
	}
	c.reportHeld(hctx)
	if err != nil {
		s.log.Warn("node heartbeat", "error", err)
		c.healthySince = time.Time{}
		return
	}
	now := time.Now()
	if c.healthySince.IsZero() {
		c.healthySince = now
	}
	nodes, err := c.beats.ListNodes(hctx, s.cfg.NodeLapse)
	if err != nil {
		s.log.Warn("list nodes", "error", err)
		return
	}
	c.remember(nodes)
	if s.draining.Load() || s.fenced() != nil || now.Sub(c.healthySince) < s.cfg.NodeLapse {
		return // a node that stops or is fenced, or that has not watched for a lapse, takes nothing over
	}
	for _, n := range nodes {
		if n.State == sandgate.NodeLapsed && n.Name != s.cfg.Node && c.begin(n.Name) {
			c.twg.Add(1)
			go func() {
				defer c.twg.Done()
				defer c.end(n.Name)
				if c.answers(ctx, n) {
					c.lateButAlive(n, "it answers at its address")
					return
				}
				if holder := c.leaseHolder(ctx, n); holder != "" {
					c.lateButAlive(n, "its daemon sees its lease renewed by "+holder)
					return
				}
				c.takeOver(ctx, n.Name)
			}()
		}
	}
}

// begin marks a takeover of dead under way here; false when one is.
func (c *cluster) begin(dead string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taking == nil {
		c.taking = map[string]bool{}
	}
	if c.taking[dead] {
		return false
	}
	c.taking[dead] = true
	return true
}

func (c *cluster) end(dead string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.taking, dead)
}

func (c *cluster) remember(nodes []sandgate.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = make(map[string]sandgate.Node, len(nodes))
	for _, n := range nodes {
		c.nodes[n.Name] = n
	}
	c.seen = time.Now()
}

// node returns what the registry says of name, read afresh when the last
// reading is older than a heartbeat.
func (c *cluster) node(ctx context.Context, name string) (sandgate.Node, bool) {
	c.mu.Lock()
	fresh := time.Since(c.seen) < c.n.cfg.NodeHeartbeat
	n, ok := c.nodes[name]
	c.mu.Unlock()
	if fresh && ok {
		return n, true
	}
	nodes, err := c.store.ListNodes(ctx, c.n.cfg.NodeLapse)
	if err != nil {
		return n, ok
	}
	c.remember(nodes)
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok = c.nodes[name]
	return n, ok
}

// all returns every node the registry knows, read afresh.
func (c *cluster) all(ctx context.Context) ([]sandgate.Node, error) {
	nodes, err := c.store.ListNodes(ctx, c.n.cfg.NodeLapse)
	if err != nil {
		return nil, err
	}
	c.remember(nodes)
	return nodes, nil
}

// takeOver takes the lapsed node dead over, when this node is the one
// survivor the registry lets: its runs are adopted through its Docker
// daemon, or lost when that does not answer; so are its open sessions;
// its chains are closed with a final checkpoint signed by this node.
func (c *cluster) takeOver(ctx context.Context, dead string) {
	s := c.n
	log := s.log.With("dead_node", dead)
	tctx, cancel := context.WithTimeout(ctx, storeTimeout)
	t, ok, err := c.beats.TakeOver(tctx, dead, s.cfg.Node, s.cfg.NodeLapse)
	cancel()
	if err != nil {
		log.Warn("take over a lapsed node", "error", err)
		return
	}
	if !ok {
		return // another survivor has it, or it came back
	}
	log.Warn("taking over a node whose heartbeat lapsed", "runs", len(t.Runs), "sessions", len(t.Sessions),
		"docker_host", t.Dead.DockerHost, "heartbeat_age", t.Dead.HeartbeatAge.String())
	summary := map[string]any{"dead_node": dead, "docker_host": t.Dead.DockerHost, "runs": len(t.Runs), "sessions": len(t.Sessions),
		"chains_fenced": t.ChainsFenced}

	var rec RemoteReconciler
	var dockerErr error
	if s.d.RemoteReconcilers == nil {
		dockerErr = fmt.Errorf("this gateway cannot reach other nodes' Docker daemons")
	} else {
		dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		rec, dockerErr = s.d.RemoteReconcilers(dctx, dead, t.Dead.DockerHost)
		cancel()
	}
	summary["docker_reachable"] = dockerErr == nil
	if dockerErr != nil {
		summary["docker_error"] = sandgate.ErrorMessageOf(dockerErr)
		log.Warn("the dead node's Docker daemon does not answer; its runs are lost", "error", dockerErr)
	}

	runs := make([]sandgate.Run, 0, len(t.Runs))
	for _, id := range t.Runs {
		gctx, cancel := context.WithTimeout(ctx, storeTimeout)
		r, err := s.d.Runs.GetRun(gctx, id)
		cancel()
		if err != nil {
			log.Error("read a run taken over", "run_id", id, "error", err)
			continue
		}
		r.Node = s.cfg.Node
		runs = append(runs, *r)
	}
	runs = s.runs.loseSessionCommands(ctx, runs)
	var wg sync.WaitGroup
	sessionsAdopted, sessionsLost := c.takeSessions(ctx, t, rec, dockerErr, &wg, log)
	adopted, lost := 0, 0
	if dockerErr == nil && len(runs) > 0 {
		ids := make([]string, 0, len(runs))
		var containers []string
		for _, r := range runs {
			ids = append(ids, r.ID)
			if r.ContainerID != "" {
				containers = append(containers, r.ContainerID)
			}
		}
		rec.Hold(ids...)
		rec.HoldContainers(containers...)
		for _, r := range runs {
			adopted++
			wg.Add(1)
			s.runs.adoptDone(r, rec, s.teams, wg.Done)
		}
	} else {
		reason := fmt.Sprintf("node %s stopped heartbeating and its Docker daemon (%s) does not answer: %v; %s took over",
			dead, t.Dead.DockerHost, sandgate.ErrorMessageOf(dockerErr), s.cfg.Node)
		for _, r := range runs {
			lost++
			s.runs.loseTakenOver(r, reason)
		}
	}
	if rec != nil {
		go func() {
			wg.Wait()
			_ = rec.Close()
		}()
	}
	summary["adopted"], summary["lost"] = adopted, lost
	summary["sessions_adopted"], summary["sessions_lost"] = sessionsAdopted, sessionsLost

	chains := 0
	if s.d.CloseChains != nil {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		n, err := s.d.CloseChains(cctx, dead, fmt.Sprintf("node %s stopped heartbeating; %s took it over", dead, s.cfg.Node))
		cancel()
		if err != nil {
			log.Error("close the dead node's audit chains", "error", err)
			summary["chains_error"] = sandgate.ErrorMessageOf(err)
		}
		chains = n
	}
	summary["chains_closed"] = chains
	subject := sandgate.NodeSubject(s.cfg.Node)
	subject.Actor = s.cfg.Node
	ev := sandgate.NewNodeTakenOver(subject, s.now(), summary)
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	if err := s.d.Recorder.Record(rctx, ev); err != nil {
		log.Error("record the takeover; it is spooled", "error", err)
		s.d.Recorder.Emit(ev)
	}
	cancel()
	if doc, err := json.Marshal(summary); err == nil {
		rctx, cancel := context.WithTimeout(ctx, storeTimeout)
		if err := c.beats.RecordTakeover(rctx, dead, doc); err != nil {
			log.Warn("record the takeover on the node's row", "error", err)
		}
		cancel()
	}
	log.Warn("took over a dead node", "adopted", adopted, "lost", lost, "sessions_adopted", sessionsAdopted,
		"sessions_lost", sessionsLost, "chains_closed", chains)
}

// takeSessions takes the dead node's open sessions over. Through its
// daemon (rec), each is adopted as a restarted node adopts its own: its
// container followed again by the survivor, its commands run there
// (wg counts it until it ends, for rec's Close); a session whose
// container never ran, or all of them when the daemon does not answer,
// ends lost with the reason. It returns how many it adopted and lost.
func (c *cluster) takeSessions(ctx context.Context, t sandgate.Takeover, rec RemoteReconciler, dockerErr error, wg *sync.WaitGroup, log *slog.Logger) (adopted, lost int) {
	s := c.n
	if s.d.Sessions == nil {
		return 0, 0
	}
	msg := fmt.Sprintf("node %s, which held the session, stopped heartbeating; %s took over", t.Dead.Name, s.cfg.Node)
	if dockerErr != nil {
		msg += fmt.Sprintf(" and cannot reach its Docker daemon (%v)", sandgate.ErrorMessageOf(dockerErr))
	}
	for _, id := range t.Sessions {
		gctx, cancel := context.WithTimeout(ctx, storeTimeout)
		ss, err := s.d.Sessions.GetSession(gctx, id)
		cancel()
		if err != nil {
			log.Error("read a session taken over", "session_id", id, "error", err)
			continue
		}
		ss.Node = s.cfg.Node
		l := newLiveSession(*ss, sandgate.Normalized{RunSpec: ss.Spec})
		if dockerErr != nil || ss.ContainerID == "" {
			s.sessions.end(l, sandgate.Result{Outcome: sandgate.OutcomeLost, FinishedAt: s.now(),
				Error: &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: msg}}, nil, log.With("session_id", id))
			lost++
			continue
		}
		l.exec = rec.Sessions()
		rec.Hold(ss.ID)
		rec.HoldContainers(ss.ContainerID)
		release := s.teams.HoldSession(ss.Team, ss.Spec.Resources)
		wg.Add(1)
		s.sessions.start(l, s.d.Admitter.Enforcement(ss.Team), 0, release, rec)
		go func() {
			<-l.done
			wg.Done()
		}()
		adopted++
	}
	return adopted, lost
}

// loseTakenOver ends a taken-over run as lost with reason.
func (r *runs) loseTakenOver(run sandgate.Run, reason string) {
	r.lose(run, reason, sandgate.CodeDockerUnavailable, map[string]any{"reason": reason, "taken_over": true})
	r.releaseSlot(run.ID)
}
