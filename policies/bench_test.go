//go:build unix

package policies_test

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// benchEvaluations is how many decisions each benchmark times, whatever
// b.N is, so that `make bench` (-benchtime 1x) still yields percentiles.
const benchEvaluations = 20000

// serveGCPercent is the garbage collector's target of `sandgate serve`
// (serveGCPercent in cmd/sandgate/gc.go), which the benchmarks use too,
// unless GOGC is set, as serve does: collections are what a decision's
// tail is made of.
const serveGCPercent = 400

// BenchmarkDecideAllowed times decisions for a spec every rule admits.
func BenchmarkDecideAllowed(b *testing.B) {
	benchmarkDecide(b, allowedBenchSpec(b), true)
}

// BenchmarkDecideManyViolations times decisions for a spec that breaks
// most rules at once.
func BenchmarkDecideManyViolations(b *testing.B) {
	benchmarkDecide(b, violatingBenchSpec(b), false)
}

// BenchmarkDecideManyElements times decisions for a spec whose lists
// hold a hundred elements at fault each (capabilities, devices, ports).
func BenchmarkDecideManyElements(b *testing.B) {
	s := allowedBenchSpec(b)
	for i := range 100 {
		n := strconv.Itoa(i)
		s.CapAdd = append(s.CapAdd, "SYS_ADMIN_"+n)
		s.Devices = append(s.Devices, "/dev/d"+n)
		s.Ports = append(s.Ports, n)
	}
	benchmarkDecide(b, s, false)
}

// BenchmarkOPAFloor times OPA's cheapest prepared query ("true") on this
// machine: the fixed cost every decision pays, to read the figures above
// against. Like the engine, it passes an external cancel, which spares
// OPA's watcher goroutine per evaluation.
func BenchmarkOPAFloor(b *testing.B) {
	ctx := context.Background()
	pq, err := rego.New(rego.Query("true")).PrepareForEval(ctx)
	if err != nil {
		b.Fatal(err)
	}
	input := ast.NewObject()
	cancel := rego.EvalExternalCancel(topdown.NewCancel())
	eval := func() {
		if _, err := pq.Eval(ctx, rego.EvalParsedInput(input), cancel); err != nil {
			b.Fatal(err)
		}
	}
	timeEvaluations(b, eval)
}

func benchmarkDecide(b *testing.B, spec sandgate.Normalized, wantAllow bool) {
	b.Helper()
	ctx := context.Background()
	e, err := policies.New(ctx, policies.Options{
		Settings: sandgate.Settings{MountRoots: []string{b.TempDir()}},
		IDs:      func() string { return "bench" },
	})
	if err != nil {
		b.Fatal(err)
	}
	in := sandgate.AdmissionInput{
		Operation: sandgate.OperationRun,
		Principal: sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}},
		Request:   spec,
	}
	d, _ := e.Decide(ctx, in)
	if d.Allow != wantAllow {
		b.Fatalf("allow = %v, want %v: %+v", d.Allow, wantAllow, d.Violations)
	}
	timeEvaluations(b, func() { _, _ = e.Decide(ctx, in) })
	b.ReportMetric(float64(len(d.Violations)), "violations")
}

// timeEvaluations runs eval benchEvaluations times (after a warm-up) and
// reports the percentiles of wall and thread CPU time, and what one
// evaluation allocates.
func timeEvaluations(b *testing.B, eval func()) {
	b.Helper()
	if _, set := os.LookupEnv("GOGC"); !set {
		defer debug.SetGCPercent(debug.SetGCPercent(serveGCPercent))
	}
	for range 500 {
		eval()
	}
	// Wall time is what a caller waits; the thread's CPU time is what a
	// decision costs, whatever else the machine is running.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	wall := make([]time.Duration, benchEvaluations)
	cpu := make([]time.Duration, benchEvaluations)
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	evaluations := 0
	b.ResetTimer()
	for b.Loop() {
		for i := range wall {
			c0 := threadCPU(b)
			start := time.Now()
			eval()
			wall[i] = time.Since(start)
			cpu[i] = threadCPU(b) - c0
		}
		evaluations += len(wall)
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(evaluations), "allocs/decision")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(evaluations), "B/decision")
	b.ReportMetric(float64(after.NumGC-before.NumGC), "GCs")
	report := func(lat []time.Duration, prefix string) {
		slices.Sort(lat)
		pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
		b.ReportMetric(pct(0.50), prefix+"p50-µs")
		b.ReportMetric(pct(0.99), prefix+"p99-µs")
	}
	report(wall, "")
	report(cpu, "cpu-")
}

func allowedBenchSpec(b *testing.B) sandgate.Normalized {
	s, err := sandgate.Normalize(sandgate.RunSpec{
		Command: []string{"sh", "-c", "echo hello"},
		Env:     map[string]string{"A": "1", "B": "2"},
		Labels:  map[string]string{"ticket": "ENG-1"},
		Network: "bridge",
		CapAdd:  []string{"NET_BIND_SERVICE"},
		Volumes: []sandgate.Volume{{Name: "npm-cache", Target: "/cache"}},
	}, sandgate.BuiltinDefaults)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func violatingBenchSpec(b *testing.B) sandgate.Normalized {
	f := false
	s, err := sandgate.Normalize(sandgate.RunSpec{
		Image:          "evil.example/miner:latest",
		Command:        []string{"sh"},
		User:           "0:0",
		Mounts:         []sandgate.Mount{{Source: "/etc", Target: "/host-etc"}, {Source: "/", Target: "/host"}},
		Volumes:        []sandgate.Volume{{Name: "/var/lib", Target: "/v"}},
		Network:        "host",
		Resources:      sandgate.Resources{MemoryMB: 1 << 20, CPUs: 64, Pids: 1 << 20},
		TimeoutSeconds: 1 << 20,
		Privileged:     true,
		CapAdd:         []string{"ALL", "SYS_ADMIN"},
		Devices:        []string{"/dev/kmsg"},
		Sysctls:        map[string]string{"kernel.core_pattern": "x"},
		PIDMode:        "host", IPCMode: "host", UTSMode: "host", UsernsMode: "host",
		SecurityOpt:    []string{"seccomp=unconfined", "apparmor:unconfined", "no-new-privileges=false", "label=disable"},
		ReadOnlyRootfs: &f,
		Ports:          []string{"80:80"},
	}, sandgate.BuiltinDefaults)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// threadCPU is the CPU time the calling OS thread has used.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}
