package executor

import (
	"context"
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
