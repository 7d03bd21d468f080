package policies

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate"
)

// A bundle that is not in force (a replay's candidate, or the bundle a
// reload is about to put in force, whose tests run first) is Rego nobody
// has vetted yet, and one builtin call can ask for any amount of memory
// or time: numbers.range(1, 1e9) is one call, which no context stops. So
// such a bundle is loaded, tested and evaluated in a child process, this
// binary re-executed with EvaluatorCommand, under a hard memory limit
// (RLIMIT_AS) and a CPU limit (RLIMIT_CPU) it sets on itself before it
// reads anything (evaluator_child.go). The gateway keeps what it measures:
// the inputs it builds, the decisions the child sends back, bounded.

// EvaluatorCommand is the argument with which the evaluator re-executes
// its binary; with the marker in the environment, this package's init
// serves the parent and exits, before main (or a test binary's TestMain)
// runs.
const EvaluatorCommand = "__sandgate-policy-evaluator"

// evaluatorMarker is the environment variable, set to "1", that marks a
// process as the evaluator's child: the argument alone does not make one.
const evaluatorMarker = "SANDGATE_POLICY_EVALUATOR_CHILD"

// Defaults of EvaluatorLimits.
const (
	DefaultEvaluatorMemoryMB   = 512
	DefaultEvaluatorCPUSeconds = 60
)

const (
	// maxEvalFrame bounds a message of the child's: a candidate's decision
	// is a few KiB; a bigger one is refused before it is read.
	maxEvalFrame = 16 << 20
	// maxEvalRequest bounds a message to the child (a bundle's files).
	maxEvalRequest = 256 << 20
	// exitCPULimit is the child's exit status when it has used its CPU
	// limit (SIGXCPU); the Go runtime exits with 2 when it cannot map
	// memory, and so does a stack grown past its maximum.
	exitCPULimit = 3
	exitRuntime  = 2
	// stderrHead is how much of the child's standard error is kept for
	// the log: the Go runtime's fatal error is its first line.
	stderrHead = 4 << 10
	// evalStopWait is how long a child is given to exit when its input
	// ends before it is killed.
	evalStopWait = 5 * time.Second
)

// EvaluatorLimits bound one evaluator process.
type EvaluatorLimits struct {
	// MemoryMB is the memory the process may map beyond what the Go
	// runtime holds when it starts. Default DefaultEvaluatorMemoryMB.
	MemoryMB int64
	// CPUSeconds is the CPU time the process may use in all, loading and
	// evaluating. Default DefaultEvaluatorCPUSeconds.
	CPUSeconds int64
}

func (l EvaluatorLimits) withDefaults() EvaluatorLimits {
	if l.MemoryMB <= 0 {
		l.MemoryMB = DefaultEvaluatorMemoryMB
	}
	if l.CPUSeconds <= 0 {
		l.CPUSeconds = DefaultEvaluatorCPUSeconds
	}
	return l
}

// Evaluator loads and evaluates bundles that are not in force in child
// processes under limits. The zero Evaluator is not usable: see
// NewEvaluator.
type Evaluator struct {
	binary string
	limits EvaluatorLimits
	log    *slog.Logger
}

// NewEvaluator returns an evaluator that re-executes binary (""; this
// process's own executable) with limits. A binary that cannot be found
// is an error.
func NewEvaluator(binary string, limits EvaluatorLimits, log *slog.Logger) (*Evaluator, error) {
	if binary == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("the policy evaluator: this binary: %w", err)
		}
		binary = self
	}
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("the policy evaluator: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Evaluator{binary: binary, limits: limits.withDefaults(), log: log}, nil
}

// Limits are the limits each evaluator process runs under.
func (ev *Evaluator) Limits() EvaluatorLimits { return ev.limits }

// evalRequest is a message to the child.
type evalRequest struct {
	// Op is "load" (files under source) or "decide" (input, with the
	// evaluation time and decision ID the parent chose).
	Op         string                   `json:"op"`
	Source     string                   `json:"source,omitempty"`
	Files      []evalFile               `json:"files,omitempty"`
	Input      *sandgate.AdmissionInput `json:"input,omitempty"`
	Now        time.Time                `json:"now,omitzero"`
	DecisionID string                   `json:"decision_id,omitempty"`
}

type evalFile struct {
	Name string `json:"name"`
	Data []byte `json:"data"`
}

// evalResponse is the child's answer: its limits (the first message),
// a loaded bundle, a decision, or an error.
type evalResponse struct {
	Error       *evalError              `json:"error,omitempty"`
	MemoryBytes uint64                  `json:"memory_bytes,omitempty"`
	CPUSeconds  uint64                  `json:"cpu_seconds,omitempty"`
	Revision    string                  `json:"revision,omitempty"`
	Mask        []string                `json:"mask,omitempty"`
	Modules     []sandgate.PolicyModule `json:"modules,omitempty"`
	Decision    *sandgate.Decision      `json:"decision,omitempty"`
	Enforcement *evalEnforcement        `json:"enforcement,omitempty"`
}

// evalEnforcement is a decision's enforcement across the pipe, exactly:
// the image signers' map is sent even when empty (the root type omits an
// empty one), so that the parent's decision is the child's.
type evalEnforcement struct {
	sandgate.Enforcement
	ImageSigners map[string][]string `json:"image_signers"`
}

func toEvalEnforcement(e sandgate.Enforcement) *evalEnforcement {
	return &evalEnforcement{Enforcement: e, ImageSigners: e.ImageSigners}
}

func (e *evalEnforcement) enforcement() sandgate.Enforcement {
	out := e.Enforcement
	out.ImageSigners = e.ImageSigners
	return out
}

// evalError is a *sandgate.Error across the pipe: its problems are what
// callers read of a refused bundle.
type evalError struct {
	Code    sandgate.ErrorCode `json:"code"`
	Message string             `json:"message"`
	Errors  []string           `json:"errors,omitempty"`
}

func (e *evalError) err() error {
	se := &sandgate.Error{Code: e.Code, Message: e.Message}
	if e.Errors != nil {
		se.Details = map[string]any{"errors": e.Errors}
	}
	return se
}

// evalProcess is one child: started, asked one thing at a time, and ended
// by Close, by its context, or by its limits.
type evalProcess struct {
	ev     *Evaluator
	ctx    context.Context
	cmd    *exec.Cmd
	in     *os.File
	out    *os.File
	stderr *headBuffer
	done   chan struct{}
	start  time.Time

	mu sync.Mutex
	// ended is the error every call returns once the child has ended.
	ended error
}

// start starts a child and reads the limits it has set on itself. The
// child is killed when ctx ends.
func (ev *Evaluator) start(ctx context.Context) (*evalProcess, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, unavailable(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, unavailable(err)
	}
	cmd := exec.CommandContext(ctx, ev.binary, EvaluatorCommand,
		strconv.FormatInt(ev.limits.MemoryMB, 10), strconv.FormatInt(ev.limits.CPUSeconds, 10))
	// Nothing of the gateway's environment (its database's address, its
	// keys' paths) reaches the child: the marker, one processor, a
	// collector that works hard before the hard limit, and (for a binary
	// built with cgo, as test binaries are) one C heap, not one 64 MiB
	// reservation of address space per thread.
	cmd.Env = []string{evaluatorMarker + "=1", "GOMAXPROCS=1", fmt.Sprintf("GOMEMLIMIT=%dMiB", ev.limits.MemoryMB*3/4), "MALLOC_ARENA_MAX=1"}
	cmd.Stdin, cmd.Stdout = inR, outW
	p := &evalProcess{ev: ev, ctx: ctx, cmd: cmd, in: inW, out: outR, stderr: &headBuffer{max: stderrHead}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.WaitDelay = evalStopWait
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, unavailable(fmt.Errorf("start %s: %w", ev.binary, err))
	}
	p.start = time.Now()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	var hello evalResponse
	if err := p.read(&hello); err != nil {
		err = p.failure(ctx, err)
		p.Close()
		return nil, err
	}
	set := EvaluatorLimits{MemoryMB: int64(hello.MemoryBytes >> 20), CPUSeconds: int64(hello.CPUSeconds)}
	if hello.Error != nil || set != ev.limits {
		p.Close()
		return nil, sandgate.Errorf(sandgate.CodeUnavailable, "the policy evaluator did not set its limits (it reported %+v)", hello)
	}
	return p, nil
}

// call sends req and reads the answer into resp; the child is killed if
// ctx ends first. An error answer is returned as the error it stands for;
// a child that ended is classified (failure), and every later call
// returns the same.
func (p *evalProcess) call(ctx context.Context, req evalRequest, resp *evalResponse) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended != nil {
		return p.ended
	}
	stop := context.AfterFunc(ctx, func() { _ = p.cmd.Process.Kill() })
	err := p.write(req)
	if err == nil {
		err = p.read(resp)
	}
	stop()
	if err != nil {
		p.ended = p.failure(ctx, err)
		return p.ended
	}
	if resp.Error != nil {
		return resp.Error.err()
	}
	return nil
}

func (p *evalProcess) write(req evalRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(body) > maxEvalRequest {
		return &frameTooLarge{size: int64(len(body)), max: maxEvalRequest, what: "the bundle"}
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(body)))
	_, err = p.in.Write(append(n[:], body...))
	return err
}

func (p *evalProcess) read(v any) error {
	return readFrame(p.out, maxEvalFrame, "the candidate's answer", v)
}

// failure is what a broken pipe to the child means: its context ended, it
// used a limit (POLICY-INVALID naming it), it sent too much, or it ended
// for a reason of its own. The child is ended first, so that its status
// says why.
func (p *evalProcess) failure(ctx context.Context, cause error) error {
	var big *frameTooLarge
	if errors.As(cause, &big) {
		p.kill()
		return invalidBy(fmt.Sprintf("%s is %d bytes, more than the %d the evaluator reads", big.what, big.size, big.max), map[string]any{"limit": "size", "max_bytes": big.max})
	}
	select {
	case <-p.done:
	case <-time.After(evalStopWait):
		p.kill()
	}
	if err := cmp.Or(ctx.Err(), p.ctx.Err()); err != nil {
		return sandgate.WrapError(sandgate.CodeUnavailable, err, "the policy evaluation was stopped")
	}
	st := p.cmd.ProcessState
	if st == nil {
		return unavailable(cause)
	}
	lim := p.ev.limits
	ws, _ := st.Sys().(syscall.WaitStatus)
	cpu := st.UserTime() + st.SystemTime()
	switch {
	case st.ExitCode() == exitCPULimit || (ws.Signaled() && cpu >= time.Duration(lim.CPUSeconds)*time.Second):
		return invalidBy(fmt.Sprintf("its evaluation used the policy evaluator's cpu limit of %d s", lim.CPUSeconds),
			map[string]any{"limit": "cpu", "cpu_seconds": lim.CPUSeconds})
	case st.ExitCode() == exitRuntime || (ws.Signaled() && ws.Signal() == syscall.SIGKILL) || outOfMemory(p.stderr.String()):
		p.ev.log.Warn("the policy evaluator ran out of memory", "limit_mb", lim.MemoryMB, "stderr", p.stderr.String())
		return invalidBy(fmt.Sprintf("its evaluation needed more than the policy evaluator's memory limit of %d MiB", lim.MemoryMB),
			map[string]any{"limit": "memory", "memory_mb": lim.MemoryMB})
	}
	p.ev.log.Error("the policy evaluator ended", "status", st.String(), "stderr", p.stderr.String())
	return sandgate.Errorf(sandgate.CodeUnavailable, "the policy evaluator ended unexpectedly (%s)", st)
}

// outOfMemory reports whether the child's standard error says it could
// not map memory: the Go runtime's "out of memory", or, in a binary built
// with -race, the race detector's failed allocation (it exits 66).
func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "ThreadSanitizer failed to allocate")
}

// invalidBy refuses a bundle for a limit: POLICY-INVALID, with the limit
// and its size in the details beside the problem.
func invalidBy(problem string, details map[string]any) error {
	details["errors"] = []string{problem}
	return &sandgate.Error{Code: sandgate.CodePolicyInvalid, Details: details,
		Message: "the policy bundle was refused: " + problem}
}

func unavailable(err error) error {
	return sandgate.WrapError(sandgate.CodeUnavailable, err, "the policy evaluator is unavailable")
}

func (p *evalProcess) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// Close ends the child: its input closes, and it is killed if it has not
// exited within evalStopWait.
func (p *evalProcess) Close() error {
	p.in.Close()
	select {
	case <-p.done:
	case <-time.After(evalStopWait):
		p.kill()
	}
	p.out.Close()
	return nil
}

// frameTooLarge is a message longer than its reader takes.
type frameTooLarge struct {
	size, max int64
	what      string
}

func (e *frameTooLarge) Error() string {
	return fmt.Sprintf("%s is %d bytes, more than %d", e.what, e.size, e.max)
}

// readFrame reads one message (a 4-byte big-endian length, then that many
// bytes of JSON) of at most max bytes into v.
func readFrame(r io.Reader, max int64, what string, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := int64(binary.BigEndian.Uint32(n[:]))
	if size > max {
		return &frameTooLarge{size: size, max: max, what: what}
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}
