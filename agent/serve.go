package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Command is what start asks the agent to run.
type Command struct {
	// Argv is the program and its arguments; the program is looked up in
	// the PATH of the command's environment when it has no slash.
	Argv []string `json:"argv"`
	// Env is added to the agent's environment (the container's), and
	// replaces what it names.
	Env []string `json:"env,omitempty"`
	// Dir is the working directory; empty is the agent's.
	Dir string `json:"dir,omitempty"`
	// Stdin says input will come in stdin frames; without it the command
	// reads /dev/null.
	Stdin bool `json:"stdin,omitempty"`
}

// Exit is how a command ended: Code is its exit code, or 128 plus the
// number of the signal that killed it (as a shell and Docker report it),
// Signal that number.
type Exit struct {
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
	// UserMS and SystemMS are the CPU time of the command and of the
	// descendants it waited for (the kernel's rusage at its exit). Its
	// peak resident set is not reported: the kernel's counts the agent's
	// memory, which the command shared between fork and exec.
	UserMS   int64 `json:"user_ms"`
	SystemMS int64 `json:"system_ms"`
}

// MaxCommands bounds the commands an agent runs at once.
const MaxCommands = 1024

// outputDrain is how long a command's output is read after it has exited:
// a background child that keeps the pipe open does not hold its end.
const outputDrain = 100 * time.Millisecond

// Serve is the agent: it reads frames from in and writes frames to out
// until in ends or a frame is refused, and returns why. It sets itself
// not dumpable first, so that processes of the same user cannot read its
// memory or open its file descriptors through /proc. Each command runs in
// a process group of its own, with the agent's user, namespaces, cgroup,
// capabilities, seccomp filter and no-new-privileges: everything a
// docker exec in the container would have.
func Serve(in io.Reader, out io.Writer) error {
	if err := setNotDumpable(); err != nil {
		return fmt.Errorf("agent: set not dumpable: %w", err)
	}
	rd := newReader(in, toAgent, nil)
	hello, err := rd.Next()
	if err != nil {
		return fmt.Errorf("agent: hello: %w", err)
	}
	s := &server{w: newWriter(out, toGateway, hello.Payload), cmds: map[uint32]*command{}, env: os.Environ()}
	if err := s.w.write(Frame{Type: TypeReady, Payload: []byte(Version)}); err != nil {
		return err
	}
	for {
		f, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			s.killAll()
			s.killStreams()
			return err
		}
		s.handle(f)
	}
}

// setNotDumpable is prctl(PR_SET_DUMPABLE, 0).
func setNotDumpable() error {
	const prSetDumpable = 4
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

type server struct {
	w   *writer
	env []string

	mu      sync.Mutex
	cmds    map[uint32]*command
	streams map[uint32]*aStream
}

type command struct {
	pid int
	// stdin queues the command's input for the goroutine that writes it,
	// so that a command that does not read cannot stop the agent; nil
	// when the command has no input.
	stdin chan []byte
}

// stdinQueue bounds the input frames queued for one command.
const stdinQueue = 64

func (s *server) handle(f Frame) {
	if s.handleStream(f) {
		return
	}
	switch f.Type {
	case TypeStart:
		var c Command
		if err := json.Unmarshal(f.Payload, &c); err != nil || len(c.Argv) == 0 {
			s.fail(f.ID, "start: not a command")
			return
		}
		s.start(f.ID, c)
	case TypeStdin:
		// Queued without blocking, under the lock the command's end
		// closes the queue under: a command that does not read has its
		// input cut, and never stops the agent.
		s.mu.Lock()
		if c := s.cmds[f.ID]; c != nil && c.stdin != nil {
			select {
			case c.stdin <- append([]byte{}, f.Payload...):
			default:
				close(c.stdin)
				c.stdin = nil
			}
		}
		s.mu.Unlock()
	case TypeSignal:
		s.mu.Lock()
		c := s.cmds[f.ID]
		s.mu.Unlock()
		if c != nil && len(f.Payload) == 1 {
			signalCommand(c.pid, syscall.Signal(f.Payload[0]))
		}
	}
}

func (s *server) fail(id uint32, msg string) {
	_ = s.w.write(Frame{Type: TypeFailed, ID: id, Payload: []byte(msg)})
}

// notRunnable says whether err, from starting program, means the program
// cannot be run, as a shell reports it: 127 when there is no such
// program, 126 when it is there but cannot be executed.
func notRunnable(program string, err error) (code int, msg string, ok bool) {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return 127, fmt.Sprintf("exec: %q: not found", program), true
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC), errors.Is(err, exec.ErrDot):
		return 126, fmt.Sprintf("exec: %q: cannot be executed: %v", program, errors.Unwrap(err)), true
	}
	return 0, "", false
}

// endUnstarted ends command id, which could not start, as a shell ends
// one: its reason on its stderr and an exit with code, and no start.
func (s *server) endUnstarted(id uint32, code int, msg string) {
	if s.w.write(Frame{Type: TypeStderr, ID: id, Payload: []byte(msg + "\n")}) != nil {
		return
	}
	b, _ := json.Marshal(Exit{Code: code})
	_ = s.w.write(Frame{Type: TypeExit, ID: id, Payload: b})
}

// start runs c as command id, in a process group of its own.
func (s *server) start(id uint32, c Command) {
	s.mu.Lock()
	dup, full := s.cmds[id] != nil, len(s.cmds) >= MaxCommands
	s.mu.Unlock()
	if id == 0 || dup || full {
		s.fail(id, "start: command id in use, zero, or too many commands")
		return
	}
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Env = append(append([]string(nil), s.env...), c.Env...)
	if p, ok := lookPath(c.Argv[0], cmd.Env); ok {
		cmd.Path, cmd.Err = p, nil
	}
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdin io.WriteCloser
	var queue chan []byte
	var err error
	if c.Stdin {
		if stdin, err = cmd.StdinPipe(); err != nil {
			s.fail(id, "start: "+err.Error())
			return
		}
		queue = make(chan []byte, stdinQueue)
	}
	outR, outW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	if err := errors.Join(err1, err2); err != nil {
		s.fail(id, "start: "+err.Error())
		return
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{outR, outW, errR, errW} {
			_ = f.Close()
		}
		if code, msg, ok := notRunnable(c.Argv[0], err); ok {
			s.endUnstarted(id, code, msg)
			return
		}
		s.fail(id, "start: "+err.Error())
		return
	}
	_ = outW.Close()
	_ = errW.Close()
	pid := cmd.Process.Pid
	preferVictim(pid)
	s.mu.Lock()
	s.cmds[id] = &command{pid: pid, stdin: queue}
	s.mu.Unlock()
	if queue != nil {
		go func() {
			defer stdin.Close()
			for b := range queue {
				if len(b) == 0 {
					return
				}
				if _, err := stdin.Write(b); err != nil {
					return
				}
			}
		}()
	}
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(pid))
	_ = s.w.write(Frame{Type: TypeStarted, ID: id, Payload: p[:]})

	var pumps sync.WaitGroup
	for _, o := range []struct {
		r *os.File
		t Type
	}{{outR, TypeStdout}, {errR, TypeStderr}} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			s.pump(id, o.r, o.t)
		}()
	}
	go func() {
		st, _ := cmd.Process.Wait()
		drained := make(chan struct{})
		go func() { pumps.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(outputDrain):
			// A background child holds the output: its end is not the
			// command's. Closing the read ends stops the pumps.
			_ = outR.Close()
			_ = errR.Close()
			<-drained
		}
		ex := exitOf(st)
		s.mu.Lock()
		if c := s.cmds[id]; c != nil && c.stdin != nil {
			close(c.stdin)
		}
		delete(s.cmds, id)
		s.mu.Unlock()
		b, _ := json.Marshal(ex)
		_ = s.w.write(Frame{Type: TypeExit, ID: id, Payload: b})
	}()
}

// pump frames what r gives as t frames of command id.
func (s *server) pump(id uint32, r *os.File, t Type) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if s.w.write(Frame{Type: t, ID: id, Payload: buf[:n]}) != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// preferVictim makes the OOM killer take the command (and what it
// starts, which inherits the setting) before the agent: the agent's
// binary is charged to the sandbox's memory, and a sandbox out of memory
// should lose the command that filled it, not the agent that reports its
// end. Raising one's score needs no privilege. A command that runs out of
// memory in the instant before is the exception.
func preferVictim(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)
}

func exitOf(st *os.ProcessState) Exit {
	if st == nil {
		return Exit{Code: -1}
	}
	ex := Exit{Code: st.ExitCode(), UserMS: st.UserTime().Milliseconds(), SystemMS: st.SystemTime().Milliseconds()}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Code, ex.Signal = 128+int(ws.Signal()), int(ws.Signal())
	}
	return ex
}

// signalCommand sends sig to the command's process group and to every
// process descended from it (one that made a group or a session of its
// own included), as far as /proc shows them now.
func signalCommand(pid int, sig syscall.Signal) {
	// Listed first: a process whose parent dies is moved under the init
	// and would no longer be found.
	tree := descendants(pid)
	_ = syscall.Kill(-pid, sig)
	for _, p := range tree {
		_ = syscall.Kill(p, sig)
	}
}

// descendants lists the processes under pid, read from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		p, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		// The parent is the second field after the command's name, which
		// is in parentheses and may hold anything.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 && len(out) < 1<<16 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// killAll kills every command's process group: a refused frame ends the
// agent, and nothing it started outlives it unrecorded.
func (s *server) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cmds {
		signalCommand(c.pid, syscall.SIGKILL)
	}
}

// lookPath finds name in the PATH of env (not the agent's own), as a
// docker exec with that environment would.
func lookPath(name string, env []string) (string, bool) {
	for _, r := range name {
		if r == '/' {
			return "", false
		}
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			path = kv[5:]
		}
	}
	start := 0
	for i := 0; i <= len(path); i++ {
		if i < len(path) && path[i] != ':' {
			continue
		}
		dir := path[start:i]
		start = i + 1
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}
