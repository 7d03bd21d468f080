package agent

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
)

// ErrGone is the end of a command whose agent stopped answering (it
// exited, was killed, or its stream broke) before the command's exit came.
var ErrGone = errors.New("agent: the agent ended before the command did")

// Conn is the gateway's side of one agent.
type Conn struct {
	w  *writer
	rd *Reader

	mu      sync.Mutex
	procs   map[uint32]*Process
	streams map[uint32]*Stream
	next    uint32
	err     error
	done    chan struct{}
}

// NewKey returns a fresh key for hello.
func NewKey() []byte {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k)
	return k
}

// Dial authenticates to the agent whose frames come from in and whose
// stdin is out: it sends hello with key and waits for ready. The caller
// bounds the wait by closing in. From then on the Conn reads in until it
// ends; Done is closed then.
func Dial(in io.Reader, out io.Writer, key []byte) (*Conn, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("agent: key of %d bytes, want %d", len(key), KeySize)
	}
	c := &Conn{w: newWriter(out, toAgent, key), rd: newReader(in, toGateway, key),
		procs: map[uint32]*Process{}, done: make(chan struct{})}
	if err := c.w.write(Frame{Type: TypeHello, Payload: key}); err != nil {
		return nil, fmt.Errorf("agent: hello: %w", err)
	}
	f, err := c.rd.Next()
	if err != nil {
		return nil, fmt.Errorf("agent: ready: %w", err)
	}
	if f.Type != TypeReady || string(f.Payload) != Version {
		return nil, fmt.Errorf("agent: answered hello with frame %d %q, want ready %q", f.Type, f.Payload, Version)
	}
	go c.read()
	return c, nil
}

// Done is closed when the agent has ended; Err says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the agent ended, once Done is closed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Conn) read() {
	var err error
	for {
		var f Frame
		if f, err = c.rd.Next(); err != nil {
			break
		}
		if f.ID == 0 && f.Type == TypeFailed {
			err = fmt.Errorf("agent: %s", f.Payload)
			break
		}
		if st := c.stream(f.ID); st != nil {
			st.deliver(f)
			continue
		}
		c.mu.Lock()
		p := c.procs[f.ID]
		c.mu.Unlock()
		if p == nil {
			continue // a command that ended, or one the agent made up
		}
		switch f.Type {
		case TypeStarted:
			p.startOnce.Do(func() {
				if len(f.Payload) == 4 {
					p.pid = int(binary.BigEndian.Uint32(f.Payload))
				}
				close(p.started)
			})
		case TypeStdout:
			_, _ = p.stdout.Write(f.Payload)
		case TypeStderr:
			_, _ = p.stderr.Write(f.Payload)
		case TypeExit:
			var ex Exit
			if json.Unmarshal(f.Payload, &ex) != nil {
				p.end(Exit{}, fmt.Errorf("agent: bad exit of command %d", f.ID))
			} else {
				p.end(ex, nil)
			}
			c.forget(p)
		case TypeFailed:
			p.end(Exit{}, fmt.Errorf("agent: %s", f.Payload))
			c.forget(p)
		}
	}
	if errors.Is(err, io.EOF) {
		err = ErrGone
	}
	c.mu.Lock()
	c.err = err
	procs, streams := c.procs, c.streams
	c.procs, c.streams = map[uint32]*Process{}, nil
	c.mu.Unlock()
	for _, p := range procs {
		p.end(Exit{}, fmt.Errorf("%w: %v", ErrGone, err))
	}
	for _, st := range streams {
		st.end(Exit{}, fmt.Errorf("%w: %v", ErrGone, err))
	}
	close(c.done)
}

func (c *Conn) forget(p *Process) {
	c.mu.Lock()
	delete(c.procs, p.id)
	c.mu.Unlock()
}

// Process is one command the agent runs.
type Process struct {
	c              *Conn
	id             uint32
	stdout, stderr io.Writer
	pid            int
	started        chan struct{}
	startOnce      sync.Once
	once           sync.Once
	done           chan struct{}
	exit           Exit
	err            error
}

// Start asks the agent to run cmd; its output is written to stdout and
// stderr (from one goroutine, in order) and stdin, when cmd.Stdin, is its
// input. The command may run once Start returns, whatever its error says.
func (c *Conn) Start(cmd Command, stdout, stderr io.Writer, stdin []byte) (*Process, error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxPayload {
		return nil, fmt.Errorf("agent: command of %d bytes is over %d", len(b), MaxPayload)
	}
	p := &Process{c: c, stdout: stdout, stderr: stderr, started: make(chan struct{}), done: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrGone, c.err)
	}
	c.next++
	p.id = c.next
	c.procs[p.id] = p
	c.mu.Unlock()
	if err := c.w.write(Frame{Type: TypeStart, ID: p.id, Payload: b}); err != nil {
		return p, fmt.Errorf("agent: start: %w", err)
	}
	if cmd.Stdin {
		go func() {
			for len(stdin) > 0 {
				n := min(len(stdin), MaxPayload)
				if c.w.write(Frame{Type: TypeStdin, ID: p.id, Payload: stdin[:n]}) != nil {
					return
				}
				stdin = stdin[n:]
			}
			_ = c.w.write(Frame{Type: TypeStdin, ID: p.id})
		}()
	}
	return p, nil
}

func (p *Process) end(ex Exit, err error) {
	p.once.Do(func() {
		p.exit, p.err = ex, err
		close(p.done)
	})
}

// Started is closed once the command runs.
func (p *Process) Started() <-chan struct{} { return p.started }

// PID is the command's PID in the container, once Started is closed.
func (p *Process) PID() int { return p.pid }

// Done is closed when the command has ended or its agent has.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit is how the command ended, once Done is closed; the error is set
// (ErrGone, or the agent's reason it could not start) when no exit came.
func (p *Process) Exit() (Exit, error) { return p.exit, p.err }

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig syscall.Signal) error {
	return p.c.w.write(Frame{Type: TypeSignal, ID: p.id, Payload: []byte{byte(sig)}})
}
