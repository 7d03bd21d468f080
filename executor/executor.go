// Package executor runs admitted jobs in fresh, locked-down Docker
// containers: it resolves the image, creates the container with sandgate's
// fixed hardening, streams and caps its output, enforces the timeout, tells
// OOM kills from exits, removes the container, and reports every step as an
// audit event. It retries transient Docker failures in one place, never
// re-runs user code, and hands the container slots out fairly between
// teams.
//
// Its parts, each a type of its own with the Docker calls it makes
// declared beside it (docker.go lists them):
//
//   - Executor (executor.go, start.go, launch.go): the runs of a node; the
//     run path from slot to container (launch.go), with the image resolved
//     (resolve.go), the container's settings (container.go), its mounts
//     pinned (mountstage.go), cache volumes (volumes.go), the bridge
//     network (network.go), the egress network and the egress proxy
//     (egress.go), the run's workspace (workspace.go).
//   - handle (handle.go): one run from the moment it is taken to its end,
//     and the container it owns: created, started and removed
//     (lifecycle.go), the process it follows there (proc.go: the
//     container's main process; agent.go: a command the agent runs;
//     exec.go: a docker exec), and the one place its outcome is decided
//     (ending.go). Fresh, warm (warm.go), adopted and session runs, and
//     commands in sessions, all end through it. Its sampler (usage.go)
//     reads what the container uses from its cgroup (cgroup.go) or the
//     Docker stats API; the image's users are checked (identity.go).
//   - pool (pool.go): warm containers, claimed by runs whose container
//     would be configured exactly like theirs.
//   - Reaper (reaper.go): removes containers no live run of this
//     instance owns.
//   - Reconciler (reconcile.go): takes over the runs a previous process
//     left unfinished.
//   - lease (lease.go): this instance's claim on its node name on its
//     daemon.
//
// Building, loading, listing and pruning images is package
// executor/images, off the run path. The executor and images are the
// only packages that talk to the Docker Engine API.
package executor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/system"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// pingAPI is the Docker calls that tell whether the daemon answers, and
// how many CPUs its host has.
type pingAPI interface {
	Ping(ctx context.Context) (types.Ping, error)
	Info(ctx context.Context) (system.Info, error)
}

// Executor is the Docker executor. It implements sandgate.Executor,
// sandgate.SessionExecutor and sandgate.VolumeAdmin; its Reaper is
// sandgate.SandboxAdmin and its Reconciler sandgate.Reconciler. Create one
// with New, call Start to claim its node name and reap what a previous
// process left behind, and Shutdown before exit.
type Executor struct {
	cfg    Config
	docker dockerAPI
	calls  calls
	closer io.Closer
	events sandgate.EventSink
	log    *slog.Logger
	now    sandgate.Clock

	runs  *registry
	slots *slots
	// sessions are the MaxSessions places of session containers, which
	// never hold a run slot.
	sessions *slots
	// removing counts the containers being removed after their runs
	// have answered (warm runs through the agent); Shutdown waits for them.
	removing sync.WaitGroup

	resolver   *resolver
	runtimes   runtimes
	identities *identities
	stager     *stager
	volumes    *volumes
	workspaces *workspaces
	nets       *networks
	meter      *meter
	// pool keeps warm containers; nil without a warm pool.
	pool *pool

	reaper     *Reaper
	reconciler *Reconciler
	lease      *lease

	startMu sync.Mutex
	// started is set once Start's work is done; starting while Start
	// keeps trying a daemon that did not answer (startStop ends that);
	// stopped once the executor was shut down or closed.
	started, starting, stopped bool
	startStop                  context.CancelFunc
}

var (
	_ sandgate.Executor        = (*Executor)(nil)
	_ sandgate.SessionExecutor = (*Executor)(nil)
	_ sandgate.VolumeAdmin     = (*Executor)(nil)
	_ sandgate.SandboxAdmin    = (*Reaper)(nil)
	_ sandgate.Reconciler      = (*Reconciler)(nil)
)

// Reaper is the executor's reaper: it lists the managed containers and
// removes this instance's orphans (sandgate.SandboxAdmin).
func (e *Executor) Reaper() *Reaper { return e.reaper }

// Reconciler is the executor's reconciler: it takes over the runs a
// previous process of this node left unfinished (sandgate.Reconciler).
func (e *Executor) Reconciler() *Reconciler { return e.reconciler }

// New returns an executor for the daemon cfg.DockerHost names. Events go to
// events (nil discards them). New does not contact the daemon; Start and
// Ping do.
func New(cfg Config, events sandgate.EventSink) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := daemon.Dial(cfg.DockerHost)
	if err != nil {
		return nil, err
	}
	e := newExecutor(cfg, events, c)
	e.closer = c
	if daemon.Local(cfg.DockerHost) {
		e.meter.cgroups = detectCgroups(cfg.CgroupRoot, "/proc")
	}
	return e, nil
}

// newExecutor wires an executor to the Docker calls it makes; unit tests
// pass fakes. cfg must be validated.
func newExecutor(cfg Config, events sandgate.EventSink, d dockerAPI) *Executor {
	if events == nil {
		events = sandgate.EventSinkFunc(func(sandgate.Event) {})
	}
	log := cfg.Logger.With("component", "executor", "node", cfg.Node)
	c := newCalls(cfg, log)
	e := &Executor{
		cfg:      cfg,
		docker:   d,
		calls:    c,
		events:   events,
		log:      log,
		now:      cfg.Clock,
		runs:     newRegistry(cfg.Node),
		slots:    newSlots(cfg.MaxConcurrent, cfg.capacity().Share(cfg.MaxConcurrent)),
		sessions: newSlots(cfg.MaxSessions, cfg.capacity().Share(cfg.MaxSessions)),
	}
	e.resolver = newResolver(cfg, d, c)
	e.identities = newIdentities(d, c, cfg.HostGroups)
	e.stager = newStager(cfg, d, c, log)
	e.volumes = newVolumes(cfg.VolumeDir, d, c, log)
	e.runtimes = runtimes{docker: d, calls: c, node: cfg.Node}
	e.workspaces = newWorkspaces(cfg, &hostIDs{docker: d, calls: c}, log)
	e.nets = newNetworks(cfg, d, c, events, log)
	e.meter = newMeter(cfg, d, log)
	e.lease = newLease(cfg, d, c, log)
	e.pool = newPool(e, cfg)
	e.reaper = &Reaper{e: e, docker: d}
	e.reconciler = &Reconciler{e: e, docker: d}
	return e
}

// CPUs is how many CPUs the daemon's host has: the most a container can be
// given. It returns DOCKER-UNAVAILABLE when the daemon does not answer.
func (e *Executor) CPUs(ctx context.Context) (int, error) {
	var info system.Info
	err := e.calls.do(ctx, nil, "info", func(ctx context.Context) error {
		var err error
		info, err = e.docker.Info(ctx)
		return err
	})
	if err != nil {
		return 0, daemon.Error(sandgate.CodeDockerUnavailable, err, "docker info")
	}
	return info.NCPU, nil
}

// Node returns the node name this executor labels its containers with.
func (e *Executor) Node() string { return e.cfg.Node }

// Ping reports whether the daemon answers (DOCKER-UNAVAILABLE when not).
// The first successful ping also settles the API version.
func (e *Executor) Ping(ctx context.Context) error {
	err := e.calls.do(ctx, nil, "ping", func(ctx context.Context) error {
		_, err := e.docker.Ping(ctx)
		return err
	})
	if err != nil {
		return sandgate.WrapError(sandgate.CodeDockerUnavailable, err, "docker daemon %s does not answer", e.hostName())
	}
	return nil
}

func (e *Executor) hostName() string {
	if e.cfg.DockerHost == "" {
		return "(local socket)"
	}
	return e.cfg.DockerHost
}

// State reports where a run executing here is: pending (queued for a
// slot or resolving its image), creating, or running. ok is false when no
// such run is executing here.
func (e *Executor) State(runID string) (state sandgate.State, ok bool) {
	h := e.runs.get(runID)
	if h == nil {
		return "", false
	}
	_, state, _ = h.snapshot()
	return state, true
}

// Cancel stops the run: SIGTERM, StopGrace, SIGKILL, then removal; the
// output captured so far is kept in the run's result, whose outcome is
// cancelled. A run still queued ends without a container. Cancel returns
// when the run has ended, or when ctx ends with the stop still under way.
// It returns NOT-FOUND when no such run is executing here.
func (e *Executor) Cancel(ctx context.Context, runID string) error {
	h := e.runs.get(runID)
	if h == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "run %s is not executing on node %s", runID, e.cfg.Node)
	}
	h.cancel(errCancelled)
	select {
	case <-h.done:
	case <-ctx.Done():
	}
	return nil
}

// Shutdown refuses new runs, cancels every run in flight (each is stopped
// with SIGTERM, StopGrace, SIGKILL and removed), waits for them, removes
// any container of this instance that is left, and gives the node's
// lease up. It returns an error when ctx ends first or the daemon does
// not answer.
func (e *Executor) Shutdown(ctx context.Context) error {
	runs := e.runs.close()
	e.stopBackground()
	e.pool.shutdown()
	for _, h := range runs {
		h.cancel(errShutdown)
	}
	done := make(chan struct{})
	go func() {
		e.runs.active.Wait()
		e.removing.Wait()
		close(done)
	}()
	var waitErr error
	select {
	case <-done:
	case <-ctx.Done():
		waitErr = sandgate.WrapError(sandgate.CodeUnavailable, ctx.Err(), "shutdown: runs still stopping")
	}
	// A final sweep, even when runs did not finish in time: what they leave
	// is removed here rather than by the next process's reaper.
	cctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CallTimeout)
		defer cancel()
	}
	_, err := e.reaper.cleanup(cctx, true, waitErr != nil)
	e.lease.release(cctx)
	return errors.Join(waitErr, err)
}

// Close stops the reaper, gives the node's lease up and releases the
// Docker client. It does not stop running containers; Shutdown does.
func (e *Executor) Close() error {
	e.stopBackground()
	e.nets.close()
	e.pool.shutdown()
	ctx, cancel := e.calls.cleanup(context.Background())
	defer cancel()
	e.lease.release(ctx)
	e.stager.close()
	if e.closer != nil {
		return e.closer.Close()
	}
	return nil
}
