package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Open is what TypeOpen asks the agent for: a terminal running Argv, or
// (Port set) a TCP connection to that port of the sandbox's own loopback.
type Open struct {
	// Argv is the terminal's program; Env is added to the agent's
	// environment and Dir is its working directory, as a Command's.
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// Rows and Cols are the terminal's first size.
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Port is a port of 127.0.0.1 in the sandbox. The agent dials no
	// other address: the host and the network are never the gateway's to
	// name.
	Port int `json:"port,omitempty"`
}

// Window is how many bytes of a stream's either direction may travel
// before its reader grants more: a slow reader stops the writer of its
// one stream, never the agent's other streams and commands.
const Window = 256 << 10

// minCharge is what the smallest input frame counts against the window,
// so that a window's worth of one-byte frames (keystrokes) is bounded in
// frames too.
const minCharge = 512

// charge is what n bytes of input count against the window.
func charge(n int) int { return max(n, minCharge) }

// MaxStreams bounds the streams an agent has open at once.
const MaxStreams = 256

// portDialTimeout bounds the agent's connect to a port of its loopback.
const portDialTimeout = 5 * time.Second

// hangupGrace is how long a closed terminal's process group has after
// SIGHUP before SIGKILL.
const hangupGrace = 2 * time.Second

// aStream is one stream on the agent's side.
type aStream struct {
	rw  io.ReadWriteCloser
	pty *os.File // the terminal's master, nil for a connection
	pid int      // the terminal's process, 0 for a connection

	mu     sync.Mutex
	cond   *sync.Cond
	credit int // bytes of output the gateway will take
	closed bool
	exited bool // the terminal's process was waited for
	// in queues the gateway's input for the goroutine that writes it;
	// queued counts its bytes, never more than Window.
	in     chan []byte
	queued int
}

// streams returns the server's streams, made on first use.
func (s *server) streamMap() map[uint32]*aStream {
	if s.streams == nil {
		s.streams = map[uint32]*aStream{}
	}
	return s.streams
}

// handleStream handles f when it is a stream's; it reports whether it was.
func (s *server) handleStream(f Frame) bool {
	switch f.Type {
	case TypeOpen:
		var o Open
		if err := json.Unmarshal(f.Payload, &o); err != nil {
			s.fail(f.ID, "open: not an open request")
			return true
		}
		s.open(f.ID, o)
		return true
	case TypeWindow, TypeResize, TypeClose, TypeStdin, TypeSignal:
	default:
		return false
	}
	s.mu.Lock()
	st := s.streamMap()[f.ID]
	s.mu.Unlock()
	if st == nil {
		return f.Type == TypeWindow || f.Type == TypeResize || f.Type == TypeClose
	}
	switch f.Type {
	case TypeWindow:
		if len(f.Payload) == 4 {
			st.grant(int(binary.BigEndian.Uint32(f.Payload)))
		}
	case TypeResize:
		if st.pty != nil && len(f.Payload) == 4 {
			_ = setSize(st.pty, binary.BigEndian.Uint16(f.Payload[:2]), binary.BigEndian.Uint16(f.Payload[2:]))
		}
	case TypeClose:
		st.close()
	case TypeStdin:
		st.input(f.Payload)
	case TypeSignal:
		if st.pid != 0 && len(f.Payload) == 1 {
			signalCommand(st.pid, syscall.Signal(f.Payload[0]))
		}
	}
	return true
}

// open opens stream id: a terminal or a connection to a loopback port.
func (s *server) open(id uint32, o Open) {
	s.mu.Lock()
	_, dup := s.streamMap()[id]
	_, dupCmd := s.cmds[id]
	full := len(s.streams) >= MaxStreams
	s.mu.Unlock()
	if id == 0 || dup || dupCmd || full {
		s.fail(id, "open: stream id in use, zero, or too many streams")
		return
	}
	var st *aStream
	var cmd *exec.Cmd
	var err error
	switch {
	case o.Port > 0 && o.Port < 65536 && len(o.Argv) == 0:
		st, err = dialLoopback(o.Port)
	case o.Port == 0 && len(o.Argv) > 0:
		st, cmd, err = s.startTerminal(o)
	default:
		err = errors.New("open: a terminal's argv or a port from 1 to 65535, not both")
	}
	if err != nil {
		s.fail(id, "open: "+err.Error())
		return
	}
	st.cond = sync.NewCond(&st.mu)
	st.credit = Window
	st.in = make(chan []byte, Window/minCharge)
	s.mu.Lock()
	s.streamMap()[id] = st
	s.mu.Unlock()
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(st.pid))
	_ = s.w.write(Frame{Type: TypeStarted, ID: id, Payload: p[:]})
	go s.writeInput(id, st)
	go s.pumpStream(id, st, cmd)
}

// dialLoopback connects to port of the sandbox's 127.0.0.1.
func dialLoopback(port int) (*aStream, error) {
	c, err := net.DialTimeout("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), portDialTimeout)
	if err != nil {
		return nil, err
	}
	return &aStream{rw: c}, nil
}

// startTerminal starts o's program on a new pseudo-terminal, as the
// leader of a session whose controlling terminal it is.
func (s *server) startTerminal(o Open) (*aStream, *exec.Cmd, error) {
	master, slave, err := openPTY()
	if err != nil {
		return nil, nil, err
	}
	defer slave.Close()
	rows, cols := o.Rows, o.Cols
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	_ = setSize(master, rows, cols)
	cmd := exec.Command(o.Argv[0], o.Argv[1:]...)
	cmd.Env = append(append([]string(nil), s.env...), o.Env...)
	if p, ok := lookPath(o.Argv[0], cmd.Env); ok {
		cmd.Path, cmd.Err = p, nil
	}
	cmd.Dir = o.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		master.Close()
		return nil, nil, err
	}
	preferVictim(cmd.Process.Pid)
	return &aStream{rw: master, pty: master, pid: cmd.Process.Pid}, cmd, nil
}

// pumpStream frames the stream's output within the window the gateway
// grants, then its end: a terminal's exit, or a connection's close.
func (s *server) pumpStream(id uint32, st *aStream, cmd *exec.Cmd) {
	buf := make([]byte, 32<<10)
	for {
		n := st.take(len(buf))
		if n == 0 {
			break
		}
		m, err := st.rw.Read(buf[:n])
		st.giveBack(n - m)
		if m > 0 && s.w.write(Frame{Type: TypeStdout, ID: id, Payload: buf[:m]}) != nil {
			break
		}
		if err != nil {
			break
		}
	}
	st.close()
	ex := Exit{}
	if cmd != nil {
		ps, _ := cmd.Process.Wait()
		st.mu.Lock()
		st.exited = true
		st.mu.Unlock()
		ex = exitOf(ps)
	}
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
	b, _ := json.Marshal(ex)
	_ = s.w.write(Frame{Type: TypeExit, ID: id, Payload: b})
}

// writeInput writes the gateway's input to the stream, and grants the
// gateway as much again once written.
func (s *server) writeInput(id uint32, st *aStream) {
	for b := range st.in {
		st.mu.Lock()
		st.queued -= charge(len(b))
		st.mu.Unlock()
		if len(b) == 0 {
			if cw, ok := st.rw.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			continue
		}
		if _, err := st.rw.Write(b); err != nil {
			st.close()
			return
		}
		var p [4]byte
		binary.BigEndian.PutUint32(p[:], uint32(charge(len(b))))
		if s.w.write(Frame{Type: TypeAck, ID: id, Payload: p[:]}) != nil {
			return
		}
	}
}

// input queues b for the stream. A gateway that sends past its window
// has the stream closed: the agent holds no more than Window of it.
func (st *aStream) input(b []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return
	}
	if st.queued+charge(len(b)) > Window {
		st.closeLocked()
		return
	}
	select {
	case st.in <- append([]byte{}, b...):
		st.queued += charge(len(b))
	default:
		st.closeLocked()
	}
}

// take waits for output credit and takes up to max of it; 0 once closed.
func (st *aStream) take(max int) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	for st.credit == 0 && !st.closed {
		st.cond.Wait()
	}
	if st.credit == 0 {
		// Closed: what is left to read is drained without credit only
		// until the close, so that the pump ends.
		return 0
	}
	n := min(max, st.credit)
	st.credit -= n
	return n
}

func (st *aStream) giveBack(n int) {
	if n > 0 {
		st.grant(n)
	}
}

func (st *aStream) grant(n int) {
	st.mu.Lock()
	if st.credit+n <= Window {
		st.credit += n
	}
	st.mu.Unlock()
	st.cond.Broadcast()
}

// close ends the stream: its connection or terminal closed, a terminal's
// process group hung up, then killed after hangupGrace.
func (st *aStream) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closeLocked()
}

func (st *aStream) closeLocked() {
	if st.closed {
		return
	}
	st.closed = true
	close(st.in)
	st.cond.Broadcast()
	if st.pid != 0 {
		pid := st.pid
		signalCommand(pid, syscall.SIGHUP)
		time.AfterFunc(hangupGrace, func() {
			// Never once waited for: its PID may be another's by then.
			st.mu.Lock()
			defer st.mu.Unlock()
			if !st.exited {
				signalCommand(pid, syscall.SIGKILL)
			}
		})
	}
	_ = st.rw.Close()
}

// killStreams closes every stream: a refused frame ends the agent.
func (s *server) killStreams() {
	s.mu.Lock()
	sts := make([]*aStream, 0, len(s.streams))
	for _, st := range s.streams {
		sts = append(sts, st)
	}
	s.mu.Unlock()
	for _, st := range sts {
		st.close()
		if st.pid != 0 {
			signalCommand(st.pid, syscall.SIGKILL)
		}
	}
}
