package executor

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// Reconciler takes over the runs a previous process of its node left
// unfinished (a SIGKILL, a crash): it holds their containers from the
// reaper until it has ended them, then finishes each one in its
// container, or records it lost.
type Reconciler struct {
	e      *Executor
	docker reconcileAPI

	mu sync.Mutex
	// held are runs being reconciled after a restart: the reaper leaves
	// their containers alone until Adopt has ended them.
	held map[string]bool
	// heldContainers are the containers of such runs by ID, for those
	// made ahead of their run (a warm pool's), which carry no run ID.
	heldContainers map[string]bool
}

// reconcileAPI is the Docker calls that find the container of a run to
// adopt; the run's handle makes the rest.
type reconcileAPI interface {
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
}

// Hold keeps the containers of these runs from the orphan reaper until
// Adopt has ended them (or Release is called). Reconciliation holds every
// unfinished run of the store before the reaper's first pass, so that a
// restart never removes a container it could still adopt.
func (rc *Reconciler) Hold(runIDs ...string) {
	rc.mu.Lock()
	if rc.held == nil {
		rc.held = map[string]bool{}
	}
	for _, id := range runIDs {
		rc.held[id] = true
	}
	rc.mu.Unlock()
	rc.negotiate()
}

// HoldContainers keeps these containers from the orphan reaper until
// Adopt has ended the runs started in them (or ReleaseContainers is
// called). A warm pool's container is made before its run and carries no
// run ID, so Hold alone would not keep it: reconciliation holds the
// container IDs its store knows as well.
func (rc *Reconciler) HoldContainers(containerIDs ...string) {
	rc.mu.Lock()
	if rc.heldContainers == nil {
		rc.heldContainers = map[string]bool{}
	}
	for _, id := range containerIDs {
		if id != "" {
			rc.heldContainers[id] = true
		}
	}
	rc.mu.Unlock()
	rc.negotiate()
}

// negotiate settles the Docker client's API version. The client settles
// it on its first request, and concurrent first requests race on it. The
// adoptions that follow Hold run concurrently, before the executor's
// Start has made a request, so the version is settled there; a daemon
// that is away fails fast and the adoptions report it.
func (rc *Reconciler) negotiate() {
	e := rc.e
	if n, ok := rc.docker.(versionNegotiator); ok {
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout)
		defer cancel()
		n.NegotiateAPIVersion(ctx)
	}
}

// versionNegotiator is the Docker client's explicit API version
// negotiation.
type versionNegotiator interface {
	NegotiateAPIVersion(ctx context.Context)
}

// Release lets the reaper have the containers of these runs again.
func (rc *Reconciler) Release(runIDs ...string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, id := range runIDs {
		delete(rc.held, id)
	}
}

// ReleaseContainers lets the reaper have these containers again.
func (rc *Reconciler) ReleaseContainers(containerIDs ...string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, id := range containerIDs {
		delete(rc.heldContainers, id)
	}
}

// isHeld reports whether the run, or the container, is held for
// reconciliation.
// holding reports whether any run is held for adoption.
func (rc *Reconciler) holding() bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.held) > 0
}

func (rc *Reconciler) isHeld(runID, containerID string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return (runID != "" && rc.held[runID]) || (containerID != "" && rc.heldContainers[containerID])
}

// Adopt finishes the run job.RunID that a previous process of this node
// started and did not see to its end:
//
//   - a running container is attached to (output from now on), waited for
//     with what is left of the run's timeout, inspected and removed, as on
//     the normal path;
//   - a container that exited meanwhile is recorded with its real exit
//     code and OOM flag (its output is gone: sandgate keeps no container
//     logs) and removed;
//   - a container created but never started is started now, which runs the
//     user's code for the first and only time;
//   - a run with no container, or one the daemon is removing, is lost.
//
// The run's container is the one labelled with its run ID or, when there
// is none, job.ContainerID if that is a managed container of this node
// that no other run's label claims: a warm pool's container is made
// before its run and carries no run ID.
//
// The run is live while Adopt works on it: Cancel and Shutdown reach it
// and the reaper leaves it alone. It emits the lifecycle events that are
// still due. Errors are those of Execute; DOCKER-UNAVAILABLE when the
// daemon did not answer the look-up, the result then saying so.
func (rc *Reconciler) Adopt(ctx context.Context, job sandgate.Job) (sandgate.Result, error) {
	e := rc.e
	h := e.newHandle(ctx, job)
	if err := e.runs.add(h); err != nil {
		return h.end(ending{err: err, quiet: true})
	}
	defer e.runs.remove(h)
	defer rc.Release(job.RunID)
	if job.ContainerID != "" {
		defer rc.ReleaseContainers(job.ContainerID)
	}
	return h.end(rc.adopt(h))
}

// adopt finds the run's container, takes it into h and follows it to its
// end, or says why it cannot.
func (rc *Reconciler) adopt(h *handle) ending {
	e, ctx := rc.e, h.ctx
	if err := rc.nodeFree(ctx); err != nil {
		return h.failedOr(err)
	}
	c, found, err := rc.findRunContainer(ctx, h)
	if err != nil {
		return h.failedOr(err)
	}
	if !found {
		return lostOnRestart("no container of the run was found when the gateway restarted")
	}
	var st container.InspectResponse
	err = e.calls.do(ctx, h.trail, "inspect", func(ctx context.Context) error {
		var err error
		st, err = rc.docker.ContainerInspect(ctx, c.ID)
		return err
	})
	if err != nil {
		return h.failedOr(daemon.Error(sandgate.CodeContainerCreate, err, "inspect container %s", c.ID))
	}
	s := stateOf(st)
	created := time.Unix(c.Created, 0).UTC()
	if t, ok := parseDockerTime(st.Created); ok {
		created = t
	}
	e.log.Info("adopting the container of an unfinished run", "run_id", h.job.RunID, "container_id", c.ID, "status", statusOf(s))
	h.setContainer(c.ID, created)
	h.main = newMainProc(h)
	ws := e.workspaces.find(h.job.RunID)
	if ws == nil && c.Labels[LabelPool] != "" && len(c.Names) > 0 {
		// A warm session's workspace is named after its container.
		ws = e.workspaces.find(strings.TrimPrefix(c.Names[0], "/"))
	}
	h.setLink(nil, ws)
	return rc.takeOver(h, c, st)
}

// nodeFree waits until no other instance of the node is alive on its
// daemon: the node's containers are a live gateway's while one holds the
// node, and following them would make a second owner. A survivor that
// takes a lapsed node over may see its lease a little longer than the
// node registry's lapse; a node that is alive keeps renewing it, and is
// refused (CONFLICT) once a lease's lapse has passed.
func (rc *Reconciler) nodeFree(ctx context.Context) error {
	e := rc.e
	deadline := time.Now().Add(e.cfg.LeaseLapse + e.cfg.LeaseRenew)
	for {
		others, err := e.lease.others(ctx)
		if err != nil || len(others) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return sandgate.Errorf(sandgate.CodeConflict, "node %s is held by a live gateway on its docker daemon (%s): its runs are not adopted", e.cfg.Node, sortedIDs(others))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.cfg.LeaseRenew):
		}
	}
}

// Holder names the live instances of the node on its daemon (gateways
// that renew its lease there), "" when none is alive. A survivor asks it
// before it takes a lapsed node over: a node whose lease its daemon sees
// renewed is alive, its heartbeat only late.
func (rc *Reconciler) Holder(ctx context.Context) (string, error) {
	others, err := rc.e.lease.others(ctx)
	if err != nil || len(others) == 0 {
		return "", err
	}
	return sortedIDs(others), nil
}

// takeOver ends the adopted container c as its state st says.
func (rc *Reconciler) takeOver(h *handle, c container.Summary, st container.InspectResponse) ending {
	e, s := rc.e, stateOf(st)
	switch {
	case s == nil || s.Status == "removing" || s.Status == "dead":
		return lostOnRestart("the run's container was being removed when the gateway restarted")
	case c.Labels[LabelPool] != "" && c.Labels[LabelAgent] != "" && !h.job.SessionContainer:
		// The agent reported the command's end to the gateway that died;
		// its key went with it, so the end cannot be read now.
		return lostOnRestart("the gateway restarted while the warm container's agent ran the command: its end cannot be read")
	case s.Running || s.Paused || s.Restarting:
		return rc.follow(h, s)
	case !everStarted(st) && c.Labels[LabelPool] != "":
		// A warm container is started before any run claims it; one never
		// started was not this run's to run in.
		return lostOnRestart("the run's warm container had never started when the gateway restarted")
	case !everStarted(st):
		// The previous process died between create and start: the user's
		// code never ran, so running it now runs it exactly once.
		if _, err := containerSettings(h.job, e.cfg); err != nil {
			return failed(err)
		}
		return h.startAndFollow(false)
	case c.Labels[LabelPool] != "" && s.ExitCode == launcherNoScript:
		return lostOnRestart("the gateway stopped before it handed the run's command to its warm container: the command never ran")
	default:
		// It exited while no gateway watched it: its output is gone
		// (sandgate keeps no container logs), its exit code is not.
		if t, ok := parseDockerTime(s.StartedAt); ok {
			h.res.StartedAt = t
		}
		h.res.FinishedAt = e.now()
		if t, ok := parseDockerTime(s.FinishedAt); ok {
			h.res.FinishedAt = t
		}
		h.setState(sandgate.StateRunning)
		return h.main.judge(notStopped, exitStatus{code: int64(s.ExitCode)}, st)
	}
}

// follow takes over a running container: it attaches to its output from
// now on (without it, the run can still be seen to its end), waits for its
// exit with what is left of the run's timeout (or stops it when the run is
// cancelled), and reports the end as any run's.
func (rc *Reconciler) follow(h *handle, s *container.State) ending {
	e, ctx := rc.e, h.ctx
	at := e.now()
	if t, ok := parseDockerTime(s.StartedAt); ok {
		at = t
	}
	// Its container.started was recorded by the process that started it.
	h.started(at, nil, false)
	// The proxy of the process that started it is gone with it: this
	// process's proxy takes the run's address over.
	e.nets.registerEgress(ctx, h)
	// Not-running answers at once for a container that exited since it
	// was inspected; next-exit would wait forever for it.
	if err := h.main.attach(ctx, false, container.WaitConditionNotRunning); err != nil && ctx.Err() == nil {
		e.log.Warn("attach to an adopted container", "run_id", h.job.RunID, "err", err)
	}
	e.log.Info("following an adopted container", "run_id", h.job.RunID, "container_id", h.res.ContainerID)
	return h.follow(h.main)
}

// lostOnRestart is the ending of a run whose container could not be
// taken over.
func lostOnRestart(reason string) ending {
	return lostEnding(reason, map[string]any{"reconciled": true})
}

// findRunContainer looks up the container of run r on this node: the one
// labelled with its run ID or, when there is none, h.job.ContainerID. When
// a run somehow has more than one labelled container, the newest is the
// run's and the others are removed.
func (rc *Reconciler) findRunContainer(ctx context.Context, h *handle) (container.Summary, bool, error) {
	e := rc.e
	mine, err := rc.listRunContainers(ctx, h, filters.Arg("label", sandgate.LabelRunID+"="+h.job.RunID))
	if err != nil {
		return container.Summary{}, false, err
	}
	if len(mine) == 0 && h.job.ContainerID != "" {
		return rc.findContainerByID(ctx, h)
	}
	if len(mine) == 0 {
		return container.Summary{}, false, nil
	}
	sort.SliceStable(mine, func(i, j int) bool { return mine[i].Created > mine[j].Created })
	for _, extra := range mine[1:] {
		e.log.Warn("removing a second container of one run", "run_id", h.job.RunID, "container_id", extra.ID)
		h.remove(extra.ID)
	}
	return mine[0], true, nil
}

// findContainerByID looks up h.job.ContainerID, the container a run was
// started in that does not carry the run's ID (a warm pool's, made before
// the run). Only a managed container of this node is the run's, and none
// labelled with another run's ID.
func (rc *Reconciler) findContainerByID(ctx context.Context, h *handle) (container.Summary, bool, error) {
	e := rc.e
	id := h.job.ContainerID
	mine, err := rc.listRunContainers(ctx, h, filters.Arg("id", id))
	if err != nil {
		return container.Summary{}, false, err
	}
	for _, c := range mine {
		// The id filter matches prefixes; the store keeps full IDs.
		if c.ID != id {
			continue
		}
		if owner := c.Labels[sandgate.LabelRunID]; owner != "" && owner != h.job.RunID {
			e.log.Warn("the recorded container of a run belongs to another run; not adopting it",
				"run_id", h.job.RunID, "container_id", id, "owner", owner)
			return container.Summary{}, false, nil
		}
		return c, true, nil
	}
	return container.Summary{}, false, nil
}

// listRunContainers lists the managed containers of this node that match
// the filter.
func (rc *Reconciler) listRunContainers(ctx context.Context, h *handle, filter filters.KeyValuePair) ([]container.Summary, error) {
	e := rc.e
	var list []container.Summary
	err := e.calls.do(ctx, h.trail, "list containers", func(ctx context.Context) error {
		var err error
		list, err = rc.docker.ContainerList(ctx, container.ListOptions{
			All:     true,
			Filters: filters.NewArgs(filters.Arg("label", sandgate.LabelManaged+"=true"), filter),
		})
		return err
	})
	if err != nil {
		return nil, daemon.Error(sandgate.CodeDockerUnavailable, err, "look for the container of run %s", h.job.RunID)
	}
	mine := list[:0]
	for _, c := range list {
		if node := c.Labels[sandgate.LabelNode]; node == "" || node == e.cfg.Node {
			mine = append(mine, c)
		}
	}
	return mine, nil
}

func parseDockerTime(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.IsZero() || t.Year() < 2000 {
		return time.Time{}, false
	}
	return t.UTC(), true
}

func statusOf(s *container.State) string {
	if s == nil {
		return ""
	}
	return string(s.Status)
}
