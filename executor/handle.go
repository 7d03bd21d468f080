package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/agent"
)

// drainTimeout bounds how long output may keep arriving after the
// container has exited; the daemon closes the attach stream at exit, so
// this only matters when it does not.
const drainTimeout = 10 * time.Second

// handle owns one container of one run, from the moment the container
// exists (created for the run, claimed from the warm pool, or adopted
// after a restart) to its removal: its attach stream and the output the
// stream carries, the wait for its exit, the run's timeout and
// cancellation, the stop, the inspect that tells an exit from an OOM kill
// or a loss, the sampler of what it uses (usage.go), the lifecycle events
// of its end, and its removal. Fresh,
// warm and adopted runs differ only in how their handle is made; from
// then on each is followed the same way.
type handle struct {
	e  *Executor
	r  *run
	id string
	// res is what is known of the run's end so far.
	res sandgate.Result

	// hj is the attach stream; its Conn is nil when there is none (an
	// adopted container the daemon would not attach to).
	hj             types.HijackedResponse
	stdout, stderr *capture

	// wctx outlives the run's cancellation: a stopped run still reports
	// its exit, and the calls that remove it still happen.
	wctx    context.Context
	wcancel context.CancelFunc
	waitC   <-chan container.WaitResponse
	waitErr <-chan error

	// member is the warm pool member the container came from, if any.
	member *member
	// ws is the run's workspace, if it has one: its artifacts are
	// collected from it once the command has ended, and it is removed
	// after the container.
	ws *runWorkspace

	// useAgent says the container's main process is the agent; agent is
	// the connection to it once authenticated, which reads the attach
	// stream in place of the output pump.
	useAgent bool
	agent    *agentLink

	// usage reads the container's resource counters from the start of
	// its command until its end is seen; nil before the command starts.
	usage *sampler
}

// newHandle makes the handle of container id, which the run has from
// created on.
func (e *Executor) newHandle(r *run, id string, created time.Time) *handle {
	r.setContainer(id, created)
	wctx, wcancel := context.WithCancel(context.WithoutCancel(r.ctx))
	stdout, stderr := captures(r.job)
	return &handle{e: e, r: r, id: id, res: sandgate.Result{ContainerID: id, CreatedAt: created},
		stdout: stdout, stderr: stderr, wctx: wctx, wcancel: wcancel}
}

// warmHandle is the handle of a claimed warm pool member: its container
// is started, attached to and waited on already.
func (e *Executor) warmHandle(r *run, m *member) *handle {
	h := e.newHandle(r, m.id, e.now())
	h.hj, h.waitC, h.waitErr, h.member = m.hj, m.waitC, m.errC, m
	return h
}

// attach attaches to the container's output (and its stdin when asked)
// and registers the wait for its exit under cond. A container about to
// start is attached to and waited on first, as the Docker CLI does, so
// that no output and no exit is missed.
func (h *handle) attach(ctx context.Context, stdin bool, cond container.WaitCondition) error {
	err := h.e.call(ctx, h.r, "attach", func(ctx context.Context) error {
		var err error
		h.hj, err = h.e.docker.ContainerAttach(ctx, h.id, container.AttachOptions{
			Stream: true, Stdin: stdin, Stdout: true, Stderr: true,
		})
		return err
	})
	h.waitC, h.waitErr = h.e.docker.ContainerWait(h.wctx, h.id, cond)
	if err != nil {
		return dockerError(sandgate.CodeContainerCreate, err, "attach to container %s", h.id)
	}
	return nil
}

// started records that the container's command runs: the run's state,
// its container.started event (payload may be nil) and the job's Started
// callback.
func (h *handle) started(at time.Time, payload map[string]any, emit bool) {
	h.res.StartedAt = at
	h.usage = h.e.watchUsage(h.wctx, h.id, h.r.job.Spec.Network != "none", h.member != nil)
	h.r.setState(sandgate.StateRunning)
	if emit {
		h.e.emit(h.r, sandgate.EventContainerStarted, payload)
	}
	if h.r.job.Started != nil {
		h.r.job.Started(h.id, at)
	}
}

// writeStdin hands the run's stdin to the container and closes it, in the
// background. A container that exits without reading its input closes
// the stream under us; that is its business, not an error.
func (h *handle) writeStdin(data string) {
	go func() {
		if _, err := io.WriteString(h.hj.Conn, data); err != nil {
			h.e.log.Debug("write stdin", "run_id", h.r.job.RunID, "err", err)
		}
		_ = h.hj.CloseWrite()
	}()
}

// timeout is the run's timeout, less what has passed since its command
// started.
func (h *handle) timeout() time.Duration {
	t := time.Duration(h.r.job.Spec.TimeoutSeconds) * time.Second
	if !h.res.StartedAt.IsZero() {
		t -= h.e.now().Sub(h.res.StartedAt)
	}
	return max(t, 0)
}

// supervise follows the running container to its end: it streams the
// output, enforces what is left of the run's timeout and the run's
// cancellation (SIGTERM, grace, SIGKILL), keeps everything the container
// wrote, inspects it for its exit code and OOM flag, and reports the end
// with its lifecycle events.
func (h *handle) supervise(ctx context.Context) (sandgate.Result, error) {
	pumped := make(chan struct{})
	if h.agent != nil {
		pumped = h.agent.pumped
	} else if h.hj.Reader != nil {
		go func() {
			defer close(pumped)
			if _, err := stdcopy.StdCopy(h.stdout, h.stderr, h.hj.Reader); err != nil && !errors.Is(err, io.EOF) {
				h.e.log.Debug("output stream ended", "run_id", h.r.job.RunID, "err", err)
			}
		}()
	} else {
		close(pumped)
	}
	exitC := make(chan exitStatus, 1)
	go func() { exitC <- h.waitExit() }()
	if h.agent != nil && h.r.job.SessionContainer {
		watched := make(chan struct{})
		defer close(watched)
		go h.watchAgent(watched)
	}

	timer := time.NewTimer(h.timeout())
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
	h.r.ending.Store(true)
	switch reason {
	case stoppedTimeout, stoppedCancel:
		exit = h.stop(exitC)
	case stoppedLost:
		exit = exitStatus{lost: true}
	}
	h.res.FinishedAt = h.e.now()
	// The counters are gone with the container's cgroup by now; the
	// sampler makes a last attempt and stops.
	h.usage.stop()

	// Everything the container wrote before it ended is kept. A lost
	// container will not close its stream, so what came is all there is.
	drain := time.After(drainTimeout)
	if exit.lost {
		drain = nil
		h.closeStream()
	}
	select {
	case <-pumped:
	case <-drain:
		h.closeStream()
		<-pumped
	}

	var state container.InspectResponse
	if !exit.lost {
		ictx, cancel := h.e.cleanupContext(ctx)
		err := h.e.call(ictx, h.r, "inspect", func(ctx context.Context) error {
			var err error
			state, err = h.e.docker.ContainerInspect(ctx, h.id)
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
	res := h.finish(reason, exit, state)
	if cause := context.Cause(h.r.ctx); errors.Is(cause, errAgentGone) && res.Error == nil {
		res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: cause.Error()}
	}
	return res, nil
}

// agentGoneGrace is how long a session's container has to exit by itself
// once its agent's stream ended cleanly (the agent exited or was killed:
// the container ends with it) before it is stopped.
const agentGoneGrace = 5 * time.Second

// watchAgent ends a session whose agent link ended while its container
// runs on: a stream that broke (a frame that did not authenticate: bytes
// the sandbox wrote into the container's stdio) leaves an agent no
// command can reach, and a session that cannot run commands is ended, not
// left open. An agent that exited is given agentGoneGrace for its
// container to end first, so that the session's end is the container's.
func (h *handle) watchAgent(done <-chan struct{}) {
	c := h.agent.conn
	select {
	case <-done:
		return
	case <-c.Done():
	}
	if errors.Is(c.Err(), agent.ErrGone) {
		select {
		case <-done:
			return
		case <-time.After(agentGoneGrace):
		}
	}
	h.e.log.Warn("a session's agent link ended; ending the session", "session_id", h.r.job.RunID, "err", c.Err())
	h.r.cancel(fmt.Errorf("%w: %v", errAgentGone, c.Err()))
}

func (h *handle) closeStream() {
	if h.hj.Conn != nil {
		h.hj.Close()
	}
}

// exitStatus is what waiting for the container's end found out.
type exitStatus struct {
	code int64
	// lost means the container vanished, or the daemon stopped answering
	// about it, before its end was seen.
	lost bool
	err  error
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

// waitExit waits for the container to exit. When the wait registered
// before start fails (the daemon restarted, the connection broke), it asks
// again with condition not-running, which answers at once for a container
// that has already exited.
func (h *handle) waitExit() exitStatus {
	select {
	case w := <-h.waitC:
		return exitStatus{code: w.StatusCode}
	case err := <-h.waitErr:
		if h.wctx.Err() != nil {
			return exitStatus{lost: true, err: err}
		}
		h.e.log.Warn("wait for container failed, waiting again", "run_id", h.r.job.RunID, "err", err)
	}
	var code int64
	err := h.e.callWith(h.wctx, h.r, "wait", 0, func(ctx context.Context) error {
		waitC, errC := h.e.docker.ContainerWait(ctx, h.id, container.WaitConditionNotRunning)
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

// exitC waits for the container's exit in the background.
func (h *handle) exitC() <-chan exitStatus {
	c := make(chan exitStatus, 1)
	go func() { c <- h.waitExit() }()
	return c
}

// stop ends a container that is still running: SIGTERM, then StopGrace for
// it to exit, then SIGKILL. It returns the container's exit.
func (h *handle) stop(exitC <-chan exitStatus) exitStatus {
	kill := func(signal string) {
		err := h.e.call(h.wctx, h.r, "kill "+signal, func(ctx context.Context) error {
			return h.e.docker.ContainerKill(ctx, h.id, signal)
		})
		// Conflict: it is not running any more, which is what we want.
		if err != nil && !cerrdefs.IsConflict(err) && !cerrdefs.IsNotFound(err) {
			h.e.log.Warn("signal container", "run_id", h.r.job.RunID, "signal", signal, "err", err)
		}
	}
	kill("SIGTERM")
	grace := time.NewTimer(h.e.cfg.StopGrace)
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
	case <-time.After(h.e.cfg.CallTimeout):
		return exitStatus{lost: true, err: fmt.Errorf("container %s did not exit after SIGKILL", h.id)}
	}
}

// finish decides the outcome of the container's end and reports it with
// the lifecycle events.
func (h *handle) finish(reason stopReason, exit exitStatus, state container.InspectResponse) sandgate.Result {
	e, r := h.e, h.r
	res := h.res
	res.Stdout, res.Stderr = h.stdout.output(), h.stderr.output()
	if exit.lost {
		res.Outcome = sandgate.OutcomeLost
		code := sandgate.CodeContainerCreate
		msg := "the container vanished while the run was executing"
		if exit.err != nil && unreachable(exit.err) {
			code, msg = sandgate.CodeDockerUnavailable, "the docker daemon stopped answering about the container"
		}
		res.Error = &sandgate.ErrorInfo{Code: code, Message: msg}
		res.Usage = h.usage.usage(res, h.memoryLimit())
		e.emit(r, sandgate.EventRunLost, outputPayload(res, map[string]any{"error_code": string(code)}))
		return res
	}
	code := exit.code
	if s := stateOf(state); s != nil {
		code = int64(s.ExitCode)
		res.OOMKilled = s.OOMKilled
	}
	if reason == notStopped && !res.OOMKilled {
		// The daemon may record an OOM kill after the exit; and a daemon
		// restart stops every container, an end that is not the program's.
		why, oom := e.stoppedOutside(r.ctx, h.id, res.StartedAt, code)
		if why != "" {
			return h.stoppedByDocker(res, code, why)
		}
		res.OOMKilled = oom
	}
	res.Usage = h.usage.usage(res, h.memoryLimit())
	c := int(code)
	res.ExitCode = &c
	res.Outcome = outcomeOf(reason, res.OOMKilled, c)
	e.emitExit(r, sandgate.EventContainerExited, res, outputPayload(res, map[string]any{
		"oom_killed":  res.OOMKilled,
		"duration_ms": res.FinishedAt.Sub(res.StartedAt).Milliseconds(),
		"usage":       res.Usage.Payload(),
	}))
	e.emitEnd(r, res)
	h.collect(&res)
	return res
}

// outcomeOf classifies the end of a command that exited with code: a
// stop sandgate made (cancel, timeout, loss) says it first, then an OOM
// kill, then the code. Containers and session commands end the same way.
func outcomeOf(reason stopReason, oom bool, code int) sandgate.Outcome {
	switch {
	case reason == stoppedCancel:
		return sandgate.OutcomeCancelled
	case reason == stoppedTimeout:
		return sandgate.OutcomeTimedOut
	case reason == stoppedLost:
		return sandgate.OutcomeLost
	case oom:
		return sandgate.OutcomeOOMKilled
	case code == 0:
		return sandgate.OutcomeSucceeded
	}
	return sandgate.OutcomeFailed
}

// emitEnd records what ended a run that exited, besides its exit: the OOM
// kill, the timeout or the cancellation (by a caller, or by shutdown).
func (e *Executor) emitEnd(r *run, res sandgate.Result) {
	switch res.Outcome {
	case sandgate.OutcomeOOMKilled:
		e.emitExit(r, sandgate.EventContainerOOMKilled, res, map[string]any{"memory_mb": r.job.Spec.Resources.MemoryMB})
	case sandgate.OutcomeTimedOut:
		e.emitExit(r, sandgate.EventRunTimedOut, res, map[string]any{"timeout_seconds": r.job.Spec.TimeoutSeconds})
	case sandgate.OutcomeCancelled:
		why := "cancelled"
		if errors.Is(context.Cause(r.ctx), errShutdown) {
			why = "shutdown"
		}
		e.emitExit(r, sandgate.EventRunCancelled, res, map[string]any{"reason": why})
	}
}

// collect gathers the run's artifacts from its workspace, once its
// command has ended, whatever the outcome.
func (h *handle) collect(res *sandgate.Result) {
	if h.ws != nil {
		res.Artifacts = h.e.collectArtifacts(h.r.ctx, h.r, h.ws)
	}
}

// stoppedByDocker ends a run whose container was stopped through the
// daemon by someone else: the outcome is error with the reason, and the
// exit code the daemon saw is kept.
func (h *handle) stoppedByDocker(res sandgate.Result, code int64, why string) sandgate.Result {
	e, r := h.e, h.r
	c := int(code)
	res.ExitCode = &c
	res.Outcome = sandgate.OutcomeError
	res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: why}
	res.Usage = h.usage.usage(res, h.memoryLimit())
	e.log.Warn("container stopped through the daemon", "run_id", r.job.RunID, "reason", why)
	e.emitExit(r, sandgate.EventContainerExited, res, outputPayload(res, map[string]any{
		"oom_killed":  false,
		"duration_ms": res.FinishedAt.Sub(res.StartedAt).Milliseconds(),
		"usage":       res.Usage.Payload(),
	}))
	e.emitExit(r, sandgate.EventRunFailed, res, map[string]any{"error_code": string(res.Error.Code), "message": why})
	h.collect(&res)
	return res
}

// memoryLimit is the container's memory limit in bytes, as
// containerSettings sets it.
func (h *handle) memoryLimit() int64 { return h.r.job.Spec.Resources.MemoryMB << 20 }

// outputPayload adds the sizes and digests of the output, never the data.
func outputPayload(res sandgate.Result, p map[string]any) map[string]any {
	for name, o := range map[string]sandgate.Output{"stdout": res.Stdout, "stderr": res.Stderr} {
		p[name+"_bytes"] = o.Bytes
		p[name+"_sha256"] = o.SHA256
		p[name+"_truncated"] = o.Truncated
	}
	return p
}

// failed reports that the run could not be run in its container; what
// the handle knows of the container stays in the result.
func (h *handle) failed(err error) sandgate.Result { return h.e.failed(h.r, err, h.res) }

// cancelled reports that the run was cancelled before its command ran.
func (h *handle) cancelled() sandgate.Result { return h.e.cancelledBeforeStart(h.r, h.res) }

// close ends the handle: the stream and the wait are released, the
// container is removed (a warm member's pool ownership ends with it), and
// then the run's workspace. A container that cannot be removed now is
// left to the reaper.
func (h *handle) close() {
	h.usage.stop()
	h.closeStream()
	h.wcancel()
	h.e.remove(h.r, h.id)
	if h.member != nil {
		h.e.pool.release(h.member)
	}
	if h.ws != nil {
		h.ws.remove(h.e)
	}
}
