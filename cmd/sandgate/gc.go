package main

import (
	"os"
	"runtime/debug"
)

// serveGCPercent is the garbage collector's target for `sandgate serve`
// when GOGC is not set. The gateway's live heap is small (tens of MB) and
// every request allocates in the policy evaluation, the JSON codecs and the
// audit writer, so Go's default of 100 spends a sixth of the CPU on
// collection under load. 200 measured about a fifth less server CPU per
// POST /v1/admission/review under wrk than 100 (docs/benchmarks.md), for
// a peak heap about twice as large.
const serveGCPercent = 200

// tuneGC applies serveGCPercent unless the operator chose a GOGC. It looks
// at the process environment, not the app's getenv, because that is what
// the Go runtime itself reads GOGC from.
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
}
