package cli

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// serveGCPercent is the garbage collector's target for `sandgate serve`
// when GOGC is not set. The gateway's live heap is small (tens of MB) and
// every request allocates in the policy evaluation, the JSON codecs and the
// audit writer, so Go's default of 100 spends a sixth of the CPU on
// collection and a policy decision that overlaps a collection takes
// several times as long. At 400, measured interleaved with 200 under wrk
// (docs/benchmarks.md), a review cost about a tenth less server CPU and its
// p99 fell from 19.5 to 17.9 ms, for a peak RSS of 91-146 MiB instead of
// 75-89; a policy decision's p99 fell from 390 to 209 µs.
const serveGCPercent = 400

// serveMemoryRatio is the share of a cgroup's memory limit (a container's
// or a systemd unit's) that becomes the Go runtime's soft memory limit, so
// that the higher GC target gives way to collection instead of to the OOM
// killer as the heap nears it.
const serveMemoryRatio = 0.9

// tuneGC applies serveGCPercent unless the operator chose a GOGC, and sets
// the soft memory limit from the cgroup's unless GOMEMLIMIT is set (or
// AUTOMEMLIMIT=off). It looks at the process environment, not the app's
// getenv, because that is what the Go runtime itself reads them from.
func tuneGC(logger *slog.Logger) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
	limit, err := memlimit.Set(
		memlimit.WithRatio(serveMemoryRatio),
		memlimit.WithProvider(memlimit.FromCgroup),
		memlimit.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		logger.Warn("could not read the cgroup's memory limit; no soft memory limit set", "error", err)
		return
	}
	if limit > 0 && limit < 1<<62 {
		logger.Info("soft memory limit set from the cgroup", "gomemlimit_bytes", limit)
	}
}
