package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/agent"
)

// A session's container and a warm container run sandgate's agent as
// their main process, under the container's init: the sandgate binary,
// bind-mounted read-only, as `sandgate sandbox-agent`, with the
// container's user and every restriction the container has. The executor
// gives it a fresh key in its first frame, before any command runs, over
// the container's attached stdin, and from then on starts commands
// through it and reads their output and exits from its stdout, framed
// and authenticated (package agent). A command so started costs a fork
// and an exec in the container instead of a docker exec (or, in a warm
// container, the daemon's handling of the container's exit), and is
// confined as a docker exec would be: same user, namespaces, cgroup,
// capabilities, seccomp filter, no-new-privileges.
//
// The key is never stored: after a gateway restart an adopted session's
// commands go through docker exec (exec.go), and an adopted warm run
// whose command the agent ran is lost (its end cannot be read).

// LabelAgent marks a container whose main process is the agent.
const LabelAgent = "sandgate.agent"

// agentPath is where the agent binary is mounted in the container.
const agentPath = "/.sandgate/agent"

// agentDialTimeout bounds the agent's answer to hello.
const agentDialTimeout = 10 * time.Second

// withAgent makes set's container run the agent as its main process.
func (e *Executor) withAgent(set *settings) {
	cfg := *set.config
	cfg.Entrypoint = []string{agentPath, "sandbox-agent"}
	cfg.Cmd = nil
	// Stdin stays open when the attach ends: the agent outlives a
	// gateway's connection (and reads no end of input from its loss).
	cfg.AttachStdin, cfg.OpenStdin, cfg.StdinOnce = true, true, false
	labels := make(map[string]string, len(cfg.Labels)+1)
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	labels[LabelAgent] = "true"
	cfg.Labels = labels
	set.config = &cfg
	host := *set.host
	host.Mounts = append(append([]mount.Mount(nil), host.Mounts...), mount.Mount{
		Type: mount.TypeBind, Source: e.cfg.AgentBinary, Target: agentPath, ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	})
	set.host = &host
}

// agentLink is the gateway's connection to one container's agent.
type agentLink struct {
	conn *agent.Conn
	// pumped is closed when the attach stream has ended.
	pumped chan struct{}
}

// dialAgent authenticates to the agent of the container whose attach
// stream is hj (stdin included), started already. What the agent writes
// to its stderr (its own diagnostics) goes to diag.
func (e *Executor) dialAgent(hj types.HijackedResponse, diag io.Writer) (*agentLink, error) {
	pr, pw := io.Pipe()
	l := &agentLink{pumped: make(chan struct{})}
	go func() {
		defer close(l.pumped)
		_, err := stdcopy.StdCopy(pw, diag, hj.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	type dialed struct {
		c   *agent.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := agent.Dial(pr, hj.Conn, agent.NewKey())
		ch <- dialed{c, err}
	}()
	select {
	case d := <-ch:
		if d.err != nil {
			hj.Close()
			return nil, d.err
		}
		l.conn = d.c
		// Once the link has ended (the agent exited, or a frame did not
		// authenticate), nothing reads the pipe: its next write fails,
		// the pump stops and pumped closes, instead of the pump blocking
		// for ever on a reader that is gone (and the run's end with it).
		go func() {
			<-d.c.Done()
			pr.CloseWithError(d.c.Err())
		}()
		return l, nil
	case <-time.After(agentDialTimeout):
		hj.Close()
		<-ch
		return nil, errors.New("the agent did not answer hello")
	}
}

// agentCommand is what the agent is asked to run for spec, after the
// image's entrypoint when there is one (a warm container's, as Docker
// would prepend it).
func agentCommand(spec sandgate.Normalized, entrypoint []string) agent.Command {
	env := make([]string, 0, len(spec.Env))
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	return agent.Command{
		Argv:  append(append([]string(nil), entrypoint...), spec.Command...),
		Env:   env,
		Dir:   spec.Workdir,
		Stdin: spec.Stdin != "",
	}
}

// commandUsage is what a session command used, by the kernel's account
// at its exit.
func commandUsage(ex agent.Exit, res sandgate.Result) *sandgate.Usage {
	cpu, user, sys := ex.UserMS+ex.SystemMS, ex.UserMS, ex.SystemMS
	return &sandgate.Usage{
		CPUMS: &cpu, CPUUserMS: &user, CPUSystemMS: &sys,
		WallMS: res.FinishedAt.Sub(res.StartedAt).Milliseconds(), Source: sandgate.UsageRusage,
	}
}

// awaitStart waits for the agent's word on a command Start asked it to
// run (p and err are what Start returned). It returns nil once the command
// runs, or has ended with an exit the agent gave it. Otherwise maybeRan says whether the command may have run without
// the gateway hearing of it: the start was sent, then the agent or its
// stream ended before the agent confirmed it. A command the agent refused
// (with its reason), or one never sent, did not run.
func awaitStart(p *agent.Process, err error) (maybeRan bool, _ error) {
	if err != nil {
		return p != nil, err
	}
	select {
	case <-p.Started():
	case <-p.Done():
	}
	select {
	case <-p.Started():
		return false, nil
	default:
	}
	if _, err = p.Exit(); err == nil {
		// An exit with no start: the agent could not run the program
		// (not found: 127, not executable: 126) and ended the command as
		// a shell would, its reason on the command's stderr. It is the
		// command's end, followed as any other.
		return false, nil
	}
	return errors.Is(err, agent.ErrGone), err
}

// unconfirmedLoss is the end of a command that may have run without the
// gateway hearing of it (awaitStart's maybeRan): it is recorded as lost,
// never as a command that did not run.
func (e *Executor) unconfirmedLoss(r *run, res sandgate.Result, err error) sandgate.Result {
	res.FinishedAt = e.now()
	res.Outcome = sandgate.OutcomeLost
	res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate,
		Message: "the agent ended before it confirmed the command's start; the command may have run: " + err.Error()}
	e.emit(r, sandgate.EventRunLost, outputPayload(res, map[string]any{"agent": true, "error_code": string(res.Error.Code), "error": res.Error.Message}))
	return res
}

// agentEnd is how a command the agent ran ended, as far as the gateway
// saw it.
type agentEnd struct {
	reason stopReason
	exit   agent.Exit
	// err is set when no exit came: the agent (or its container) ended
	// first.
	err error
}

// superviseAgent follows a command the agent runs to its end: the run's
// timeout and cancellation are a SIGTERM to its process group, StopGrace,
// then SIGKILL, all through the agent.
func (e *Executor) superviseAgent(ctx context.Context, r *run, p *agent.Process, timeout time.Duration) agentEnd {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	reason := notStopped
	select {
	case <-p.Done():
	case <-timer.C:
		reason = stoppedTimeout
	case <-ctx.Done():
		reason = reasonOf(ctx)
	}
	if reason != notStopped {
		_ = p.Signal(15)
		grace := time.NewTimer(e.cfg.StopGrace)
		select {
		case <-p.Done():
		case <-grace.C:
			for range 3 {
				_ = p.Signal(9)
				select {
				case <-p.Done():
				case <-time.After(e.cfg.CallTimeout / 3):
					continue
				}
				break
			}
		}
		grace.Stop()
	}
	select {
	case <-p.Done():
	default:
		return agentEnd{reason: reason, err: fmt.Errorf("command %s did not exit after SIGKILL", r.job.RunID)}
	}
	ex, err := p.Exit()
	return agentEnd{reason: reason, exit: ex, err: err}
}

// executeWarmAgent runs the job in a claimed warm member whose agent is
// authenticated already: the command is started by the agent, its exit
// comes back over the stream, and the container is removed after the
// run has answered. The trail is the same as a warm run's: created,
// started, exited with its code (and OOM, timeout or cancellation), then
// removed.
func (e *Executor) executeWarmAgent(ctx context.Context, r *run, set settings, imageID string, m *member) (sandgate.Result, error) {
	h := e.warmHandle(r, m)
	h.agent = m.agent
	// Removal is off the run's path: the pool and the run own the
	// container until it is gone, so the reaper leaves it alone.
	e.removing.Add(1)
	defer func() {
		go func() {
			defer e.removing.Done()
			h.close()
		}()
	}()
	e.emit(r, sandgate.EventContainerCreated, map[string]any{
		"name": m.name, "image": set.config.Image, "image_id": imageID,
		"warm_pool": m.prof.key, "pooled_at": m.created.UTC().Format(time.RFC3339Nano), "agent": true,
	})
	if err := e.checkIdentity(ctx, r, m.id, imageID); err != nil {
		return h.failed(err), err
	}
	spec := r.job.Spec
	ooms := e.oomKills(m.id)
	p, err := m.agent.conn.Start(agentCommand(spec, m.entrypoint), h.stdout, h.stderr, []byte(spec.Stdin))
	if maybeRan, err := awaitStart(p, err); err != nil {
		if maybeRan {
			// The container is removed (its processes killed) by close.
			h.r.ending.Store(true)
			h.usage.stop()
			res := h.res
			res.Stdout, res.Stderr = h.stdout.output(), h.stderr.output()
			return e.unconfirmedLoss(r, res, err), nil
		}
		err = sandgate.WrapError(sandgate.CodeContainerCreate, err, "start the command in warm container %s", m.name)
		return h.failed(err), err
	}
	h.started(e.now(), map[string]any{"warm_pool": m.prof.key, "agent": true, "pid": p.PID()}, true)
	end := e.superviseAgent(ctx, r, p, h.timeout())
	h.r.ending.Store(true)
	if end.err != nil {
		// The agent ended first (killed, out of memory): the container
		// ends with it, and is judged as any container's end.
		exit := h.stop(h.exitC())
		h.res.FinishedAt = e.now()
		h.usage.stop()
		var state container.InspectResponse
		if !exit.lost {
			ictx, cancel := e.cleanupContext(ctx)
			state, _ = e.docker.ContainerInspect(ictx, h.id)
			cancel()
		}
		return h.finish(end.reason, exit, state), nil
	}
	h.res.FinishedAt = e.now()
	h.usage.stop()
	res := h.res
	res.Stdout, res.Stderr = h.stdout.output(), h.stderr.output()
	return e.agentExited(r, res, end, e.oomKills(m.id) > ooms, func(res sandgate.Result) *sandgate.Usage {
		return h.usage.usage(res, h.memoryLimit())
	}), nil
}

// agentExited records the exit the agent reported for a command: its
// code, an OOM kill (a failing command while the container's OOM count
// rose), its outcome and usage, container.exited and the run's end. Warm
// runs and session commands end the same way.
func (e *Executor) agentExited(r *run, res sandgate.Result, end agentEnd, oomRose bool, usage func(sandgate.Result) *sandgate.Usage) sandgate.Result {
	code := end.exit.Code
	res.ExitCode = &code
	res.OOMKilled = code != 0 && oomRose
	res.Outcome = outcomeOf(end.reason, res.OOMKilled, code)
	res.Usage = usage(res)
	e.emitExit(r, sandgate.EventContainerExited, res, outputPayload(res, map[string]any{
		"agent":       true,
		"signal":      end.exit.Signal,
		"oom_killed":  res.OOMKilled,
		"duration_ms": res.FinishedAt.Sub(res.StartedAt).Milliseconds(),
		"usage":       res.Usage.Payload(),
	}))
	e.emitEnd(r, res)
	return res
}

// executeWarmSession opens a session in a claimed warm session member:
// its container runs, its agent is authenticated and its workspace is
// mounted at its workdir already, so the session is open as soon as the
// member is checked and recorded. From then on it is followed as a cold
// session's container is.
func (e *Executor) executeWarmSession(ctx context.Context, r *run, set settings, imageID string, m *member) (sandgate.Result, error) {
	h := e.warmHandle(r, m)
	h.agent, h.ws = m.agent, m.ws
	r.setWorkspace(m.ws)
	defer h.close()
	e.emit(r, sandgate.EventContainerCreated, map[string]any{
		"name": m.name, "image": set.config.Image, "image_id": imageID,
		"warm_pool": m.prof.key, "pooled_at": m.created.UTC().Format(time.RFC3339Nano), "agent": true,
		"workspace": map[string]any{"workspace_mb": r.job.Spec.Resources.WorkspaceMB},
	})
	if err := e.checkIdentity(ctx, r, m.id, imageID); err != nil {
		return h.failed(err), err
	}
	r.setAgent(m.agent)
	h.started(e.now(), map[string]any{"warm_pool": m.prof.key, "agent": true}, true)
	return h.supervise(ctx)
}
