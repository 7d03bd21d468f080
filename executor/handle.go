package executor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate"
)

// Why a run's context was cancelled, besides the caller's own context.
var (
	errCancelled = errors.New("run cancelled")
	errShutdown  = errors.New("executor shutting down")
	errLost      = errors.New("container vanished")
	errAgentGone = errors.New("the session's agent ended")
)

// handle owns one run from the moment the executor takes it to its end:
// its context and cancellation, its state, its container (created for the
// run, claimed from the warm pool, adopted after a restart, or, for a
// command in a session, the session's, which it only borrows), the
// process it follows there (proc.go), the output that process writes, the
// sampler of what it uses, and the one result the run ends with. Every
// path of every kind of run ends in end, which decides the outcome from
// an ending; nothing else makes a run's result. As Nomad's taskHandle,
// it is the only owner of its container: it starts, waits for, stops,
// inspects and removes it.
type handle struct {
	e   *Executor
	job sandgate.Job
	log *slog.Logger
	now sandgate.Clock

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	docker containerAPI
	calls  calls
	trail  *trail

	// host is the session's handle when this run is a command in it:
	// the container is the session's, never removed by this handle.
	host *handle

	// ending is set once the container is being stopped or has exited:
	// commands of a session that end then ended with it.
	ending atomic.Bool

	mu      sync.Mutex
	state   sandgate.State
	id      string
	created time.Time
	agent   *agentLink // the container's agent, once authenticated
	ws      *runWorkspace

	// res is what is known of the run so far: its container, when it
	// was created and started.
	res            sandgate.Result
	stdout, stderr *capture
	// main is the container's main process, once there is a container
	// this handle owns.
	main *mainProc
	// member is the warm pool member the container came from, if any.
	member *member
	// usage reads the container's counters while its command runs.
	usage *sampler

	// What close undoes: the run's place (a run slot, or a session
	// container's session place), its pinned mounts, the proxy's
	// registration of its address (which answers its egress summary).
	slot      *slots
	staged    bool
	egressEnd func() *sandgate.EgressSummary
	// secrets are a run with secrets' authority, placeholders and trust
	// file (secrets.go); nil otherwise.
	secrets *runSecrets
	// asyncRemove removes the container after the run has answered (a
	// warm run through the agent: its removal is off the run's path).
	asyncRemove bool

	once   sync.Once
	result sandgate.Result
	err    error
}

// newHandle makes the handle of job; the run is not live until the
// executor's registry has taken it.
func (e *Executor) newHandle(ctx context.Context, job sandgate.Job) *handle {
	rctx, cancel := context.WithCancelCause(ctx)
	stdout, stderr := captures(job)
	h := &handle{e: e, job: job, log: e.log, now: e.now, ctx: rctx, cancel: cancel, done: make(chan struct{}),
		docker: e.docker, calls: e.calls, state: sandgate.StatePending, stdout: stdout, stderr: stderr}
	h.trail = &trail{sink: e.events, now: e.now, node: e.cfg.Node, job: &h.job, container: func() string {
		id, _, _ := h.snapshot()
		return id
	}}
	return h
}

// setContainer records the run's container, made or found at created.
func (h *handle) setContainer(id string, created time.Time) {
	h.mu.Lock()
	h.id, h.created, h.state = id, created, sandgate.StateCreating
	h.mu.Unlock()
	h.res.ContainerID, h.res.CreatedAt = id, created
}

func (h *handle) setState(s sandgate.State) {
	h.mu.Lock()
	h.state = s
	h.mu.Unlock()
}

// setLink records the container's agent and workspace, for the commands
// and files of a session.
func (h *handle) setLink(l *agentLink, ws *runWorkspace) {
	h.mu.Lock()
	h.agent, h.ws = l, ws
	h.mu.Unlock()
}

// link is the container's agent and workspace, as far as they are known.
func (h *handle) link() (*agentLink, *runWorkspace) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.agent, h.ws
}

func (h *handle) snapshot() (id string, state sandgate.State, created time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.id, h.state, h.created
}

// started records that the run's command runs: its state, the sampler
// of its container (when it is the handle's own), its container.started
// event and the job's Started callback.
func (h *handle) started(at time.Time, payload map[string]any, emit bool) {
	h.res.StartedAt = at
	if h.main != nil {
		h.usage = h.e.meter.watch(h.main.wctx, h.res.ContainerID, h.job.Spec.Network != "none", h.member != nil)
	}
	h.setState(sandgate.StateRunning)
	if emit {
		h.trail.started(payload)
	}
	if h.job.Started != nil {
		h.job.Started(h.res.ContainerID, at)
	}
}

// timeout is the run's timeout, less what has passed since its command
// started.
func (h *handle) timeout() time.Duration {
	t := time.Duration(h.job.Spec.TimeoutSeconds) * time.Second
	if !h.res.StartedAt.IsZero() {
		t -= h.now().Sub(h.res.StartedAt)
	}
	return max(t, 0)
}

// sampled is the usage the handle's sampler read, for an ending; a run
// killed for memory used its limit (as containerSettings sets it).
func (h *handle) sampled(res sandgate.Result) *sandgate.Usage {
	return h.usage.usage(res, h.job.Spec.Resources.MemoryMB<<20)
}

// end ends the run, once: the outcome decided from x (decide), the egress
// summary taken from the proxy, the container removed (close). Every path
// of Execute, Exec and Adopt returns through it, so no run ends without
// an outcome.
func (h *handle) end(x ending) (sandgate.Result, error) {
	h.once.Do(func() {
		h.result, h.err = h.decide(x)
		if h.egressEnd != nil {
			h.result.Egress = h.egressEnd()
		}
		h.close()
	})
	return h.result, h.err
}

// close releases what the run holds: the sampler, the attach stream and
// the wait, the container (unless a session's command borrowed it; a
// warm pool member's ownership ends with it), the workspace, the pinned
// mounts, and the run's slot. A container that cannot be removed now is
// left to the reaper.
func (h *handle) close() {
	h.usage.stop()
	if h.slot != nil {
		defer h.slot.release(h.job.Team)
	}
	if h.host != nil {
		return
	}
	remove := func() {
		if h.main != nil {
			h.main.release()
		}
		if id, _, _ := h.snapshot(); id != "" {
			h.remove(id)
		}
		if h.member != nil {
			h.e.pool.release(h.member)
		}
		if _, ws := h.link(); ws != nil {
			h.e.workspaces.remove(ws)
		}
		if h.staged {
			h.e.stager.unstage(h.e.cfg.Node, h.job.RunID)
		}
		h.secrets.remove()
	}
	if !h.asyncRemove {
		remove()
		return
	}
	h.e.removing.Add(1)
	go func() {
		defer h.e.removing.Done()
		remove()
	}()
}

// cancelReason is why a cancelled run was cancelled: by a caller, or by
// the executor's shutdown.
func (h *handle) cancelReason() string {
	if errors.Is(context.Cause(h.ctx), errShutdown) {
		return "shutdown"
	}
	return "cancelled"
}
