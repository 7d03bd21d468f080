package sandgatetest

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// ScaleEnv is the environment variable that chooses the scale
// benchmarks' sizes: "full" (make bench-scale) measures every size of a
// curve; anything else (make bench) only the smallest ones, the short
// form.
const ScaleEnv = "SANDGATE_BENCH_SCALE"

// ScaleSizes returns the sizes a scale benchmark measures: full when
// SANDGATE_BENCH_SCALE is "full", short otherwise. A comma-separated list
// in the variable named by override (such as SANDGATE_BENCH_RUNS=10000,50000)
// replaces both, for one benchmark run by hand.
func ScaleSizes(override string, short, full []int) []int {
	if v := os.Getenv(override); v != "" {
		var out []int
		for _, f := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
				out = append(out, n)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	if os.Getenv(ScaleEnv) == "full" {
		return full
	}
	return short
}

// Millis is d in milliseconds, as benchmarks report latencies.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
