// Package executor runs admitted jobs in fresh, locked-down Docker
// containers: it resolves the image, creates the container with sandgate's
// fixed hardening, streams and caps its output, enforces the timeout, tells
// OOM kills from exits, removes the container, and reports every step as an
// audit event. It retries transient Docker failures in one place, never
// re-runs user code, and hands the container slots out fairly between
// teams.
//
// Its parts, a file or two each:
//
//   - Executor (executor.go, run.go): runs jobs; the run path from slot to
//     container, with the image resolved (resolve.go), the container's
//     settings (container.go), its mounts pinned (mountstage.go), cache
//     volumes (volumes.go), the bridge network (network.go), the egress
//     network and the egress proxy it owns (egress.go), the image's
//     users checked (identity.go), created and started (lifecycle.go).
//   - handle (handle.go): one container from create, claim or adoption to
//     removal; every run is followed to its end by one. Its sampler
//     (usage.go) reads what the container uses from its cgroup
//     (cgroup.go) or the Docker stats API while it runs.
//   - pool (pool.go): warm containers, claimed by runs whose container
//     would be configured exactly like theirs.
//   - Reaper (reaper.go): removes containers no live run owns.
//   - Reconciler (reconcile.go): takes over the runs a previous process
//     left unfinished.
//   - Images (images.go): builds, loads, lists and prunes images; not on
//     the run path.
//
// It is the only package that talks to the Docker Engine API.
package executor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/docker/docker/api/types/system"
	"github.com/sandgate/sandgate"
)

// Why a run's context was cancelled, besides the caller's own context.
var (
	errCancelled = errors.New("run cancelled")
	errShutdown  = errors.New("executor shutting down")
	errLost      = errors.New("container vanished")
)

// Executor is the Docker executor. It implements sandgate.Executor and
// sandgate.SandboxAdmin. Create one with New, call Start to reap what a
// previous process left behind, and Shutdown before exit.
type Executor struct {
	cfg    Config
	docker dockerAPI
	closer io.Closer
	events sandgate.EventSink
	log    *slog.Logger
	now    sandgate.Clock
	slots  *slots

	mu      sync.Mutex
	runs    map[string]*run
	closing bool
	active  sync.WaitGroup
	// removing counts the containers being removed after their runs
	// have answered (warm runs through the agent); Shutdown waits for them.
	removing sync.WaitGroup

	imgMu    sync.Mutex
	imgCache map[string]cachedImage

	// stager pins bind-mount sources for the daemon.
	stager *stager
	// bridgeMu guards whether sandgate's bridge network is ready.
	bridgeMu    sync.Mutex
	bridgeReady bool
	// egressMu guards the egress network and its proxy, once made.
	egressMu sync.Mutex
	egress   *egressNet
	// volumes makes the file systems of cache volumes.
	volumes *volumes
	// workspaces makes the file systems of runs' workspaces.
	workspaces *workspaces
	// stageMu guards whether the daemon was seen to see staged mounts.
	stageMu      sync.Mutex
	stageChecked bool
	stageErr     error
	// accounts are the images' /etc/passwd and /etc/group, by image ID.
	accounts accountCache

	// cgroups is how the daemon host's cgroups are laid out, when this
	// process can read them (a local daemon); version 0 otherwise, and
	// the usage of runs comes from the Docker stats API.
	cgroups cgroupLayout

	// pool keeps warm containers; nil without a warm pool.
	pool *pool

	// reaper removes the containers no live run owns; reconciler takes
	// over the runs a previous process left.
	reaper     *Reaper
	reconciler *Reconciler

	startMu sync.Mutex
	// started is set once Start's work is done; starting while Start
	// keeps trying a daemon that did not answer (startStop ends that);
	// stopped once the executor was shut down or closed.
	started, starting, stopped bool
	startStop                  context.CancelFunc

	// hostIDs is the daemon's userns-remap shift (userns.go).
	hostIDs hostIDs
}

var (
	_ sandgate.Executor     = (*Executor)(nil)
	_ sandgate.VolumeAdmin  = (*Executor)(nil)
	_ sandgate.SandboxAdmin = (*Reaper)(nil)
	_ sandgate.Reconciler   = (*Reconciler)(nil)
)

// Reaper is the executor's reaper: it lists the managed containers and
// removes this node's orphans (sandgate.SandboxAdmin).
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
	c, err := dial(cfg.DockerHost)
	if err != nil {
		return nil, err
	}
	e := newExecutor(cfg, events, c)
	e.closer = c
	if localDaemon(cfg.DockerHost) {
		e.cgroups = detectCgroups(cfg.CgroupRoot, "/proc")
	}
	return e, nil
}

// newExecutor wires an executor to the Docker calls it makes; unit tests
// pass fakes. cfg must be validated.
func newExecutor(cfg Config, events sandgate.EventSink, d dockerAPI) *Executor {
	if events == nil {
		events = sandgate.EventSinkFunc(func(sandgate.Event) {})
	}
	e := &Executor{
		cfg:        cfg,
		docker:     d,
		events:     events,
		log:        cfg.Logger.With("component", "executor", "node", cfg.Node),
		now:        cfg.Clock,
		slots:      newSlots(cfg.MaxConcurrent),
		runs:       map[string]*run{},
		imgCache:   map[string]cachedImage{},
		stager:     newStager(cfg.MountStageDir),
		volumes:    newVolumes(cfg.VolumeDir),
		workspaces: newWorkspaces(cfg.WorkspaceDir, cfg.Node),
	}
	e.pool = newPool(e, cfg)
	e.reaper = &Reaper{e: e}
	e.reconciler = &Reconciler{e: e}
	return e
}

// CPUs is how many CPUs the daemon's host has: the most a container can be
// given. It returns DOCKER-UNAVAILABLE when the daemon does not answer.
func (e *Executor) CPUs(ctx context.Context) (int, error) {
	var info system.Info
	err := e.call(ctx, nil, "info", func(ctx context.Context) error {
		var err error
		info, err = e.docker.Info(ctx)
		return err
	})
	if err != nil {
		return 0, dockerError(sandgate.CodeDockerUnavailable, err, "docker info")
	}
	return info.NCPU, nil
}

// Node returns the node name this executor labels its containers with.
func (e *Executor) Node() string { return e.cfg.Node }

// Start checks that the daemon answers, has the reaper remove the orphans
// a previous process of this node left behind, starts the warm pool, and
// then reaps every ReapInterval until ctx ends or Shutdown or Close is
// called, so ctx should live as long as the executor serves. When the
// daemon does not answer, Start returns DOCKER-UNAVAILABLE and keeps
// trying in the background: the reaper and the warm pool begin as soon as
// it answers.
func (e *Executor) Start(ctx context.Context) error {
	err := e.startOnce(ctx)
	if sandgate.ErrorCodeOf(err) != sandgate.CodeDockerUnavailable {
		return err
	}
	e.startMu.Lock()
	defer e.startMu.Unlock()
	if e.started || e.starting || e.stopped {
		return err
	}
	e.starting = true
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.startStop = stop
	go func() {
		defer stop()
		e.startWhenReachable(ctx, sctx)
	}()
	return err
}

// startWhenReachable tries Start's work again until the daemon answers,
// parent ends or the executor stops.
func (e *Executor) startWhenReachable(parent, ctx context.Context) {
	wait := 250 * time.Millisecond
	for {
		select {
		case <-parent.Done():
			return
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := e.startOnce(parent)
		if sandgate.ErrorCodeOf(err) != sandgate.CodeDockerUnavailable {
			if err != nil {
				e.log.Error("executor start", "err", err)
			} else {
				e.log.Info("the docker daemon answers: reaper and warm pool started")
			}
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// startOnce is one attempt at Start's work.
func (e *Executor) startOnce(ctx context.Context) error {
	if err := e.Ping(ctx); err != nil {
		return err
	}
	if _, err := e.reaper.CleanupOrphans(ctx); err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodeDockerUnavailable {
			return err
		}
		// Orphans that resist removal are retried on the next pass; they
		// are no reason to refuse to serve.
		e.log.Error("orphan reaper", "err", err)
	}
	e.startMu.Lock()
	defer e.startMu.Unlock()
	if e.started || e.stopped {
		return nil
	}
	e.started = true
	// After the first reaper pass, which removes the warm containers a
	// previous process left.
	e.pool.start(e.cfg.WarmPoolCheck)
	e.reaper.start(ctx)
	return nil
}

// stopBackground stops the reaper and anything still trying to start,
// for good.
func (e *Executor) stopBackground() {
	e.startMu.Lock()
	if e.startStop != nil {
		e.startStop()
	}
	e.stopped = true
	e.startMu.Unlock()
	e.reaper.halt()
}

// Ping reports whether the daemon answers (DOCKER-UNAVAILABLE when not).
// The first successful ping also settles the API version.
func (e *Executor) Ping(ctx context.Context) error {
	err := e.call(ctx, nil, "ping", func(ctx context.Context) error {
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
	e.mu.Lock()
	r := e.runs[runID]
	e.mu.Unlock()
	if r == nil {
		return "", false
	}
	_, state, _ = r.snapshot()
	return state, true
}

// Cancel stops the run: SIGTERM, StopGrace, SIGKILL, then removal; the
// output captured so far is kept in the run's result, whose outcome is
// cancelled. A run still queued ends without a container. Cancel returns
// when the run has ended, or when ctx ends with the stop still under way.
// It returns NOT-FOUND when no such run is executing here.
func (e *Executor) Cancel(ctx context.Context, runID string) error {
	e.mu.Lock()
	r := e.runs[runID]
	e.mu.Unlock()
	if r == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "run %s is not executing on node %s", runID, e.cfg.Node)
	}
	r.cancel(errCancelled)
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	return nil
}

// Shutdown refuses new runs, cancels every run in flight (each is stopped
// with SIGTERM, StopGrace, SIGKILL and removed), waits for them, and
// finally removes any container of this node that is left. It returns an
// error when ctx ends first or the daemon does not answer.
func (e *Executor) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	runs := make([]*run, 0, len(e.runs))
	for _, r := range e.runs {
		runs = append(runs, r)
	}
	e.mu.Unlock()
	e.stopBackground()
	e.pool.shutdown()
	for _, r := range runs {
		r.cancel(errShutdown)
	}
	done := make(chan struct{})
	go func() {
		e.active.Wait()
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
	return errors.Join(waitErr, err)
}

// Close stops the reaper and releases the Docker client. It does not stop
// running containers; Shutdown does.
func (e *Executor) Close() error {
	e.stopBackground()
	e.closeEgress()
	e.pool.shutdown()
	if e.closer != nil {
		return e.closer.Close()
	}
	return nil
}
