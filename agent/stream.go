package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Stream is the gateway's side of one stream: a terminal or a connection
// to a port of the sandbox's loopback. It is an io.ReadWriteCloser whose
// either direction holds at most Window bytes in flight.
type Stream struct {
	c  *Conn
	id uint32

	started   chan struct{}
	startOnce sync.Once
	pid       int

	mu       sync.Mutex
	cond     *sync.Cond
	buf      []byte // output received, not yet read
	unacked  int    // bytes read since the last window frame
	credit   int    // input the agent will take
	ended    bool   // the agent sent the stream's end
	closed   bool   // Close was called
	exit     Exit
	err      error
	done     chan struct{}
	doneOnce sync.Once
}

// Open opens a stream on the agent and waits for its answer: started
// (PID is then a terminal's process) or the agent's refusal.
func (c *Conn) Open(o Open, timeout time.Duration) (*Stream, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxPayload {
		return nil, fmt.Errorf("agent: open of %d bytes is over %d", len(b), MaxPayload)
	}
	st := &Stream{c: c, started: make(chan struct{}), credit: Window, done: make(chan struct{})}
	st.cond = sync.NewCond(&st.mu)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrGone, c.err)
	}
	c.next++
	st.id = c.next
	if c.streams == nil {
		c.streams = map[uint32]*Stream{}
	}
	c.streams[st.id] = st
	c.mu.Unlock()
	if err := c.w.write(Frame{Type: TypeOpen, ID: st.id, Payload: b}); err != nil {
		st.end(Exit{}, err)
		return nil, fmt.Errorf("agent: open: %w", err)
	}
	select {
	case <-st.started:
		return st, nil
	case <-st.done:
		_, err := st.Exit()
		if err == nil {
			err = errors.New("agent: the stream ended before it opened")
		}
		return nil, err
	case <-time.After(timeout):
		_ = st.Close()
		return nil, errors.New("agent: the stream did not open in time")
	}
}

// deliver is the Conn's reader handing the stream a frame of its.
func (st *Stream) deliver(f Frame) {
	switch f.Type {
	case TypeStarted:
		st.startOnce.Do(func() {
			if len(f.Payload) == 4 {
				st.pid = int(binary.BigEndian.Uint32(f.Payload))
			}
			close(st.started)
		})
	case TypeStdout:
		st.mu.Lock()
		if len(st.buf)+len(f.Payload) > Window {
			// More than the window granted: the agent is not following
			// the protocol; the stream ends rather than grow.
			st.mu.Unlock()
			st.end(Exit{}, errors.New("agent: stream output beyond its window"))
			_ = st.Close()
			return
		}
		st.buf = append(st.buf, f.Payload...)
		st.mu.Unlock()
		st.cond.Broadcast()
	case TypeAck:
		if len(f.Payload) == 4 {
			st.mu.Lock()
			st.credit = min(st.credit+int(binary.BigEndian.Uint32(f.Payload)), Window)
			st.mu.Unlock()
			st.cond.Broadcast()
		}
	case TypeExit:
		var ex Exit
		if json.Unmarshal(f.Payload, &ex) != nil {
			st.end(Exit{}, errors.New("agent: bad end of stream"))
		} else {
			st.end(ex, nil)
		}
	case TypeFailed:
		st.end(Exit{}, fmt.Errorf("agent: %s", f.Payload))
	}
}

// end records the stream's end; what was received can still be read.
func (st *Stream) end(ex Exit, err error) {
	st.doneOnce.Do(func() {
		st.mu.Lock()
		st.ended, st.exit, st.err = true, ex, err
		st.mu.Unlock()
		st.cond.Broadcast()
		st.c.forgetStream(st.id)
		close(st.done)
	})
}

// Read reads the stream's output; io.EOF once it has ended and all of it
// was read.
func (st *Stream) Read(p []byte) (int, error) {
	st.mu.Lock()
	for len(st.buf) == 0 && !st.ended && !st.closed {
		st.cond.Wait()
	}
	if len(st.buf) == 0 {
		st.mu.Unlock()
		return 0, io.EOF
	}
	n := copy(p, st.buf)
	st.buf = st.buf[n:]
	if len(st.buf) == 0 {
		st.buf = nil
	}
	st.unacked += n
	grant := 0
	if st.unacked >= Window/4 || len(st.buf) == 0 {
		grant, st.unacked = st.unacked, 0
	}
	ended := st.ended
	st.mu.Unlock()
	if grant > 0 && !ended {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(grant))
		_ = st.c.w.write(Frame{Type: TypeWindow, ID: st.id, Payload: b[:]})
	}
	return n, nil
}

// Write sends p as the stream's input, waiting for the agent's window.
func (st *Stream) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), MaxPayload)
		st.mu.Lock()
		for st.credit < charge(n) && !st.ended && !st.closed {
			st.cond.Wait()
		}
		if st.ended || st.closed {
			st.mu.Unlock()
			return written, net.ErrClosed
		}
		st.credit -= charge(n)
		st.mu.Unlock()
		if err := st.c.w.write(Frame{Type: TypeStdin, ID: st.id, Payload: p[:n]}); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// CloseWrite ends the stream's input: a connection's write half is shut.
func (st *Stream) CloseWrite() error {
	return st.c.w.write(Frame{Type: TypeStdin, ID: st.id})
}

// Resize sets a terminal's size.
func (st *Stream) Resize(rows, cols uint16) error {
	var b [4]byte
	binary.BigEndian.PutUint16(b[:2], rows)
	binary.BigEndian.PutUint16(b[2:], cols)
	return st.c.w.write(Frame{Type: TypeResize, ID: st.id, Payload: b[:]})
}

// Signal sends sig to a terminal's process group.
func (st *Stream) Signal(sig syscall.Signal) error {
	return st.c.w.write(Frame{Type: TypeSignal, ID: st.id, Payload: []byte{byte(sig)}})
}

// Close ends the stream; a terminal's process group is hung up.
func (st *Stream) Close() error {
	st.mu.Lock()
	already := st.closed
	st.closed = true
	st.mu.Unlock()
	st.cond.Broadcast()
	if already {
		return nil
	}
	select {
	case <-st.done:
		return nil
	default:
	}
	return st.c.w.write(Frame{Type: TypeClose, ID: st.id})
}

// PID is a terminal's process in the sandbox (0 for a connection).
func (st *Stream) PID() int { return st.pid }

// Done is closed once the stream has ended on the agent's side.
func (st *Stream) Done() <-chan struct{} { return st.done }

// Exit is how the stream ended, once Done is closed: a terminal's exit,
// or the error when the agent refused it or ended first.
func (st *Stream) Exit() (Exit, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.exit, st.err
}

func (c *Conn) forgetStream(id uint32) {
	c.mu.Lock()
	delete(c.streams, id)
	c.mu.Unlock()
}

// stream is the open stream id, nil for none.
func (c *Conn) stream(id uint32) *Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// NetConn is the stream as a net.Conn (with deadlines), for an HTTP
// transport to dial through: a pipe whose far end is copied to and from
// the stream. Closing it closes the stream.
func (st *Stream) NetConn() net.Conn {
	near, far := net.Pipe()
	go func() {
		_, _ = io.Copy(far, st)
		_ = far.Close()
	}()
	go func() {
		_, _ = io.Copy(st, far)
		_ = st.Close()
		_ = far.Close()
	}()
	return near
}
