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
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/agent"
)

// A command in a session is a run whose process is started in the
// session's container with docker exec. The session's container is a
// run like any other, followed by its handle (handle.go) from create to
// removal; a command is followed by an execution, from exec create to
// the exec's end, and never removes anything.
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

// execution is one command in a session.
type execution struct {
	e       *Executor
	r       *run
	session *run
	cid     string
	execID  string
	pid     int
	res     sandgate.Result
}

// Exec runs job's command in the open session sessionID (see
// sandgate.SessionExecutor). The command's run is live from here to its
// end: Cancel(job.RunID) stops it, Shutdown too.
func (e *Executor) Exec(ctx context.Context, sessionID string, job sandgate.Job) (sandgate.Result, error) {
	e.mu.Lock()
	s := e.runs[sessionID]
	e.mu.Unlock()
	cid := ""
	var state sandgate.State
	if s != nil && s.job.SessionContainer {
		cid, state, _ = s.snapshot()
	}
	if cid == "" || state != sandgate.StateRunning {
		err := sandgate.Errorf(sandgate.CodeConflict, "session %s is not open on node %s", sessionID, e.cfg.Node)
		return e.failed(nil, err), err
	}
	job.SessionID = sessionID
	r, err := e.register(ctx, job)
	if err != nil {
		return e.failed(nil, err), err
	}
	defer e.unregister(r)
	x := &execution{e: e, r: r, session: s, cid: cid}
	if l := s.agentLink(); l != nil {
		return x.runAgent(l)
	}
	return x.run()
}

// runAgent runs the command through the session's agent: no daemon call
// on its path. Its end is the agent's exit frame; a command whose agent
// ended first (killed, its stream broken) is lost, and the session ends
// with its container.
func (x *execution) runAgent(l *agentLink) (sandgate.Result, error) {
	e, r := x.e, x.r
	ctx := r.ctx
	spec := r.job.Spec
	r.setContainer(x.cid, e.now())
	x.res = sandgate.Result{ContainerID: x.cid, CreatedAt: e.now()}
	ooms := x.oomKills()
	stdout, stderr := captures(r.job)
	p, err := l.conn.Start(agentCommand(spec, nil), stdout, stderr, []byte(spec.Stdin))
	if maybeRan, err := awaitStart(p, err); err != nil {
		// Refused by the agent (no such program, say): the session goes
		// on. Its agent ended: the session is ended (fail closed), and a
		// command sent before that is lost, never one that did not run.
		if maybeRan || errors.Is(err, agent.ErrGone) {
			x.session.cancel(fmt.Errorf("%w: %v", errAgentGone, err))
		}
		if maybeRan {
			res := x.res
			res.Stdout, res.Stderr = stdout.output(), stderr.output()
			return e.unconfirmedLoss(r, res, err), nil
		}
		err = sandgate.WrapError(sandgate.CodeContainerCreate, err, "start the command in session %s", r.job.SessionID)
		return e.failed(r, err, x.res), err
	}
	x.pid = p.PID()
	x.res.StartedAt = e.now()
	r.setState(sandgate.StateRunning)
	e.emit(r, sandgate.EventContainerStarted, map[string]any{"agent": true, "pid": x.pid})
	if r.job.Started != nil {
		r.job.Started(x.cid, x.res.StartedAt)
	}
	end := e.superviseAgent(ctx, r, p, time.Duration(spec.TimeoutSeconds)*time.Second)
	x.res.FinishedAt = e.now()
	x.res.Stdout, x.res.Stderr = stdout.output(), stderr.output()
	res := x.res
	if end.err != nil {
		res.Outcome = sandgate.OutcomeLost
		res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: "the session's agent ended while the command ran: " + end.err.Error()}
		e.emit(r, sandgate.EventRunLost, outputPayload(res, map[string]any{"agent": true, "error_code": string(res.Error.Code), "error": res.Error.Message}))
		// Fail closed: a session whose agent is gone is ended.
		x.session.cancel(fmt.Errorf("%w: %v", errAgentGone, end.err))
		return res, nil
	}
	return e.agentExited(r, res, end, x.oomKills() > ooms, func(res sandgate.Result) *sandgate.Usage {
		return commandUsage(end.exit, res)
	}), nil
}

// errAgentGone ends a session whose agent stopped answering.
var errAgentGone = errors.New("the session's agent ended")

func (x *execution) run() (sandgate.Result, error) {
	e, r := x.e, x.r
	ctx := r.ctx
	spec := r.job.Spec
	r.setContainer(x.cid, e.now())
	x.res = sandgate.Result{ContainerID: x.cid, CreatedAt: e.now()}
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
	err := e.call(ctx, r, "exec create", func(ctx context.Context) error {
		resp, err := e.docker.ContainerExecCreate(ctx, x.cid, opts)
		x.execID = resp.ID
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return e.cancelledBeforeStart(r, x.res), nil
		}
		err = dockerError(sandgate.CodeContainerCreate, err, "create the command in session %s", r.job.SessionID)
		return e.failed(r, err, x.res), err
	}
	ooms := x.oomKills()
	// A second start of an exec the daemon did start is refused with a
	// conflict: a retry never runs the command twice.
	var hj types.HijackedResponse
	err = e.call(ctx, r, "exec start", func(ctx context.Context) error {
		var err error
		hj, err = e.docker.ContainerExecAttach(ctx, x.execID, container.ExecAttachOptions{})
		return err
	})
	if err != nil {
		err = dockerError(sandgate.CodeContainerCreate, err, "start the command in session %s", r.job.SessionID)
		return e.failed(r, err, x.res), err
	}
	defer hj.Close()
	x.res.StartedAt = e.now()
	r.setState(sandgate.StateRunning)
	e.emit(r, sandgate.EventContainerStarted, map[string]any{"exec_id": x.execID})
	if r.job.Started != nil {
		r.job.Started(x.cid, x.res.StartedAt)
	}
	if spec.Stdin != "" {
		go func() {
			_, _ = io.WriteString(hj.Conn, spec.Stdin)
			_ = hj.CloseWrite()
		}()
	}
	stdout, stderr := captures(r.job)
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		if _, err := stdcopy.StdCopy(stdout, stderr, hj.Reader); err != nil && !errors.Is(err, io.EOF) {
			e.log.Debug("command output ended", "run_id", r.job.RunID, "err", err)
		}
	}()

	timer := time.NewTimer(time.Duration(spec.TimeoutSeconds) * time.Second)
	defer timer.Stop()
	poll := time.NewTicker(execPoll)
	defer poll.Stop()
	reason := notStopped
	exited := false
wait:
	for {
		select {
		case <-pumped:
			break wait
		case <-poll.C:
			// The process may have exited with a background child still
			// holding its output: its end is the command's end.
			if in, err := x.inspect(ctx); err == nil && !in.Running {
				exited = true
				break wait
			}
		case <-timer.C:
			reason = stoppedTimeout
			break wait
		case <-ctx.Done():
			reason = reasonOf(ctx)
			break wait
		}
	}
	if reason == stoppedTimeout || reason == stoppedCancel {
		x.stop(pumped)
	}
	if exited || reason != notStopped {
		select {
		case <-pumped:
		case <-time.After(execPoll):
			hj.Close()
			<-pumped
		}
	}
	x.res.FinishedAt = e.now()
	x.res.Stdout, x.res.Stderr = stdout.output(), stderr.output()
	return x.finish(reason, ooms)
}

// finish asks the daemon how the command ended and reports it.
func (x *execution) finish(reason stopReason, oomsBefore int64) (sandgate.Result, error) {
	e, r, res := x.e, x.r, x.res
	var in container.ExecInspect
	var err error
	ictx, cancel := e.cleanupContext(r.ctx)
	defer cancel()
	// The stream closes when the process's output does; the exit is
	// recorded a moment later.
	for i := 0; ; i++ {
		in, err = x.inspect(ictx)
		if err != nil || !in.Running || i >= 200 {
			break
		}
		time.Sleep(min(time.Duration(i+1)*time.Millisecond, 50*time.Millisecond))
	}
	if err != nil || in.Running {
		res.Outcome = sandgate.OutcomeLost
		msg := "the session's container ended while the command ran"
		if err == nil {
			msg = "the command's process did not exit"
		}
		res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: msg}
		e.emit(r, sandgate.EventRunLost, outputPayload(res, map[string]any{"exec_id": x.execID, "error_code": string(res.Error.Code)}))
		return res, nil
	}
	code := in.ExitCode
	if reason == notStopped && code != 0 && x.sessionEnding(ictx) {
		// Stopped with its session's container, not by its own doing.
		res.Outcome = sandgate.OutcomeLost
		res.ExitCode = &code
		res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: "the session ended while the command ran"}
		e.emitExit(r, sandgate.EventRunLost, res, outputPayload(res, map[string]any{"exec_id": x.execID, "error_code": string(res.Error.Code)}))
		return res, nil
	}
	res.ExitCode = &code
	res.OOMKilled = x.oomKills() > oomsBefore && code != 0
	res.Outcome = outcomeOf(reason, res.OOMKilled, code)
	e.emitExit(r, sandgate.EventContainerExited, res, outputPayload(res, map[string]any{
		"exec_id":     x.execID,
		"oom_killed":  res.OOMKilled,
		"duration_ms": res.FinishedAt.Sub(res.StartedAt).Milliseconds(),
	}))
	e.emitEnd(r, res)
	return res, nil
}

// sessionEnding reports whether the session's container is being
// stopped or no longer runs.
func (x *execution) sessionEnding(ctx context.Context) bool {
	if x.session.ending.Load() || x.session.ctx.Err() != nil {
		return true
	}
	c, err := x.e.docker.ContainerInspect(ctx, x.cid)
	return err != nil || c.State == nil || !c.State.Running
}

func (x *execution) inspect(ctx context.Context) (container.ExecInspect, error) {
	var in container.ExecInspect
	err := x.e.call(ctx, x.r, "exec inspect", func(ctx context.Context) error {
		var err error
		in, err = x.e.docker.ContainerExecInspect(ctx, x.execID)
		return err
	})
	if err == nil && in.Pid > 0 {
		x.pid = in.Pid
	}
	return in, err
}

// stop ends the command: SIGTERM to its process and every process under
// it, StopGrace, then SIGKILL. Without the process's host PID (a remote
// daemon) the session itself is ended.
func (x *execution) stop(pumped <-chan struct{}) {
	e := x.e
	ictx, cancel := e.cleanupContext(x.r.ctx)
	defer cancel()
	// The daemon knows the PID a moment after the exec starts.
	for i := 0; x.pid == 0 && i < 50; i++ {
		if in, err := x.inspect(ictx); err != nil || (!in.Running && in.Pid == 0 && i > 10) {
			break
		}
		if x.pid == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !e.inContainer(x.pid, x.cid) {
		e.log.Warn("a command in a session cannot be signalled from here; ending the session",
			"run_id", x.r.job.RunID, "session_id", x.r.job.SessionID, "pid", x.pid)
		x.session.cancel(errExecStop)
		<-pumped
		return
	}
	proc := hostProc
	signalTree(proc, x.pid, syscall.SIGTERM)
	grace := time.NewTimer(e.cfg.StopGrace)
	defer grace.Stop()
	select {
	case <-pumped:
		return
	case <-grace.C:
	}
	// Processes may fork while they are signalled: a few passes catch
	// what the first missed.
	for range 3 {
		signalTree(proc, x.pid, syscall.SIGKILL)
		select {
		case <-pumped:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// hostProc is the daemon host's /proc, when the daemon is local.
const hostProc = "/proc"

// inContainer reports whether pid, a PID the daemon gave, is a process
// of container id as this process sees it: the daemon is local and
// shares this PID namespace, and the PID was not reused by another.
func (e *Executor) inContainer(pid int, id string) bool {
	if pid <= 0 || !localDaemon(e.cfg.DockerHost) {
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

// oomKills is how many processes the kernel's OOM killer has killed in
// the session's container so far.
func (x *execution) oomKills() int64 { return x.e.oomKills(x.cid) }

// oomKills is how many processes the kernel's OOM killer has killed in
// container id so far (memory.events on cgroup v2, memory.oom_control on
// v1); 0 when it cannot be read.
func (e *Executor) oomKills(id string) int64 {
	dirs, ok := e.cgroups.find(id)
	if !ok {
		return 0
	}
	file := "memory.oom_control"
	if dirs.version == 2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(dirs.memory, file))
	if err != nil {
		return 0
	}
	return parseKeyValues(string(b))["oom_kill"]
}
