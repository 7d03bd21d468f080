package executor

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/agent"
)

// A session's terminals and port connections are streams of its agent
// (package agent): a pseudo-terminal of the sandbox's own devpts, or a
// connection the agent makes to 127.0.0.1 in the sandbox's network
// namespace. No daemon call, no exec, no published port: a session
// without an agent (adopted after a restart, or SANDGATE_AGENT_BINARY
// off) has neither.

var _ sandgate.SessionStreams = (*Executor)(nil)

// streamOpenTimeout bounds the agent's answer to an open.
const streamOpenTimeout = 10 * time.Second

// defaultTerminal is a terminal's program when the request names none.
var defaultTerminal = []string{"sh"}

// sessionAgent is the agent of session id, open on this node.
func (e *Executor) sessionAgent(id string) (*agentLink, sandgate.Normalized, error) {
	s := e.runs.get(id)
	if s == nil || !s.job.SessionContainer {
		return nil, sandgate.Normalized{}, sandgate.Errorf(sandgate.CodeConflict, "session %s is not open on node %s", id, e.cfg.Node)
	}
	if _, state, _ := s.snapshot(); state != sandgate.StateRunning {
		return nil, sandgate.Normalized{}, sandgate.Errorf(sandgate.CodeConflict, "session %s is not open on node %s", id, e.cfg.Node)
	}
	l, _ := s.link()
	if l == nil {
		return nil, sandgate.Normalized{}, sandgate.Errorf(sandgate.CodeConflict,
			"session %s has no in-sandbox agent (adopted after a restart, or the agent is off): it has no terminals or ports", id)
	}
	return l, s.job.Spec, nil
}

// Terminal opens a terminal in the session (sandgate.SessionStreams).
func (e *Executor) Terminal(_ context.Context, sessionID string, t sandgate.TerminalSpec) (sandgate.Terminal, error) {
	l, spec, err := e.sessionAgent(sessionID)
	if err != nil {
		return nil, err
	}
	argv := t.Command
	if len(argv) == 0 {
		argv = defaultTerminal
	}
	env := []string{"TERM=xterm-256color"}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	st, err := l.conn.Open(agent.Open{Argv: argv, Env: env, Dir: spec.Workdir, Rows: t.Rows, Cols: t.Cols}, streamOpenTimeout)
	if err != nil {
		return nil, agentStreamError(err, "open a terminal in session "+sessionID)
	}
	return terminal{st}, nil
}

// DialPort connects to a port of the session's loopback
// (sandgate.SessionStreams).
func (e *Executor) DialPort(_ context.Context, sessionID string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, sandgate.FieldError("port", "must be between 1 and 65535")
	}
	l, _, err := e.sessionAgent(sessionID)
	if err != nil {
		return nil, err
	}
	st, err := l.conn.Open(agent.Open{Port: port}, streamOpenTimeout)
	if errors.Is(err, agent.ErrGone) {
		return nil, agentStreamError(err, "connect to port in session "+sessionID)
	}
	if err != nil {
		// Nothing listens there (yet): the session's to fix, and worth a
		// retry once its program has started.
		return nil, sandgate.WrapError(sandgate.CodeUnavailable, err, "nothing in session %s accepts connections on port %d", sessionID, port)
	}
	return st.NetConn(), nil
}

func agentStreamError(err error, what string) error {
	if errors.Is(err, agent.ErrGone) {
		return sandgate.WrapError(sandgate.CodeConflict, err, "%s: its agent has ended", what)
	}
	return sandgate.WrapError(sandgate.CodeContainerCreate, err, "%s", what)
}

// terminal is an agent's terminal stream as a sandgate.Terminal.
type terminal struct{ *agent.Stream }

func (t terminal) Signal(sig int) error { return t.Stream.Signal(syscall.Signal(sig)) }

func (t terminal) ExitCode() (int, error) {
	ex, err := t.Exit()
	return ex.Code, err
}
