package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandgate/sandgate"
)

// Reconciler takes over the runs a previous process of its node left
// unfinished (a SIGKILL, a crash): it holds their containers from the
// reaper until it has ended them, then finishes each one in its
// container, or records it lost.
type Reconciler struct {
	e *Executor

	mu sync.Mutex
	// held are runs being reconciled after a restart: the reaper leaves
	// their containers alone until Adopt has ended them.
	held map[string]bool
	// heldContainers are the containers of such runs by ID, for those
	// made ahead of their run (a warm pool's), which carry no run ID.
	heldContainers map[string]bool
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
	if n, ok := e.docker.(versionNegotiator); ok {
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
	r, err := e.register(ctx, job)
	if err != nil {
		return e.failed(nil, err), err
	}
	defer e.unregister(r)
	defer rc.Release(job.RunID)
	if job.ContainerID != "" {
		defer rc.ReleaseContainers(job.ContainerID)
	}
	return rc.adopt(r)
}

func (rc *Reconciler) adopt(r *run) (sandgate.Result, error) {
	e := rc.e
	ctx := r.ctx
	c, found, err := rc.findRunContainer(ctx, r)
	if err != nil {
		if ctx.Err() != nil {
			return e.cancelledBeforeStart(r), nil
		}
		return e.failed(r, err), err
	}
	if !found {
		return rc.lostOnRestart(r, sandgate.Result{}, "no container of the run was found when the gateway restarted"), nil
	}
	var st container.InspectResponse
	err = e.call(ctx, r, "inspect", func(ctx context.Context) error {
		var err error
		st, err = e.docker.ContainerInspect(ctx, c.ID)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return e.cancelledBeforeStart(r), nil
		}
		err = dockerError(sandgate.CodeContainerCreate, err, "inspect container %s", c.ID)
		return e.failed(r, err), err
	}
	s := stateOf(st)
	created := time.Unix(c.Created, 0).UTC()
	if t, ok := parseDockerTime(st.Created); ok {
		created = t
	}
	e.log.Info("adopting the container of an unfinished run", "run_id", r.job.RunID, "container_id", c.ID, "status", statusOf(s))
	h := e.newHandle(r, c.ID, created)
	h.ws = e.workspaces.find(r.job.RunID)
	if h.ws == nil && c.Labels[LabelPool] != "" && len(c.Names) > 0 {
		// A warm session's workspace is named after its container.
		h.ws = e.workspaces.find(strings.TrimPrefix(c.Names[0], "/"))
	}
	r.setWorkspace(h.ws)
	defer h.close()

	switch {
	case s == nil || s.Status == "removing" || s.Status == "dead":
		return rc.lostOnRestart(r, h.res, "the run's container was being removed when the gateway restarted"), nil
	case c.Labels[LabelPool] != "" && c.Labels[LabelAgent] != "" && !r.job.SessionContainer:
		// The agent reported the command's end to the gateway that died;
		// its key went with it, so the end cannot be read now.
		return rc.lostOnRestart(r, h.res, "the gateway restarted while the warm container's agent ran the command: its end cannot be read"), nil
	case s.Running || s.Paused || s.Restarting:
		return rc.follow(ctx, h, s)
	case !everStarted(st) && c.Labels[LabelPool] != "":
		// A warm container is started before any run claims it; one never
		// started was not this run's to run in.
		return rc.lostOnRestart(r, h.res, "the run's warm container had never started when the gateway restarted"), nil
	case !everStarted(st):
		// The previous process died between create and start: the user's
		// code never ran, so running it now runs it exactly once.
		if _, err := containerSettings(r.job, e.cfg); err != nil {
			return h.failed(err), err
		}
		return e.startAndSupervise(ctx, h)
	case c.Labels[LabelPool] != "" && s.ExitCode == launcherNoScript:
		return rc.lostOnRestart(r, h.res, "the gateway stopped before it handed the run's command to its warm container: the command never ran"), nil
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
		r.setState(sandgate.StateRunning)
		return h.finish(notStopped, exitStatus{code: int64(s.ExitCode)}, st), nil
	}
}

// follow takes over a running container: it attaches to its output from
// now on (without it, the run can still be seen to its end), waits for its
// exit with what is left of the run's timeout (or stops it when the run is
// cancelled), and reports the end as any run's.
func (rc *Reconciler) follow(ctx context.Context, h *handle, s *container.State) (res sandgate.Result, err error) {
	e := rc.e
	at := e.now()
	if t, ok := parseDockerTime(s.StartedAt); ok {
		at = t
	}
	// Its container.started was recorded by the process that started it.
	h.started(at, nil, false)
	// The proxy of the process that started it is gone with it: this
	// process's proxy takes the run's address over.
	if end := e.egressFor(ctx, h); end != nil {
		defer func() { res.Egress = end() }()
	}
	// Not-running answers at once for a container that exited since it
	// was inspected; next-exit would wait forever for it.
	if err := h.attach(ctx, false, container.WaitConditionNotRunning); err != nil && ctx.Err() == nil {
		e.log.Warn("attach to an adopted container", "run_id", h.r.job.RunID, "err", err)
	}
	e.log.Info("following an adopted container", "run_id", h.r.job.RunID, "container_id", h.id)
	return h.supervise(ctx)
}

// lostOnRestart ends a run whose container could not be taken over.
func (rc *Reconciler) lostOnRestart(r *run, res sandgate.Result, reason string) sandgate.Result {
	e := rc.e
	res.Outcome = sandgate.OutcomeLost
	if res.FinishedAt.IsZero() {
		res.FinishedAt = e.now()
	}
	res.Stdout, res.Stderr = noOutput(res.Stdout), noOutput(res.Stderr)
	res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: reason}
	e.log.Warn("run lost", "run_id", r.job.RunID, "reason", reason)
	e.emit(r, sandgate.EventRunLost, map[string]any{"error_code": string(res.Error.Code), "reason": reason, "reconciled": true})
	return res
}

// findRunContainer looks up the container of run r on this node: the one
// labelled with its run ID or, when there is none, r.job.ContainerID. When
// a run somehow has more than one labelled container, the newest is the
// run's and the others are removed.
func (rc *Reconciler) findRunContainer(ctx context.Context, r *run) (container.Summary, bool, error) {
	e := rc.e
	mine, err := rc.listRunContainers(ctx, r, filters.Arg("label", sandgate.LabelRunID+"="+r.job.RunID))
	if err != nil {
		return container.Summary{}, false, err
	}
	if len(mine) == 0 && r.job.ContainerID != "" {
		return rc.findContainerByID(ctx, r)
	}
	if len(mine) == 0 {
		return container.Summary{}, false, nil
	}
	sort.SliceStable(mine, func(i, j int) bool { return mine[i].Created > mine[j].Created })
	for _, extra := range mine[1:] {
		e.log.Warn("removing a second container of one run", "run_id", r.job.RunID, "container_id", extra.ID)
		e.remove(r, extra.ID)
	}
	return mine[0], true, nil
}

// findContainerByID looks up r.job.ContainerID, the container a run was
// started in that does not carry the run's ID (a warm pool's, made before
// the run). Only a managed container of this node is the run's, and none
// labelled with another run's ID.
func (rc *Reconciler) findContainerByID(ctx context.Context, r *run) (container.Summary, bool, error) {
	e := rc.e
	id := r.job.ContainerID
	mine, err := rc.listRunContainers(ctx, r, filters.Arg("id", id))
	if err != nil {
		return container.Summary{}, false, err
	}
	for _, c := range mine {
		// The id filter matches prefixes; the store keeps full IDs.
		if c.ID != id {
			continue
		}
		if owner := c.Labels[sandgate.LabelRunID]; owner != "" && owner != r.job.RunID {
			e.log.Warn("the recorded container of a run belongs to another run; not adopting it",
				"run_id", r.job.RunID, "container_id", id, "owner", owner)
			return container.Summary{}, false, nil
		}
		return c, true, nil
	}
	return container.Summary{}, false, nil
}

// listRunContainers lists the managed containers of this node that match
// the filter.
func (rc *Reconciler) listRunContainers(ctx context.Context, r *run, filter filters.KeyValuePair) ([]container.Summary, error) {
	e := rc.e
	var list []container.Summary
	err := e.call(ctx, r, "list containers", func(ctx context.Context) error {
		var err error
		list, err = e.docker.ContainerList(ctx, container.ListOptions{
			All:     true,
			Filters: filters.NewArgs(filters.Arg("label", sandgate.LabelManaged+"=true"), filter),
		})
		return err
	})
	if err != nil {
		return nil, dockerError(sandgate.CodeDockerUnavailable, err, "look for the container of run %s", r.job.RunID)
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

// eventsAPI is the Docker call that tells who stopped a container.
// *client.Client has it; a daemon client without it is never asked.
type eventsAPI interface {
	Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error)
}

// stoppedOutside asks the daemon's events how a container that died of
// a signal sandgate did not send was ended. oom is true when the kernel's
// OOM killer struck: the daemon records that asynchronously, so an
// inspect right after the exit may not show it yet. why says who stopped
// it through the daemon otherwise: a daemon that shuts down (a restart of
// the Docker service) stops every container, and so does an operator's
// `docker stop` or `docker kill`; such an end is not the program's,
// whatever its exit code. A program that kills itself leaves no daemon
// event. Both are zero when the events show neither, or cannot be read.
func (e *Executor) stoppedOutside(ctx context.Context, id string, started time.Time, code int64) (why string, oom bool) {
	ev, ok := e.docker.(eventsAPI)
	if !ok || code < 128 || id == "" {
		return "", false
	}
	why, oom = e.daemonStops(ctx, ev, id, started, code)
	if why == "" && !oom && code == 137 {
		// SIGKILL with no event yet: the OOM event may still be on its
		// way from the runtime; look once more a moment later.
		select {
		case <-time.After(oomEventGrace):
			why, oom = e.daemonStops(ctx, ev, id, started, code)
		case <-ctx.Done():
		}
	}
	return why, oom
}

// oomEventGrace is how long a SIGKILLed container's OOM event is given
// to arrive after its exit.
const oomEventGrace = 300 * time.Millisecond

// daemonStops reads the container's kill and oom events once.
func (e *Executor) daemonStops(ctx context.Context, ev eventsAPI, id string, started time.Time, code int64) (why string, oom bool) {
	since := started
	if since.IsZero() {
		since = e.now().Add(-time.Hour)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CallTimeout)
	defer cancel()
	msgs, errs := ev.Events(ctx, events.ListOptions{
		Since: strconv.FormatInt(since.Add(-time.Second).Unix(), 10),
		Until: strconv.FormatInt(e.now().Add(time.Second).Unix(), 10),
		Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)),
			filters.Arg("container", id),
			filters.Arg("event", string(events.ActionKill)),
			filters.Arg("event", string(events.ActionOOM)),
		),
	})
	for {
		select {
		case m := <-msgs:
			switch m.Action {
			case events.ActionOOM:
				oom = true
			case events.ActionKill:
				why = fmt.Sprintf("the container was stopped through the Docker daemon with signal %s (a restart of the daemon, or an operator), not by its program or by sandgate; exit code %d",
					m.Actor.Attributes["signal"], code)
			}
		case err := <-errs:
			// io.EOF once the window is read; anything else means the
			// events cannot be read.
			if oom {
				why = ""
			}
			if why == "" && !oom && err != nil && !errors.Is(err, io.EOF) && !e.daemonAnswers(ctx) {
				// A daemon that shuts down stops every container and then
				// closes its API, sometimes before the kill events can be
				// read: a signal death followed at once by a daemon that
				// no longer answers is the daemon's doing.
				why = fmt.Sprintf("the container died of a signal (exit code %d) as the Docker daemon stopped answering: a restart of the daemon stops every container", code)
			}
			return why, oom
		case <-ctx.Done():
			return "", oom
		}
	}
}

// daemonAnswers pings the daemon once, without retries: is it there now?
func (e *Executor) daemonAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := e.docker.Ping(ctx)
	return err == nil
}
