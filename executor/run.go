package executor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate"
)

// run is one job while Execute works on it.
type run struct {
	job    sandgate.Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	// workspacePayload says what was written into the run's workspace,
	// for its container.created event.
	workspacePayload map[string]any

	// ending is set once the run's container is being stopped or has
	// exited: commands of a session that end then ended with it.
	ending atomic.Bool

	mu          sync.Mutex
	agent       *agentLink    // the container's agent, once authenticated
	ws          *runWorkspace // a session's workspace
	containerID string
	state       sandgate.State
	createdAt   time.Time
}

func (r *run) setContainer(id string, at time.Time) {
	r.mu.Lock()
	r.containerID, r.createdAt, r.state = id, at, sandgate.StateCreating
	r.mu.Unlock()
}

func (r *run) setAgent(l *agentLink) {
	r.mu.Lock()
	r.agent = l
	r.mu.Unlock()
}

func (r *run) setWorkspace(ws *runWorkspace) {
	r.mu.Lock()
	r.ws = ws
	r.mu.Unlock()
}

func (r *run) workspace() *runWorkspace {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ws
}

func (r *run) agentLink() *agentLink {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.agent
}

func (r *run) setState(s sandgate.State) {
	r.mu.Lock()
	r.state = s
	r.mu.Unlock()
}

func (r *run) snapshot() (id string, state sandgate.State, created time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.containerID, r.state, r.createdAt
}

// Execute runs job to completion in a fresh container and reports how it
// ended. It waits for a free slot when MaxConcurrent runs already hold
// one. It returns an error only when the job could not be run at all:
// SBX-001 (refused or not created or not started), SBX-002 (image
// unavailable), SBX-003 (mount), SBX-004 (resource limit) or
// DOCKER-UNAVAILABLE; the result then still says when it ended and why.
// Cancelling ctx cancels the run like Cancel does.
func (e *Executor) Execute(ctx context.Context, job sandgate.Job) (sandgate.Result, error) {
	r, err := e.register(ctx, job)
	if err != nil {
		return e.failed(nil, err), err
	}
	defer e.unregister(r)
	return e.execute(r)
}

// register makes the run live: from here on the reaper leaves its
// container alone and Cancel and Shutdown can reach it.
func (e *Executor) register(ctx context.Context, job sandgate.Job) (*run, error) {
	if job.RunID == "" {
		return nil, &sandgate.Error{Code: sandgate.CodeInvalidRequest, Field: "run_id", Message: "is required"}
	}
	rctx, cancel := context.WithCancelCause(ctx)
	r := &run{job: job, ctx: rctx, cancel: cancel, done: make(chan struct{}), state: sandgate.StatePending}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		cancel(errShutdown)
		return nil, sandgate.Errorf(sandgate.CodeUnavailable, "executor on node %s is shutting down", e.cfg.Node)
	}
	if e.runs[job.RunID] != nil {
		cancel(nil)
		return nil, sandgate.Errorf(sandgate.CodeConflict, "run %s is already executing", job.RunID)
	}
	e.runs[job.RunID] = r
	e.active.Add(1)
	return r, nil
}

func (e *Executor) unregister(r *run) {
	e.mu.Lock()
	delete(e.runs, r.job.RunID)
	e.mu.Unlock()
	r.cancel(nil)
	close(r.done)
	e.active.Done()
}

func (e *Executor) execute(r *run) (sandgate.Result, error) {
	ctx := r.ctx
	set, err := containerSettings(r.job, e.cfg)
	if err != nil {
		return e.failed(r, err), err
	}
	if err := e.checkRuntime(ctx, r, set.host.Runtime); err != nil {
		return e.failed(r, err), err
	}

	// Queue for a slot, fairly between teams; a run cancelled while
	// queued never gets a container.
	if !e.slots.acquire(ctx, r.job.Team, r.job.TeamConcurrency) {
		return e.cancelledBeforeStart(r), nil
	}
	defer e.slots.release(r.job.Team)

	imageID, err := e.resolveImage(ctx, r, set.config.Image)
	if err != nil {
		if ctx.Err() != nil {
			return e.cancelledBeforeStart(r), nil
		}
		return e.failed(r, err), err
	}
	// A warm container has no workspace but a warm session's own: a run
	// with one is created, and so is a session without an agent.
	if !r.job.Spec.HasWorkspace() && r.job.Spec.Network != sandgate.NetworkEgress && (!r.job.SessionContainer || e.cfg.AgentBinary != "") {
		if m := e.pool.claim(ctx, r, set, imageID); m != nil {
			return e.executeWarm(ctx, r, set, imageID, m)
		}
	}
	if pinned, ok := localPinID(set.config.Image, imageID); ok {
		set.config.Image = pinned // the daemon resolves name@digest only against registry digests
	} else if signatureRequired(r, set.config.Image) {
		// The container is made from the image whose signature was
		// checked, not from whatever its name points at by then.
		set.config.Image = imageID
	}

	// Bind-mount sources are pinned now, just before create, and the
	// daemon is given the pinned paths: what was admitted is what is
	// mounted, whatever happened to the paths while the run queued.
	staged, err := e.stageMounts(r, &set)
	if err != nil {
		return e.failed(r, err), err
	}
	if len(staged) > 0 {
		defer e.stager.unstage(e.cfg.Node, r.job.RunID)
	}
	if err := e.ensureVolumes(ctx, r, &set); err != nil {
		return e.failed(r, err), err
	}
	if string(set.host.NetworkMode) == e.cfg.BridgeNetwork {
		if err := e.ensureBridge(ctx, r); err != nil {
			return e.failed(r, err), err
		}
	}
	if string(set.host.NetworkMode) == e.cfg.EgressNetwork && !r.job.AirGapped {
		eg, err := e.ensureEgress(ctx, r)
		if err != nil {
			return e.failed(r, err), err
		}
		set.config.Env = append(set.config.Env, eg.env...)
		// Docker's embedded DNS server would forward the run's queries
		// to the host's resolvers, a channel out that no proxy sees:
		// its only upstream is the gateway address, where the firewall
		// drops them. Names are resolved by the proxy.
		set.host.DNS = []string{eg.gateway.String()}
	}
	var ws *runWorkspace
	if r.job.Spec.HasWorkspace() || r.job.SessionContainer {
		if ws, err = e.prepareWorkspace(ctx, r, &set); err != nil {
			return e.failed(r, err), err
		}
	}

	useAgent := r.job.SessionContainer && e.cfg.AgentBinary != ""
	if useAgent {
		e.withAgent(&set)
	}
	id, err := e.create(ctx, r, set)
	if err != nil {
		if ws != nil {
			defer ws.remove(e)
		}
		if ctx.Err() != nil {
			// The create may have happened after all; find it by name.
			e.removeByName(r, set.name)
			return e.cancelledBeforeStart(r), nil
		}
		return e.failed(r, err), err
	}
	h := e.newHandle(r, id, e.now())
	h.useAgent = useAgent
	h.ws = ws // the handle owns it from here: removed after the container
	r.setWorkspace(ws)
	defer h.close()
	payload := map[string]any{"name": set.name, "image": set.config.Image, "image_id": imageID}
	if len(staged) > 0 {
		payload["mounts"] = stagedDocs(staged, r.job.Spec.Mounts)
	}
	if r.workspacePayload != nil {
		payload["workspace"] = r.workspacePayload
	}
	e.emit(r, sandgate.EventContainerCreated, payload)

	if err := e.checkIdentity(ctx, r, id, imageID); err != nil {
		if ctx.Err() != nil {
			return h.cancelled(), nil
		}
		return h.failed(err), err
	}
	return e.startAndSupervise(ctx, h)
}

// startAndSupervise starts a created container and follows it to its
// end: attached to and waited on first, so no output and no exit is
// missed, then started exactly once.
func (e *Executor) startAndSupervise(ctx context.Context, h *handle) (res sandgate.Result, err error) {
	stdin := h.r.job.Spec.Stdin
	if err := h.attach(ctx, stdin != "" || h.useAgent, container.WaitConditionNextExit); err != nil {
		if ctx.Err() != nil {
			return h.cancelled(), nil
		}
		return h.failed(err), err
	}
	if code, err := e.start(ctx, h.r, h.id); err != nil {
		if ctx.Err() != nil {
			return h.cancelled(), nil
		}
		h.res.ExitCode = code
		return h.failed(err), err
	}
	if h.useAgent {
		// An agent that does not answer (it exited at once, the binary
		// does not run in the image) fails the run before it is started:
		// a session is not open until its agent is.
		l, err := e.dialAgent(h.hj, h.stderr)
		if err != nil {
			err = sandgate.WrapError(sandgate.CodeContainerCreate, err, "the sandbox agent of container %s", h.id)
			h.stop(h.exitC())
			return h.failed(err), err
		}
		h.agent = l
		h.r.setAgent(l)
	}
	h.started(e.now(), nil, true)
	if end := e.egressFor(ctx, h); end != nil {
		defer func() { res.Egress = end() }()
	}
	if stdin != "" {
		h.writeStdin(stdin)
	}
	return h.supervise(ctx)
}

// failed reports a run that could not be run at all. r is nil when the job
// was refused before it became live. res carries what was done already.
func (e *Executor) failed(r *run, err error, res ...sandgate.Result) sandgate.Result {
	var out sandgate.Result
	if len(res) > 0 {
		out = res[0]
	}
	out.Outcome = sandgate.OutcomeError
	out.FinishedAt = e.now()
	out.Stdout, out.Stderr = noOutput(out.Stdout), noOutput(out.Stderr)
	code := sandgate.ErrorCodeOf(err)
	out.Error = &sandgate.ErrorInfo{Code: code, Message: sandgate.ErrorMessageOf(err)}
	var se *sandgate.Error
	if !errors.As(err, &se) {
		out.Error.Message = err.Error()
	}
	if r != nil {
		e.log.Warn("run failed", "run_id", r.job.RunID, "code", code, "err", err)
		e.emit(r, sandgate.EventRunFailed, map[string]any{"error_code": string(code), "message": out.Error.Message})
	}
	return out
}

// noOutput is o, or the empty stream when nothing was captured.
func noOutput(o sandgate.Output) sandgate.Output {
	if o.Encoding != "" {
		return o
	}
	return newCapture(sandgate.Stdout, nil, 0, nil).output()
}

// cancelledBeforeStart reports a run cancelled before its container ran.
func (e *Executor) cancelledBeforeStart(r *run, res ...sandgate.Result) sandgate.Result {
	var out sandgate.Result
	if len(res) > 0 {
		out = res[0]
	}
	out.Outcome = sandgate.OutcomeCancelled
	out.FinishedAt = e.now()
	out.Stdout, out.Stderr = noOutput(out.Stdout), noOutput(out.Stderr)
	reason := "cancelled"
	if errors.Is(context.Cause(r.ctx), errShutdown) {
		reason = "shutdown"
	}
	e.emit(r, sandgate.EventRunCancelled, map[string]any{"reason": reason, "before_start": true})
	return out
}

// cleanupContext is for the calls that must happen even after the run was
// cancelled: they get a fresh deadline instead of the run's context.
func (e *Executor) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CallTimeout*time.Duration(e.cfg.MaxRetries+1))
}

// remove removes the run's container and reports it. A container that
// cannot be removed now is left to the reaper.
func (e *Executor) remove(r *run, id string) {
	ctx, cancel := e.cleanupContext(r.ctx)
	defer cancel()
	err := e.call(ctx, r, "remove", func(ctx context.Context) error {
		return e.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	})
	switch {
	case err == nil:
		e.emit(r, sandgate.EventContainerRemoved, nil)
	case cerrdefs.IsNotFound(err):
		// Gone already: a lost run, or removed by hand.
	default:
		e.log.Error("remove container; the reaper will retry", "run_id", r.job.RunID, "container_id", id, "err", err)
	}
}

// removeByName removes the container a cancelled create may have made.
func (e *Executor) removeByName(r *run, name string) {
	ctx, cancel := e.cleanupContext(r.ctx)
	defer cancel()
	id, ok, err := e.findOwn(ctx, r, name)
	if err != nil || !ok {
		return
	}
	r.setContainer(id, e.now())
	e.remove(r, id)
}

// sessionPayload adds the session the run belongs to, if any: a session's
// container (whose run ID is the session's) or a command in one.
func sessionPayload(r *run, payload map[string]any) map[string]any {
	sid := r.job.SessionID
	if r.job.SessionContainer {
		sid = r.job.RunID
	}
	if sid == "" {
		return payload
	}
	if payload == nil {
		payload = map[string]any{}
	}
	payload["session_id"] = sid
	return payload
}

// emit sends one lifecycle event about r.
func (e *Executor) emit(r *run, t sandgate.EventType, payload map[string]any) {
	id, _, _ := r.snapshot()
	payload = sessionPayload(r, payload)
	e.events.Emit(sandgate.Event{
		Type:          t,
		Time:          e.now(),
		CorrelationID: r.job.CorrelationID,
		RunID:         r.job.RunID,
		DecisionID:    r.job.DecisionID,
		ContainerID:   id,
		Actor:         r.job.Principal,
		Team:          r.job.Team,
		Node:          e.cfg.Node,
		Payload:       payload,
	})
}

// emitExit sends an event that carries the run's exit code and outcome.
func (e *Executor) emitExit(r *run, t sandgate.EventType, res sandgate.Result, payload map[string]any) {
	id, _, _ := r.snapshot()
	payload = sessionPayload(r, payload)
	var exit *int
	if res.ExitCode != nil {
		c := *res.ExitCode
		exit = &c
	}
	e.events.Emit(sandgate.Event{
		Type:          t,
		Time:          e.now(),
		Outcome:       string(res.Outcome),
		CorrelationID: r.job.CorrelationID,
		RunID:         r.job.RunID,
		DecisionID:    r.job.DecisionID,
		ContainerID:   id,
		Actor:         r.job.Principal,
		Team:          r.job.Team,
		Node:          e.cfg.Node,
		ExitCode:      exit,
		Payload:       payload,
	})
}
