package sandgate

import (
	"context"
	"io"
	"net"
)

// Terminals and port previews: what a session offers an agent or a person
// beyond commands, each opened through the gate as an operation of its
// own on an open session.

// The operations of a session's streams.
const (
	// OperationTerminal admits a terminal on an open session:
	// input.request is the session's admitted spec with the terminal's
	// program as its command, input.session names the session.
	OperationTerminal Operation = "terminal"
	// OperationPort admits a connection to a port of an open session:
	// input.request is the session's admitted spec, input.session names
	// the session and input.port the port.
	OperationPort Operation = "port"
)

// PortInput is input.port: the port of the session a connection asks for.
type PortInput struct {
	Number int `json:"number"`
}

// TerminalSpec is a terminal to open in a session: its program (the
// session's default shell when empty), and its first size.
type TerminalSpec struct {
	Command    []string
	Rows, Cols uint16
}

// Terminal is a terminal open in a session: its output is read, its
// input written; Close hangs it up.
type Terminal interface {
	io.ReadWriteCloser
	// Resize sets the terminal's size.
	Resize(rows, cols uint16) error
	// Signal sends the signal named by its number to the terminal's
	// process group.
	Signal(sig int) error
	// Done is closed once the terminal's program has ended.
	Done() <-chan struct{}
	// ExitCode is the program's exit code once Done is closed (128 plus
	// the signal's number when a signal killed it); the error is set when
	// its end was not seen (the agent ended first).
	ExitCode() (int, error)
}

// SessionStreams is a SessionExecutor that opens terminals and port
// connections in its sessions, through their in-sandbox agent. Both
// answer CONFLICT when the session is not open on this node or has no
// agent, and the executor's SBX-001 when the agent refuses.
type SessionStreams interface {
	// Terminal starts t's program on a new pseudo-terminal of session
	// sessionID, as the session's user, with its environment and workdir.
	Terminal(ctx context.Context, sessionID string, t TerminalSpec) (Terminal, error)
	// DialPort connects to port of the session's own loopback (127.0.0.1
	// in its network namespace). No other address can be named.
	DialPort(ctx context.Context, sessionID string, port int) (net.Conn, error)
}
