package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/agent"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// A command in a session is a run whose process is started in the
// session's container: by the session's agent (agent.go), or with docker
// exec when there is none (adopted after a restart, or turned off). The
// session's container is a run like any other, owned by its handle from
// create to removal; a command has a handle of its own that borrows the
// session's container, follows its process (agentProc or execProc) to its
// end, and never removes anything.
//
// Docker has no call that signals an exec'd process. The process's host
// PID (ContainerExecInspect's Pid, in the daemon's PID namespace) is
// signalled from here, with every process descended from it: this needs
// the daemon on this host, as the usage sampler's cgroup reading does. On
// a remote daemon a command that must be stopped (cancel, timeout) ends
// its whole session.

// execPoll is how often a running command is asked whether it has
// exited while its output stream stays open (a background child holds
// it), and how long the stream is then given to close.
const execPoll = 500 * time.Millisecond

// errExecStop ends a session whose command could not be stopped alone.
var errExecStop = errors.New("a command in the session could not be stopped alone")

// execAPI is the Docker calls of a command in a session without an
// agent: the exec, and the session container's state.
type execAPI interface {
	ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
}

// Exec runs job's command in the open session sessionID (see
// sandgate.SessionExecutor). The command's run is live from here to its
// end: Cancel(job.RunID) stops it, Shutdown too. Its handle borrows the
// session's container and decides its outcome as any run's.
func (e *Executor) Exec(ctx context.Context, sessionID string, job sandgate.Job) (sandgate.Result, error) {
	job.SessionID = sessionID
	h := e.newHandle(ctx, job)
	s := e.runs.get(sessionID)
	cid := ""
	var state sandgate.State
	if s != nil && s.job.SessionContainer {
		cid, state, _ = s.snapshot()
	}
	if cid == "" || state != sandgate.StateRunning {
		h.cancel(nil)
		return h.end(ending{err: sandgate.Errorf(sandgate.CodeConflict, "session %s is not open on node %s", sessionID, e.cfg.Node), quiet: true})
	}
	if err := e.runs.add(h); err != nil {
		return h.end(ending{err: err, quiet: true})
	}
	defer e.runs.remove(h)
	h.host = s
	h.setContainer(cid, e.now())
	if l, _ := s.link(); l != nil {
		return h.end(h.runAgentCommand(l))
	}
	return h.end(h.runExec())
}

// runAgentCommand runs the command through the session's agent: no daemon
// call on its path. Its end is the agent's exit frame; a command whose
// agent ended first (killed, its stream broken) is lost, and the session
// ends with its container.
func (h *handle) runAgentCommand(l *agentLink) ending {
	spec := h.job.Spec
	cid := h.res.ContainerID
	ooms := h.e.meter.oomKills(cid)
	p, err := l.conn.Start(agentCommand(spec, nil), h.stdout, h.stderr, []byte(spec.Stdin))
	if maybeRan, err := awaitStart(p, err); err != nil {
		// Refused by the agent (no such program, say): the session goes
		// on. Its agent ended: the session is ended (fail closed), and a
		// command sent before that is lost, never one that did not run.
		if maybeRan || errors.Is(err, agent.ErrGone) {
			h.host.cancel(fmt.Errorf("%w: %v", errAgentGone, err))
		}
		if maybeRan {
			return unconfirmed(err)
		}
		return failed(sandgate.WrapError(sandgate.CodeContainerCreate, err, "start the command in session %s", h.job.SessionID))
	}
	h.started(h.now(), map[string]any{"agent": true, "pid": p.PID()}, true)
	return h.follow(&agentProc{h: h, p: p, cid: cid, ooms: ooms, usage: commandUsage,
		gone: func(_ stopReason, err error) ending {
			msg := "the session's agent ended while the command ran: " + err.Error()
			// Fail closed: a session whose agent is gone is ended.
			h.host.cancel(fmt.Errorf("%w: %v", errAgentGone, err))
			return lostEnding(msg, map[string]any{"agent": true, "error": msg})
		},
	})
}

// runExec runs the command with docker exec in the session's container.
func (h *handle) runExec() ending {
	ctx, spec := h.ctx, h.job.Spec
	x := &execProc{h: h, docker: h.e.docker, cid: h.res.ContainerID}
	env := make([]string, 0, len(spec.Env))
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	opts := container.ExecOptions{
		User: spec.User, Cmd: spec.Command, Env: env, WorkingDir: spec.Workdir,
		AttachStdout: true, AttachStderr: true, AttachStdin: spec.Stdin != "",
	}
	// Creating an exec starts nothing, so it may be retried; starting it
	// may not.
	err := h.calls.do(ctx, h.trail, "exec create", func(ctx context.Context) error {
		resp, err := x.docker.ContainerExecCreate(ctx, x.cid, opts)
		x.execID = resp.ID
		return err
	})
	if err != nil {
		return h.failedOr(daemon.Error(sandgate.CodeContainerCreate, err, "create the command in session %s", h.job.SessionID))
	}
	x.ooms = h.e.meter.oomKills(x.cid)
	// A second start of an exec the daemon did start is refused with a
	// conflict: a retry never runs the command twice.
	err = h.calls.do(ctx, h.trail, "exec start", func(ctx context.Context) error {
		var err error
		x.hj, err = x.docker.ContainerExecAttach(ctx, x.execID, container.ExecAttachOptions{})
		return err
	})
	if err != nil {
		return failed(daemon.Error(sandgate.CodeContainerCreate, err, "start the command in session %s", h.job.SessionID))
	}
	h.started(h.now(), map[string]any{"exec_id": x.execID}, true)
	if spec.Stdin != "" {
		go func() {
			_, _ = io.WriteString(x.hj.Conn, spec.Stdin)
			_ = x.hj.CloseWrite()
		}()
	}
	return h.follow(x)
}

// execProc is a command docker exec started in a session's container.
type execProc struct {
	h      *handle
	docker execAPI
	cid    string
	execID string
	pid    atomic.Int64
	hj     types.HijackedResponse
	ooms   int64

	pumped chan struct{}
	exited chan struct{}
	quit   chan struct{}
	// polled says the exec was seen to have exited while its output
	// stream stayed open (a background child holds it).
	polled atomic.Bool
}

func (x *execProc) wait() <-chan struct{} {
	h := x.h
	x.pumped, x.exited, x.quit = make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(x.pumped)
		if _, err := stdcopy.StdCopy(h.stdout, h.stderr, x.hj.Reader); err != nil && !errors.Is(err, io.EOF) {
			h.log.Debug("command output ended", "run_id", h.job.RunID, "err", err)
		}
	}()
	go func() {
		poll := time.NewTicker(execPoll)
		defer poll.Stop()
		for {
			select {
			case <-x.pumped:
				close(x.exited)
				return
			case <-x.quit:
				return
			case <-poll.C:
				// The process may have exited with a background child
				// still holding its output: its end is the command's end.
				if in, err := x.inspect(h.ctx); err == nil && !in.Running {
					x.polled.Store(true)
					close(x.exited)
					return
				}
			}
		}
	}()
	return x.exited
}

// end asks the daemon how the command ended.
func (x *execProc) end(reason stopReason) ending {
	h := x.h
	close(x.quit)
	defer x.hj.Close()
	if x.polled.Load() || reason != notStopped {
		select {
		case <-x.pumped:
		case <-time.After(execPoll):
			x.hj.Close()
			<-x.pumped
		}
	}
	h.res.FinishedAt = h.now()
	ictx, cancel := h.calls.cleanup(h.ctx)
	defer cancel()
	// The stream closes when the process's output does; the exit is
	// recorded a moment later.
	var in container.ExecInspect
	var err error
	for i := 0; ; i++ {
		in, err = x.inspect(ictx)
		if err != nil || !in.Running || i >= 200 {
			break
		}
		time.Sleep(min(time.Duration(i+1)*time.Millisecond, 50*time.Millisecond))
	}
	payload := map[string]any{"exec_id": x.execID}
	if err != nil || in.Running {
		msg := "the session's container ended while the command ran"
		if err == nil {
			msg = "the command's process did not exit"
		}
		return lostEnding(msg, payload)
	}
	code := in.ExitCode
	if reason == notStopped && code != 0 && x.sessionEnding(ictx) {
		// Stopped with its session's container, not by its own doing.
		lost := lostEnding("the session ended while the command ran", payload)
		lost.code = &code
		return lost
	}
	oom := h.e.meter.oomKills(x.cid) > x.ooms && code != 0
	return exitedWith(reason, code, oom, payload)
}

// sessionEnding reports whether the session's container is being
// stopped or no longer runs.
func (x *execProc) sessionEnding(ctx context.Context) bool {
	s := x.h.host
	if s.ending.Load() || s.ctx.Err() != nil {
		return true
	}
	c, err := x.docker.ContainerInspect(ctx, x.cid)
	return err != nil || c.State == nil || !c.State.Running
}

func (x *execProc) inspect(ctx context.Context) (container.ExecInspect, error) {
	var in container.ExecInspect
	err := x.h.calls.do(ctx, x.h.trail, "exec inspect", func(ctx context.Context) error {
		var err error
		in, err = x.docker.ContainerExecInspect(ctx, x.execID)
		return err
	})
	if err == nil && in.Pid > 0 {
		x.pid.Store(int64(in.Pid))
	}
	return in, err
}

// stop ends the command: SIGTERM to its process and every process under
// it, StopGrace, then SIGKILL. Without the process's host PID (a remote
// daemon) the session itself is ended.
func (x *execProc) stop() {
	h := x.h
	ictx, cancel := h.calls.cleanup(h.ctx)
	defer cancel()
	// The daemon knows the PID a moment after the exec starts.
	for i := 0; x.pid.Load() == 0 && i < 50; i++ {
		if in, err := x.inspect(ictx); err != nil || (!in.Running && in.Pid == 0 && i > 10) {
			break
		}
		if x.pid.Load() == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	pid := int(x.pid.Load())
	if !inContainer(h.e.cfg.DockerHost, pid, x.cid) {
		h.log.Warn("a command in a session cannot be signalled from here; ending the session",
			"run_id", h.job.RunID, "session_id", h.job.SessionID, "pid", pid)
		h.host.cancel(errExecStop)
		<-x.pumped
		return
	}
	signalTree(hostProc, pid, syscall.SIGTERM)
	grace := time.NewTimer(h.e.cfg.StopGrace)
	defer grace.Stop()
	select {
	case <-x.pumped:
		return
	case <-grace.C:
	}
	// Processes may fork while they are signalled: a few passes catch
	// what the first missed.
	for range 3 {
		signalTree(hostProc, pid, syscall.SIGKILL)
		select {
		case <-x.pumped:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// hostProc is the daemon host's /proc, when the daemon is local.
const hostProc = "/proc"

// inContainer reports whether pid, a PID the daemon at host gave, is a
// process of container id as this process sees it: the daemon is local
// and shares this PID namespace, and the PID was not reused by another.
func inContainer(host string, pid int, id string) bool {
	if pid <= 0 || !daemon.Local(host) {
		return false
	}
	b, err := os.ReadFile(filepath.Join(hostProc, strconv.Itoa(pid), "cgroup"))
	return err == nil && strings.Contains(string(b), id)
}

// signalTree sends sig to pid and every process descended from it, read
// from proc (/proc of the daemon's host).
func signalTree(proc string, pid int, sig syscall.Signal) {
	for _, p := range descendants(proc, pid) {
		_ = syscall.Kill(p, sig)
	}
}

// descendants is pid and every process under it, parents first.
func descendants(proc string, pid int) []int {
	children := map[int][]int{}
	if ents, err := os.ReadDir(proc); err == nil {
		for _, ent := range ents {
			p, err := strconv.Atoi(ent.Name())
			if err != nil {
				continue
			}
			if pp := parentOf(proc, p); pp > 0 {
				children[pp] = append(children[pp], p)
			}
		}
	}
	tree := []int{pid}
	for i := 0; i < len(tree) && len(tree) < 1<<16; i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

// parentOf reads a process's parent PID from its stat file: the field
// after the command name, which is in parentheses and may hold anything.
func parentOf(proc string, pid int) int {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}
