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
	"github.com/sandgate/sandgate/agent"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// drainTimeout bounds how long output may keep arriving after the
// container has exited; the daemon closes the attach stream at exit, so
// this only matters when it does not.
const drainTimeout = 10 * time.Second

// proc is the process a run is, as its handle follows it: the container's
// main process (mainProc), a command its agent started (agentProc), or a
// docker exec in a session's container (execProc).
type proc interface {
	// wait starts following the process; the channel it returns is
	// closed once the process has ended, or its end can no longer be
	// seen.
	wait() <-chan struct{}
	// stop ends a process that still runs: SIGTERM, StopGrace, SIGKILL.
	stop()
	// end says how the process ended, after wait's channel closed or
	// stop returned; reason says whether, and why, sandgate stopped it.
	end(reason stopReason) ending
}

// follow follows a started process to its end: the run's timeout (what
// is left of it) and its cancellation stop it; its output is kept to the
// end.
func (h *handle) follow(p proc) ending {
	exited := p.wait()
	timer := time.NewTimer(h.timeout())
	defer timer.Stop()
	reason := notStopped
	select {
	case <-exited:
	case <-timer.C:
		reason = stoppedTimeout
	case <-h.ctx.Done():
		reason = reasonOf(h.ctx)
	}
	h.ending.Store(true)
	if reason == stoppedTimeout || reason == stoppedCancel {
		p.stop()
	}
	return p.end(reason)
}

// exitStatus is what waiting for the container's end found out.
type exitStatus struct {
	code int64
	// lost means the container vanished, or the daemon stopped answering
	// about it, before its end was seen.
	lost bool
	err  error
}

// mainProc is the main process of a container its handle owns: the
// attach stream with its output, and the wait for the container's exit.
type mainProc struct {
	h  *handle
	hj types.HijackedResponse
	// wctx outlives the run's cancellation: a stopped run still reports
	// its exit, and the calls that remove it still happen.
	wctx    context.Context
	wcancel context.CancelFunc
	waitC   <-chan container.WaitResponse
	waitErr <-chan error
	// pumped is closed when the output stream has been read to its end.
	pumped chan struct{}

	pumping  sync.Once
	watching sync.Once
	exited   chan struct{}
	exit     exitStatus // set before exited closes
	stopErr  error      // set when stop gave up
}

// newMainProc makes the main process of h's container.
func newMainProc(h *handle) *mainProc {
	wctx, wcancel := context.WithCancel(context.WithoutCancel(h.ctx))
	return &mainProc{h: h, wctx: wctx, wcancel: wcancel, exited: make(chan struct{})}
}

// attach attaches to the container's output (and its stdin when asked)
// and registers the wait for its exit under cond. A container about to
// start is attached to and waited on first, as the Docker CLI does, so
// that no output and no exit is missed.
func (p *mainProc) attach(ctx context.Context, stdin bool, cond container.WaitCondition) error {
	h := p.h
	err := h.calls.do(ctx, h.trail, "attach", func(ctx context.Context) error {
		var err error
		p.hj, err = h.docker.ContainerAttach(ctx, h.res.ContainerID, container.AttachOptions{
			Stream: true, Stdin: stdin, Stdout: true, Stderr: true,
		})
		return err
	})
	p.waitC, p.waitErr = h.docker.ContainerWait(p.wctx, h.res.ContainerID, cond)
	if err != nil {
		return daemon.Error(sandgate.CodeContainerCreate, err, "attach to container %s", h.res.ContainerID)
	}
	return nil
}

// writeStdin hands data to the container and closes its stdin, in the
// background. A container that exits without reading its input closes
// the stream under us; that is its business, not an error.
func (p *mainProc) writeStdin(data string) {
	go func() {
		if _, err := io.WriteString(p.hj.Conn, data); err != nil {
			p.h.log.Debug("write stdin", "run_id", p.h.job.RunID, "err", err)
		}
		_ = p.hj.CloseWrite()
	}()
}

func (p *mainProc) wait() <-chan struct{} {
	h := p.h
	p.pump()
	p.watchExit()
	if l, _ := h.link(); l != nil && h.job.SessionContainer {
		go p.watchAgent(l)
	}
	return p.exited
}

// pump starts reading the container's output stream to its end, once:
// the agent's link reads it when there is one. end calls it too, so that
// a process ended without having been waited on (a warm member whose
// agent went away) still has a stream to drain, never a nil channel to
// wait on for ever.
func (p *mainProc) pump() {
	h := p.h
	p.pumping.Do(func() {
		p.pumped = make(chan struct{})
		if l, _ := h.link(); l != nil {
			// The agent reads the stream.
			go func() { <-l.pumped; close(p.pumped) }()
		} else if p.hj.Reader != nil {
			go func() {
				defer close(p.pumped)
				if _, err := stdcopy.StdCopy(h.stdout, h.stderr, p.hj.Reader); err != nil && !errors.Is(err, io.EOF) {
					h.log.Debug("output stream ended", "run_id", h.job.RunID, "err", err)
				}
			}()
		} else {
			close(p.pumped)
		}
	})
}

// watchExit waits for the container's exit in the background, once.
func (p *mainProc) watchExit() {
	p.watching.Do(func() {
		go func() {
			p.exit = p.waitExit()
			close(p.exited)
		}()
	})
}

// waitExit waits for the container to exit. When the wait registered
// before start fails (the daemon restarted, the connection broke), it asks
// again with condition not-running, which answers at once for a container
// that has already exited.
func (p *mainProc) waitExit() exitStatus {
	h := p.h
	select {
	case w := <-p.waitC:
		return exitStatus{code: w.StatusCode}
	case err := <-p.waitErr:
		if p.wctx.Err() != nil {
			return exitStatus{lost: true, err: err}
		}
		h.log.Warn("wait for container failed, waiting again", "run_id", h.job.RunID, "err", err)
	}
	var code int64
	err := h.calls.with(p.wctx, h.trail, "wait", 0, func(ctx context.Context) error {
		waitC, errC := h.docker.ContainerWait(ctx, h.res.ContainerID, container.WaitConditionNotRunning)
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
// it to exit, then SIGKILL.
func (p *mainProc) stop() {
	h := p.h
	kill := func(signal string) {
		err := h.calls.do(p.wctx, h.trail, "kill "+signal, func(ctx context.Context) error {
			return h.docker.ContainerKill(ctx, h.res.ContainerID, signal)
		})
		// Conflict: it is not running any more, which is what we want.
		if err != nil && !cerrdefs.IsConflict(err) && !cerrdefs.IsNotFound(err) {
			h.log.Warn("signal container", "run_id", h.job.RunID, "signal", signal, "err", err)
		}
	}
	p.watchExit()
	kill("SIGTERM")
	grace := time.NewTimer(h.e.cfg.StopGrace)
	defer grace.Stop()
	select {
	case <-p.exited:
		return
	case <-grace.C:
	}
	kill("SIGKILL")
	select {
	case <-p.exited:
	case <-time.After(h.e.cfg.CallTimeout):
		p.stopErr = fmt.Errorf("container %s did not exit after SIGKILL", h.res.ContainerID)
	}
}

// end waits for the rest of the output, inspects the container for its
// exit code and OOM flag, and judges its end.
func (p *mainProc) end(reason stopReason) ending {
	h := p.h
	p.pump()
	var exit exitStatus
	select {
	case <-p.exited:
		exit = p.exit
	default:
		exit = exitStatus{lost: true, err: p.stopErr}
	}
	if reason == stoppedLost {
		exit = exitStatus{lost: true}
	}
	h.res.FinishedAt = h.now()
	// The counters are gone with the container's cgroup by now; the
	// sampler makes a last attempt and stops.
	h.usage.stop()

	// Everything the container wrote before it ended is kept. A lost
	// container will not close its stream, so what came is all there is.
	drain := time.After(drainTimeout)
	if exit.lost {
		drain = nil
		p.closeStream()
	}
	select {
	case <-p.pumped:
	case <-drain:
		p.closeStream()
		<-p.pumped
	}

	var state container.InspectResponse
	if !exit.lost {
		ictx, cancel := h.calls.cleanup(h.ctx)
		err := h.calls.do(ictx, h.trail, "inspect", func(ctx context.Context) error {
			var err error
			state, err = h.docker.ContainerInspect(ctx, h.res.ContainerID)
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
	return p.judge(reason, exit, state)
}

// judge says how the container ended: lost, stopped by someone else
// through the daemon, or exited with its code (killed for memory, when
// the kernel did).
func (p *mainProc) judge(reason stopReason, exit exitStatus, state container.InspectResponse) ending {
	h := p.h
	if exit.lost {
		x := lostEnding("the container vanished while the run was executing", nil)
		if exit.err != nil && daemon.Unreachable(exit.err) {
			x.lost, x.lostCode = "the docker daemon stopped answering about the container", sandgate.CodeDockerUnavailable
		}
		x.usage = h.sampled
		return x
	}
	code, oom := exit.code, false
	if s := stateOf(state); s != nil {
		code, oom = int64(s.ExitCode), s.OOMKilled
	}
	if reason == notStopped && !oom {
		// The daemon may record an OOM kill after the exit; and a daemon
		// restart stops every container, an end that is not the program's.
		why, killed := p.stoppedOutside(h.res.StartedAt, code)
		if why != "" {
			c := int(code)
			return ending{outside: why, code: &c, usage: h.sampled}
		}
		oom = killed
	}
	x := exitedWith(reason, int(code), oom, nil)
	x.usage = h.sampled
	return x
}

func (p *mainProc) closeStream() {
	if p.hj.Conn != nil {
		p.hj.Close()
	}
}

// release closes the stream and ends the wait.
func (p *mainProc) release() {
	p.closeStream()
	p.wcancel()
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
func (p *mainProc) watchAgent(l *agentLink) {
	h, c := p.h, l.conn
	select {
	case <-p.exited:
		return
	case <-c.Done():
	}
	if errors.Is(c.Err(), agent.ErrGone) {
		select {
		case <-p.exited:
			return
		case <-time.After(agentGoneGrace):
		}
	}
	h.log.Warn("a session's agent link ended; ending the session", "session_id", h.job.RunID, "err", c.Err())
	h.cancel(fmt.Errorf("%w: %v", errAgentGone, c.Err()))
}
