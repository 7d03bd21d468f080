package policies

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate"
)

// The evaluator's child: any binary that links this package (sandgate,
// or a test binary that starts a gateway in-process) is one when
// re-executed by an Evaluator, so that the child is always the code of
// its parent and a test binary never runs its tests instead.
func init() {
	if len(os.Args) == 4 && os.Args[1] == EvaluatorCommand && os.Getenv(evaluatorMarker) == "1" {
		os.Exit(serveEvaluator(os.Args[2], os.Args[3], os.Stdin, os.Stdout, os.Stderr))
	}
}

// serveEvaluator sets the child's limits (memory in MiB and CPU seconds,
// as its arguments give them), says so, then answers requests one at a
// time until its input ends.
func serveEvaluator(memoryArg, cpuArg string, in io.Reader, out io.Writer, stderr io.Writer) int {
	w := bufio.NewWriter(out)
	hello, err := limitSelf(memoryArg, cpuArg)
	if err != nil {
		fmt.Fprintln(stderr, "policy evaluator:", err)
		hello.Error = &evalError{Code: sandgate.CodeUnavailable, Message: err.Error()}
	}
	if werr := writeFrame(w, hello); werr != nil || err != nil {
		return 1
	}
	s := &evalServer{}
	for {
		var req evalRequest
		if err := readFrame(in, maxEvalRequest, "a request", &req); err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintln(stderr, "policy evaluator:", err)
			return 1
		}
		if err := writeFrame(w, s.handle(req)); err != nil {
			fmt.Fprintln(stderr, "policy evaluator:", err)
			return 1
		}
	}
}

// limitSelf sets the process's limits: its address space may grow by the
// memory limit beyond what it has mapped now (the Go runtime reserves
// hundreds of MiB of address space at start that it never touches), and
// it may use the CPU limit in all. At the CPU limit the kernel sends
// SIGXCPU, on which the child exits with exitCPULimit, and SIGKILL two
// seconds later whatever it does. No core file is written.
func limitSelf(memoryArg, cpuArg string) (evalResponse, error) {
	memoryMB, err1 := strconv.ParseInt(memoryArg, 10, 64)
	cpu, err2 := strconv.ParseUint(cpuArg, 10, 64)
	if err1 != nil || err2 != nil || memoryMB <= 0 || cpu == 0 {
		return evalResponse{}, fmt.Errorf("limits %q %q: want MiB and seconds, both positive", memoryArg, cpuArg)
	}
	mapped, err := mappedBytes()
	if err != nil {
		return evalResponse{}, err
	}
	xcpu := make(chan os.Signal, 1)
	signal.Notify(xcpu, syscall.SIGXCPU)
	go func() {
		<-xcpu
		os.Exit(exitCPULimit)
	}()
	as := mapped + uint64(memoryMB)<<20
	for _, l := range []struct {
		resource int
		what     string
		lim      syscall.Rlimit
	}{
		{syscall.RLIMIT_CORE, "core", syscall.Rlimit{}},
		{syscall.RLIMIT_CPU, "cpu", syscall.Rlimit{Cur: cpu, Max: cpu + 2}},
		{syscall.RLIMIT_AS, "address space", syscall.Rlimit{Cur: as, Max: as}},
	} {
		if err := syscall.Setrlimit(l.resource, &l.lim); err != nil {
			return evalResponse{}, fmt.Errorf("set the %s limit: %w", l.what, err)
		}
	}
	testTimeout = max(testTimeout, 4*time.Duration(cpu)*time.Second)
	return evalResponse{MemoryBytes: uint64(memoryMB) << 20, CPUSeconds: cpu}, nil
}

// mappedBytes is the process's address space now (VmSize).
func mappedBytes() (uint64, error) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read the process's size: %w", err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("the process's size %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmSize in /proc/self/status")
}

// writeFrame writes v as one message and flushes it.
func writeFrame(w *bufio.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(body)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	return w.Flush()
}

// evalServer is the child's state: the bundle it loaded, and the time and
// decision ID of the decision being made, which the parent chooses.
type evalServer struct {
	cand *Candidate
	now  time.Time
	id   string
}

func (s *evalServer) handle(req evalRequest) (resp evalResponse) {
	defer func() {
		if r := recover(); r != nil {
			resp = evalResponse{Error: &evalError{Code: sandgate.CodeUnavailable, Message: fmt.Sprintf("the policy evaluator failed: %v", r)}}
		}
	}()
	switch req.Op {
	case "load":
		return s.load(req)
	case "decide":
		if s.cand == nil || req.Input == nil {
			return evalResponse{Error: &evalError{Code: sandgate.CodeUnavailable, Message: "the policy evaluator has no bundle to decide with"}}
		}
		s.now, s.id = req.Now, req.DecisionID
		d, err := s.cand.Decide(context.Background(), *req.Input)
		if err != nil {
			return evalResponse{Error: toEvalError(err)}
		}
		return evalResponse{Decision: &d, Enforcement: toEvalEnforcement(d.Enforcement)}
	}
	return evalResponse{Error: &evalError{Code: sandgate.CodeUnavailable, Message: fmt.Sprintf("the policy evaluator has no operation %q", req.Op)}}
}

// load parses, compiles, tests and prepares the files as a candidate.
func (s *evalServer) load(req evalRequest) evalResponse {
	list := make([]bundleFile, 0, len(req.Files))
	for _, f := range req.Files {
		list = append(list, bundleFile{name: f.Name, data: f.Data})
	}
	b, err := parseBundle(req.Source, list)
	if err != nil {
		return evalResponse{Error: toEvalError(invalid(req.Source, err))}
	}
	c, err := newCandidate(context.Background(), req.Source, b)
	if err != nil {
		return evalResponse{Error: toEvalError(err)}
	}
	c.e.clock = func() time.Time { return s.now }
	c.e.ids = func() string { return s.id }
	s.cand = c
	return evalResponse{Revision: c.Revision(), Mask: c.Mask(), Modules: c.Modules()}
}

func toEvalError(err error) *evalError {
	e := &evalError{Code: sandgate.ErrorCodeOf(err), Message: sandgate.ErrorMessageOf(err)}
	if errs, ok := IsPolicyInvalid(err); ok {
		e.Errors = errs
	}
	if e.Code == "" {
		e.Code = sandgate.CodeUnavailable
	}
	return e
}
