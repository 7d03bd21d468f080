package executor

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// reapWorkers is how many orphans are removed at once.
const reapWorkers = 8

// Reaper removes the containers of its node that no live run owns: at the
// executor's start, every ReapInterval after, and when an admin asks. A
// pass also unpins the bind mounts of runs that are gone, and ends as lost
// the live runs whose container vanished.
type Reaper struct {
	e      *Executor
	docker reaperAPI

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// reaperAPI is the Docker calls of the reaper: list the managed
// containers, remove an orphan.
type reaperAPI interface {
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
}

// start reaps every ReapInterval until ctx ends or halt is called.
func (rp *Reaper) start(ctx context.Context) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.stop != nil {
		return
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	rp.stop, rp.done = stop, make(chan struct{})
	go func() {
		defer close(rp.done)
		t := time.NewTicker(rp.e.cfg.ReapInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-rctx.Done():
				return
			case <-t.C:
				if _, err := rp.CleanupOrphans(rctx); err != nil {
					rp.e.log.Error("orphan reaper", "err", err)
				}
			}
		}
	}()
}

// halt stops the periodic passes and waits for a pass under way.
func (rp *Reaper) halt() {
	rp.mu.Lock()
	stop, done := rp.stop, rp.done
	rp.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// CleanupOptions says which orphans Cleanup removes.
type CleanupOptions struct {
	// IncludeRunning removes running orphans too. The reaper of a serving
	// executor does; a one-off `sandgate sandbox cleanup` does not by
	// default, since it cannot see the runs of a gateway serving on the
	// same node.
	IncludeRunning bool
}

// Sandboxes lists every container labelled sandgate.managed, of any node,
// oldest first. Orphan is set for this node's containers that no live run
// owns. It returns DOCKER-UNAVAILABLE when the daemon does not answer.
func (rp *Reaper) Sandboxes(ctx context.Context) ([]sandgate.Sandbox, error) {
	e := rp.e
	list, err := rp.listManaged(ctx)
	if err != nil {
		return nil, err
	}
	others, err := e.lease.others(ctx)
	if err != nil {
		return nil, err
	}
	live := e.runs.live()
	out := make([]sandgate.Sandbox, 0, len(list))
	for _, c := range list {
		out = append(out, rp.sandbox(c, live, others))
	}
	return out, nil
}

// CleanupOrphans removes every container of this node that no live run
// owns, running or not, and returns them. It is what the reaper does at
// Start and every ReapInterval. It returns DOCKER-UNAVAILABLE when the
// daemon does not answer.
func (rp *Reaper) CleanupOrphans(ctx context.Context) ([]sandgate.Sandbox, error) {
	return rp.Cleanup(ctx, CleanupOptions{IncludeRunning: true})
}

// Cleanup removes this node's orphans as opts says and returns those it
// removed. A container that could not be removed makes the error, after
// the others were dealt with.
func (rp *Reaper) Cleanup(ctx context.Context, opts CleanupOptions) ([]sandgate.Sandbox, error) {
	return rp.cleanup(ctx, opts.IncludeRunning, false)
}

// cleanup is one reaper pass. Besides removing orphans it notices live
// runs whose container has vanished and ends them as lost. With
// ignoreLive, the containers of live runs count as orphans too: Shutdown's
// last resort when runs did not stop in time.
func (rp *Reaper) cleanup(ctx context.Context, includeRunning, ignoreLive bool) ([]sandgate.Sandbox, error) {
	e := rp.e
	listed := e.now()
	list, err := rp.listManaged(ctx)
	if err != nil {
		return nil, err
	}
	// Listed after the containers: an instance alive now was alive when
	// they were listed, so none of its containers is taken for a dead
	// one's.
	others, err := e.lease.others(ctx)
	if err != nil {
		return nil, err
	}
	live := e.runs.live()
	owners := live
	if ignoreLive {
		owners = nil
	}
	present := map[string]bool{}
	var orphans []sandgate.Sandbox
	for _, c := range list {
		present[c.ID] = true
		s := rp.sandbox(c, owners, others)
		if s.Orphan && (includeRunning || s.State != "running") {
			orphans = append(orphans, s)
		}
	}
	rp.markLost(live, present, listed)
	if e.lease.holding() {
		// The pinned mounts and workspaces of the node's directories are
		// the lease holder's to judge: another gateway's refused start
		// must not take a live one's for stale.
		rp.removeStaleStages()
		rp.removeStaleWorkspaces()
	}

	removed, errs := rp.remove(ctx, orphans)
	sort.Slice(removed, func(i, j int) bool { return removed[i].CreatedAt.Before(removed[j].CreatedAt) })
	if len(errs) > 0 {
		return removed, daemon.Error(sandgate.CodeInternal, errors.Join(errs...), "remove %d orphan(s)", len(errs))
	}
	if len(removed) > 0 {
		e.log.Info("removed orphans", "count", len(removed))
	}
	return removed, nil
}

// remove removes orphans, reapWorkers at a time, and records each it
// removed; those that were gone already, or being removed, are neither
// removed nor errors.
func (rp *Reaper) remove(ctx context.Context, orphans []sandgate.Sandbox) ([]sandgate.Sandbox, []error) {
	e := rp.e
	var (
		mu      sync.Mutex
		removed []sandgate.Sandbox
		errs    []error
		wg      sync.WaitGroup
		work    = make(chan sandgate.Sandbox)
	)
	for range min(reapWorkers, len(orphans)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				err := e.calls.do(ctx, nil, "remove orphan", func(ctx context.Context) error {
					return rp.docker.ContainerRemove(ctx, s.ContainerID, container.RemoveOptions{Force: true, RemoveVolumes: true})
				})
				mu.Lock()
				switch {
				case err == nil:
					removed = append(removed, s)
				case cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
					// Gone already, or its removal is already in progress.
				default:
					errs = append(errs, err)
				}
				mu.Unlock()
				if err == nil {
					e.events.Emit(orphanRemoved(e.now(), e.cfg.Node, s))
				}
			}
		}()
	}
	for _, s := range orphans {
		work <- s
	}
	close(work)
	wg.Wait()
	return removed, errs
}

// markLost ends the live runs whose container was not in a listing taken
// after the container was created.
func (rp *Reaper) markLost(live map[string]*handle, present map[string]bool, listed time.Time) {
	e := rp.e
	for _, h := range live {
		id, state, created := h.snapshot()
		if id == "" || state != sandgate.StateRunning || !created.Before(listed) || present[id] {
			continue
		}
		e.log.Warn("container of a live run vanished", "run_id", h.job.RunID, "container_id", id)
		h.cancel(errLost)
	}
}

// removeStaleStages unpins the bind mounts of runs of this node that are
// neither live nor held for adoption: a process that died left them. A run
// stages its mounts only once it is live and unstages them before it stops
// being live, so asking now, not from an earlier listing, is race-free.
func (rp *Reaper) removeStaleStages() {
	e := rp.e
	for _, runID := range e.stager.staleRuns(e.cfg.Node) {
		live := e.runs.get(runID) != nil
		if !live && !e.reconciler.isHeld(runID, "") {
			e.log.Info("removing the pinned mounts of a run that is not live", "run_id", runID)
			e.stager.unstage(e.cfg.Node, runID)
		}
	}
}

// removeStaleWorkspaces removes the workspaces of runs that are neither
// live nor held for adoption: a process that died left them. Like the
// pinned mounts, a workspace is made only by a live run, which removes it
// before it stops being live.
func (rp *Reaper) removeStaleWorkspaces() {
	e := rp.e
	for _, runID := range e.workspaces.runs() {
		live := false
		for id, h := range e.runs.live() {
			if _, ws := h.link(); id == runID || (ws != nil && ws.runID == runID) {
				live = true // a warm session's is named after its container
			}
		}
		if owned, _ := e.pool.owner(runID); owned {
			live = true
		}
		if strings.HasPrefix(runID, poolPrefix) && e.reconciler.holding() {
			live = true // perhaps an open session's, not adopted yet
		}
		if !live && !e.reconciler.isHeld(runID, "") {
			e.log.Info("removing the workspace of a run that is not live", "run_id", runID)
			e.workspaces.remove(e.workspaces.of(runID))
		}
	}
}

// listManaged lists every container labelled sandgate.managed, oldest
// first.
func (rp *Reaper) listManaged(ctx context.Context) ([]container.Summary, error) {
	e := rp.e
	var list []container.Summary
	err := e.calls.do(ctx, nil, "list containers", func(ctx context.Context) error {
		var err error
		list, err = rp.docker.ContainerList(ctx, container.ListOptions{
			All:     true,
			Filters: filters.NewArgs(filters.Arg("label", sandgate.LabelManaged+"=true")),
		})
		return err
	})
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeDockerUnavailable, err, "list sandboxes")
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Created < list[j].Created })
	return list, nil
}

// sandbox describes a listed container. Containers of other nodes are
// never orphans here (a container without a node label is this node's),
// and neither are those of another live instance of this node (others):
// only this instance's, a dead instance's, and, while no other instance
// of the node is alive, those made before containers named their
// instance.
func (rp *Reaper) sandbox(c container.Summary, live map[string]*handle, others map[string]*holder) sandgate.Sandbox {
	e := rp.e
	l := c.Labels
	name := ""
	if len(c.Names) > 0 {
		name = strings.TrimPrefix(c.Names[0], "/")
	}
	node, inst := l[sandgate.LabelNode], l[LabelInstance]
	mine := node == "" || node == e.cfg.Node
	switch {
	case inst == "":
		mine = mine && len(others) == 0
	case inst != e.cfg.Instance:
		mine = mine && others[inst] == nil
	}
	// A run held for reconciliation owns its container like a live one,
	// except for Shutdown's last sweep, which passes no live runs. A
	// warm container carries no run ID and is held by its own ID.
	held := live != nil && e.reconciler.isHeld(l[sandgate.LabelRunID], c.ID)
	s := sandgate.Sandbox{
		ContainerID:   c.ID,
		Name:          name,
		Image:         c.Image,
		State:         string(c.State),
		RunID:         l[sandgate.LabelRunID],
		Session:       l[sandgate.LabelSession],
		Task:          l[sandgate.LabelTask],
		CorrelationID: l[sandgate.LabelCorrelationID],
		Node:          node,
		CreatedAt:     time.Unix(c.Created, 0).UTC(),
		Orphan:        mine && live[l[sandgate.LabelRunID]] == nil && !held,
	}
	if mine && l[LabelPool] != "" {
		// A warm container carries no run's labels: it is its pool's
		// until the run that claimed it has ended, but for Shutdown's
		// last sweep.
		owned, job := e.pool.owner(name)
		s.Orphan = live == nil || (!owned && !held)
		if job != nil {
			s.RunID, s.Session, s.Task, s.CorrelationID = job.RunID, job.Spec.SessionID, job.Spec.TaskID, job.CorrelationID
		}
	}
	return s
}
