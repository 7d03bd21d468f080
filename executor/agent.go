package executor

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types"
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

// withAgent makes set's container run the agent, binary, as its main
// process.
func withAgent(set *settings, binary string) {
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
		Type: mount.TypeBind, Source: binary, Target: agentPath, ReadOnly: true,
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
func dialAgent(hj types.HijackedResponse, diag io.Writer) (*agentLink, error) {
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

// unconfirmed is the end of a command that may have run without the
// gateway hearing of it (awaitStart's maybeRan): it is recorded as lost,
// never as a command that did not run.
func unconfirmed(err error) ending {
	msg := "the agent ended before it confirmed the command's start; the command may have run: " + err.Error()
	return lostEnding(msg, map[string]any{"agent": true, "error": msg})
}

// agentProc is a command the container's agent runs: a warm run's, or
// one in a session. Its end is the agent's exit frame.
type agentProc struct {
	h *handle
	p *agent.Process
	// cid is the container whose OOM count, ooms before the command,
	// tells an OOM kill.
	cid  string
	ooms int64
	// usage is what the command used, from its exit and its result.
	usage func(ex agent.Exit, res sandgate.Result) *sandgate.Usage
	// gone says how the run ended when the agent (or its stream) ended
	// before the command's exit came.
	gone func(reason stopReason, err error) ending
}

func (a *agentProc) wait() <-chan struct{} { return a.p.Done() }

// stop signals the command's process group through the agent: SIGTERM,
// StopGrace, then SIGKILL.
func (a *agentProc) stop() {
	cfg := a.h.e.cfg
	_ = a.p.Signal(15)
	grace := time.NewTimer(cfg.StopGrace)
	defer grace.Stop()
	select {
	case <-a.p.Done():
		return
	case <-grace.C:
	}
	for range 3 {
		_ = a.p.Signal(9)
		select {
		case <-a.p.Done():
			return
		case <-time.After(cfg.CallTimeout / 3):
		}
	}
}

func (a *agentProc) end(reason stopReason) ending {
	h := a.h
	select {
	case <-a.p.Done():
	default:
		return a.gone(reason, fmt.Errorf("command %s did not exit after SIGKILL", h.job.RunID))
	}
	ex, err := a.p.Exit()
	if err != nil {
		return a.gone(reason, err)
	}
	h.res.FinishedAt = h.now()
	oom := ex.Code != 0 && h.e.meter.oomKills(a.cid) > a.ooms
	x := exitedWith(reason, ex.Code, oom, map[string]any{"agent": true, "signal": ex.Signal})
	x.usage = func(res sandgate.Result) *sandgate.Usage { return a.usage(ex, res) }
	return x
}
