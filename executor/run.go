package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate"
)

// drainTimeout bounds how long output may keep arriving after the
// container has exited; the daemon closes the attach stream at exit, so
// this only matters when it does not.
const drainTimeout = 10 * time.Second

// run is one job while Execute works on it.
type run struct {
	job    sandgate.Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu          sync.Mutex
	containerID string
	state       sandgate.State
	createdAt   time.Time
}

func (r *run) setContainer(id string, at time.Time) {
	r.mu.Lock()
	r.containerID, r.createdAt, r.state = id, at, sandgate.StateCreating
	r.mu.Unlock()
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

// stopReason says why a run was stopped before it exited by itself.
type stopReason int

const (
	notStopped stopReason = iota
	stoppedTimeout
	stoppedCancel
	stoppedLost
)

// reasonOf maps the run context's cause to a stop reason.
func reasonOf(ctx context.Context) stopReason {
	if errors.Is(context.Cause(ctx), errLost) {
		return stoppedLost
	}
	return stoppedCancel
}

func (e *Executor) execute(r *run) (sandgate.Result, error) {
	ctx := r.ctx
	set, err := containerSettings(r.job, e.cfg)
	if err != nil {
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
	if m := e.pool.claim(ctx, r, set, imageID); m != nil {
		return e.executeWarm(ctx, r, set, imageID, m)
	}
	if pinned, ok := localPinID(set.config.Image, imageID); ok {
		set.config.Image = pinned // the daemon resolves name@digest only against registry digests
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

	id, err := e.create(ctx, r, set)
	if err != nil {
		if ctx.Err() != nil {
			// The create may have happened after all; find it by name.
			e.removeByName(r, set.name)
			return e.cancelledBeforeStart(r), nil
		}
		return e.failed(r, err), err
	}
	created := e.now()
	r.setContainer(id, created)
	res := sandgate.Result{ContainerID: id, CreatedAt: created}
	payload := map[string]any{"name": set.name, "image": set.config.Image, "image_id": imageID}
	if len(staged) > 0 {
		payload["mounts"] = stagedDocs(staged, r.job.Spec.Mounts)
	}
	e.emit(r, sandgate.EventContainerCreated, payload)
	defer e.remove(r, id)

	if err := e.checkIdentity(ctx, r, id, imageID); err != nil {
		if ctx.Err() != nil {
			return e.cancelledBeforeStart(r, res), nil
		}
		return e.failed(r, err, res), err
	}
	return e.attachAndRun(ctx, r, set, res)
}

// attachAndRun attaches to the created container, starts it, streams its
// output and waits for its end. The order is the Docker CLI's: attach and
// register the wait before start, so no output and no exit is missed.
func (e *Executor) attachAndRun(ctx context.Context, r *run, set settings, res sandgate.Result) (sandgate.Result, error) {
	id := res.ContainerID
	spec := r.job.Spec
	var hj types.HijackedResponse
	err := e.call(ctx, r, "attach", func(ctx context.Context) error {
		var err error
		hj, err = e.docker.ContainerAttach(ctx, id, container.AttachOptions{
			Stream: true, Stdin: spec.Stdin != "", Stdout: true, Stderr: true,
		})
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return e.cancelledBeforeStart(r, res), nil
		}
		err = dockerError(sandgate.CodeContainerCreate, err, "attach to container %s", id)
		return e.failed(r, err, res), err
	}
	defer hj.Close()

	// The wait outlives cancellation of the run: a stopped run still
	// reports its exit.
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer wcancel()
	waitC, waitErrC := e.docker.ContainerWait(wctx, id, container.WaitConditionNextExit)

	stdout, stderr := captures(r.job)

	if code, err := e.start(ctx, r, id); err != nil {
		if ctx.Err() != nil {
			return e.cancelledBeforeStart(r, res), nil
		}
		res.ExitCode = code
		return e.failed(r, err, res), err
	}
	res.StartedAt = e.now()
	r.setState(sandgate.StateRunning)
	e.emit(r, sandgate.EventContainerStarted, nil)
	if r.job.Started != nil {
		r.job.Started(id, res.StartedAt)
	}

	if spec.Stdin != "" {
		go func() {
			// A container that exits without reading its input closes the
			// stream under us; that is its business, not an error.
			_, _ = io.WriteString(hj.Conn, spec.Stdin)
			_ = hj.CloseWrite()
		}()
	}
	exitC := make(chan exitStatus, 1)
	go func() { exitC <- e.waitExit(wctx, r, id, waitC, waitErrC) }()
	return e.supervise(ctx, wctx, r, res, hj, stdout, stderr, exitC)
}

// supervise follows a container whose command is running: it streams the
// output from the attach stream, enforces the run's timeout and
// cancellation, and reports how the container ended. wctx outlives the
// run's cancellation for the calls that must still happen.
func (e *Executor) supervise(ctx, wctx context.Context, r *run, res sandgate.Result, hj types.HijackedResponse, stdout, stderr *capture, exitC <-chan exitStatus) (sandgate.Result, error) {
	id := res.ContainerID
	spec := r.job.Spec
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		if _, err := stdcopy.StdCopy(stdout, stderr, hj.Reader); err != nil && !errors.Is(err, io.EOF) {
			e.log.Debug("output stream ended", "run_id", r.job.RunID, "err", err)
		}
	}()

	timeout := time.Duration(spec.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Duration(sandgate.BuiltinDefaults.TimeoutSeconds) * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()

	reason := notStopped
	var exit exitStatus
	select {
	case exit = <-exitC:
	case <-timer.C:
		reason = stoppedTimeout
	case <-ctx.Done():
		reason = reasonOf(ctx)
	}
	if reason == stoppedTimeout || reason == stoppedCancel {
		exit = e.stop(wctx, r, id, exitC)
	} else if reason == stoppedLost {
		exit = exitStatus{lost: true}
	}
	res.FinishedAt = e.now()

	return e.conclude(ctx, r, id, res, reason, exit, hj, pumped, stdout, stderr)
}

// conclude ends a run whose container has ended (or was lost): it keeps
// everything the container wrote, inspects it for the exit code and the
// OOM flag, and finishes the run. Both a fresh run and an adopted one end
// here.
func (e *Executor) conclude(ctx context.Context, r *run, id string, res sandgate.Result, reason stopReason, exit exitStatus,
	hj types.HijackedResponse, pumped <-chan struct{}, stdout, stderr *capture) (sandgate.Result, error) {
	closeStream := func() {
		if hj.Conn != nil {
			hj.Close()
		}
	}
	// Everything the container wrote before it ended is kept. A lost
	// container will not close its stream, so what came is all there is.
	drain := time.After(drainTimeout)
	if exit.lost {
		drain = nil
		closeStream()
	}
	select {
	case <-pumped:
	case <-drain:
		closeStream()
		<-pumped
	}
	res.Stdout, res.Stderr = stdout.output(), stderr.output()

	var state container.InspectResponse
	if !exit.lost {
		ictx, cancel := e.cleanupContext(ctx)
		err := e.call(ictx, r, "inspect", func(ctx context.Context) error {
			var err error
			state, err = e.docker.ContainerInspect(ctx, id)
			return err
		})
		cancel()
		if err != nil {
			exit = exitStatus{lost: true, err: err}
		} else if s := stateOf(state); reason == notStopped && s != nil && (s.Status == "removing" || s.Status == "dead") {
			// Someone else is removing it: it was killed under the run,
			// not ended by it.
			exit = exitStatus{lost: true}
		}
	}
	return e.finish(r, res, reason, exit, state)
}

// exitStatus is what waiting for the container's end found out.
type exitStatus struct {
	code int64
	// lost means the container vanished, or the daemon stopped answering
	// about it, before its end was seen.
	lost bool
	err  error
}

// waitExit waits for the container to exit. When the wait registered
// before start fails (the daemon restarted, the connection broke), it asks
// again with condition not-running, which answers at once for a container
// that has already exited.
func (e *Executor) waitExit(ctx context.Context, r *run, id string, waitC <-chan container.WaitResponse, errC <-chan error) exitStatus {
	select {
	case w := <-waitC:
		return exitStatus{code: w.StatusCode}
	case err := <-errC:
		if ctx.Err() != nil {
			return exitStatus{lost: true, err: err}
		}
		e.log.Warn("wait for container failed, waiting again", "run_id", r.job.RunID, "err", err)
	}
	var code int64
	err := e.callWith(ctx, r, "wait", 0, func(ctx context.Context) error {
		waitC, errC := e.docker.ContainerWait(ctx, id, container.WaitConditionNotRunning)
		select {
		case w := <-waitC:
			code = w.StatusCode
			return nil
		case err := <-errC:
			return err
		}
	})
	if err != nil {
		return exitStatus{lost: true, err: err}
	}
	return exitStatus{code: code}
}

// stop ends a container that is still running: SIGTERM, then StopGrace for
// it to exit, then SIGKILL. It returns the container's exit.
func (e *Executor) stop(ctx context.Context, r *run, id string, exitC <-chan exitStatus) exitStatus {
	kill := func(signal string) {
		err := e.call(ctx, r, "kill "+signal, func(ctx context.Context) error {
			return e.docker.ContainerKill(ctx, id, signal)
		})
		// Conflict: it is not running any more, which is what we want.
		if err != nil && !cerrdefs.IsConflict(err) && !cerrdefs.IsNotFound(err) {
			e.log.Warn("signal container", "run_id", r.job.RunID, "signal", signal, "err", err)
		}
	}
	kill("SIGTERM")
	grace := time.NewTimer(e.cfg.StopGrace)
	defer grace.Stop()
	select {
	case exit := <-exitC:
		return exit
	case <-grace.C:
	}
	kill("SIGKILL")
	select {
	case exit := <-exitC:
		return exit
	case <-time.After(e.cfg.CallTimeout):
		return exitStatus{lost: true, err: fmt.Errorf("container %s did not exit after SIGKILL", id)}
	}
}

// finish decides the outcome and reports it.
func (e *Executor) finish(r *run, res sandgate.Result, reason stopReason, exit exitStatus, state container.InspectResponse) (sandgate.Result, error) {
	if exit.lost {
		res.Outcome = sandgate.OutcomeLost
		code := sandgate.CodeContainerCreate
		msg := "the container vanished while the run was executing"
		if exit.err != nil && unreachable(exit.err) {
			code, msg = sandgate.CodeDockerUnavailable, "the docker daemon stopped answering about the container"
		}
		res.Error = &sandgate.ErrorInfo{Code: code, Message: msg}
		e.emit(r, sandgate.EventRunLost, e.outputPayload(res, map[string]any{"error_code": string(code)}))
		return res, nil
	}
	code := exit.code
	if s := stateOf(state); s != nil {
		code = int64(s.ExitCode)
		res.OOMKilled = s.OOMKilled
	}
	if reason == notStopped && !res.OOMKilled {
		// The daemon may record an OOM kill after the exit; and a daemon
		// restart stops every container, an end that is not the program's.
		why, oom := e.stoppedOutside(r.ctx, res.ContainerID, res.StartedAt, code)
		if why != "" {
			return e.stoppedByDocker(r, res, code, why), nil
		}
		res.OOMKilled = oom
	}
	c := int(code)
	res.ExitCode = &c
	switch {
	case reason == stoppedCancel:
		res.Outcome = sandgate.OutcomeCancelled
	case reason == stoppedTimeout:
		res.Outcome = sandgate.OutcomeTimedOut
	case res.OOMKilled:
		res.Outcome = sandgate.OutcomeOOMKilled
	case c == 0:
		res.Outcome = sandgate.OutcomeSucceeded
	default:
		res.Outcome = sandgate.OutcomeFailed
	}
	e.emitExit(r, sandgate.EventContainerExited, res, e.outputPayload(res, map[string]any{
		"oom_killed":  res.OOMKilled,
		"duration_ms": res.FinishedAt.Sub(res.StartedAt).Milliseconds(),
	}))
	switch res.Outcome {
	case sandgate.OutcomeOOMKilled:
		e.emitExit(r, sandgate.EventContainerOOMKilled, res, map[string]any{"memory_mb": r.job.Spec.Resources.MemoryMB})
	case sandgate.OutcomeTimedOut:
		e.emitExit(r, sandgate.EventRunTimedOut, res, map[string]any{"timeout_seconds": r.job.Spec.TimeoutSeconds})
	case sandgate.OutcomeCancelled:
		reason := "cancelled"
		if errors.Is(context.Cause(r.ctx), errShutdown) {
			reason = "shutdown"
		}
		e.emitExit(r, sandgate.EventRunCancelled, res, map[string]any{"reason": reason})
	}
	return res, nil
}

// outputPayload adds the sizes and digests of the output, never the data.
func (e *Executor) outputPayload(res sandgate.Result, p map[string]any) map[string]any {
	for name, o := range map[string]sandgate.Output{"stdout": res.Stdout, "stderr": res.Stderr} {
		p[name+"_bytes"] = o.Bytes
		p[name+"_sha256"] = o.SHA256
		p[name+"_truncated"] = o.Truncated
	}
	return p
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

// emit sends one lifecycle event about r.
func (e *Executor) emit(r *run, t sandgate.EventType, payload map[string]any) {
	id, _, _ := r.snapshot()
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
