// Command benchplot draws the scale benchmarks' curves as SVG from their
// `go test -bench` output: `make bench-scale` runs the benchmarks into
// docs/benchmarks/scale.txt and then
//
//	go run ./deploy/benchplot -in docs/benchmarks/scale.txt -out docs/benchmarks
//
// writes one SVG per chart of the charts table, which docs/benchmarks.md
// shows, and scale.md: every metric by size in a table, a value that
// misses its goal marked (docs/benchmarks.md links it). A benchmark line such as
//
//	BenchmarkScaleRunStore/runs=100000-2  1  123 ns/op  4.5 list-p99-ms  0.8 get-p99-ms
//
// gives, for the chart's x axis, the size after "=" and, for each metric
// a chart names, its value. When the input holds a sub-benchmark more than
// once (runs repeated), the median is drawn. Standard library only.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// series is one line of a chart: a metric of a benchmark.
type series struct {
	metric, label string
}

// chart is one SVG: metrics of one benchmark against its size.
type chart struct {
	file, title, bench, xLabel, yLabel string
	logY                               bool
	lines                              []series
	goal                               float64 // 0: none
	goalLabel                          string
}

// charts are the pictures docs/benchmarks.md shows.
var charts = []chart{
	{file: "runstore.svg", title: "Run store: a team's newest 50 with a filter, and one run by ID", bench: "BenchmarkScaleRunStore",
		xLabel: "runs in the store", yLabel: "ms", logY: true, goal: 50, goalLabel: "list p99 goal 50 ms",
		lines: []series{{"list-p50-ms", "list p50"}, {"list-p99-ms", "list p99"}, {"get-p50-ms", "get p50"}, {"get-p99-ms", "get p99 (goal 5 ms)"}}},
	{file: "trail-queries.svg", title: "Audit trail: queries and inclusion proofs", bench: "BenchmarkScaleTrail",
		xLabel: "events in the trail", yLabel: "ms", logY: true, goal: 20, goalLabel: "query p99 goal 20 ms",
		lines: []series{{"corr-p50-ms", "by correlation p50"}, {"corr-p99-ms", "by correlation p99"}, {"run-p99-ms", "by run p99"},
			{"proof-p50-ms", "inclusion proof p50"}, {"proof-p99-ms", "inclusion proof p99 (goal 5 ms)"}}},
	{file: "trail-rates.svg", title: "Audit trail: export and online verify", bench: "BenchmarkScaleTrail",
		xLabel: "events in the trail", yLabel: "events/s", logY: true, goal: 200_000, goalLabel: "verify goal 200k/s (export 100k/s)",
		lines: []series{{"export-events/s", "export (JSON Lines)"}, {"verify-events/s", "verify"}}},
	{file: "sessions-memory.svg", title: "Idle sessions: host memory per session", bench: "BenchmarkScaleSessions",
		xLabel: "idle sessions on one node", yLabel: "MiB per session", goal: 16, goalLabel: "goal 16 MiB",
		lines: []series{{"MiB/session", "total"}, {"agent-pss-MiB/session", "agent (PSS)"}, {"shim-pss-MiB/session", "shim (PSS)"},
			{"gateway-MiB/session", "gateway (RSS)"}}},
	{file: "sessions-command.svg", title: "Idle sessions: a command at that density", bench: "BenchmarkScaleSessions",
		xLabel: "idle sessions on one node", yLabel: "ms", logY: true, goal: 15, goalLabel: "p50 goal 15 ms",
		lines: []series{{"command-p50-ms", "command p50"}, {"command-p99-ms", "command p99"}}},
	{file: "followers-memory.svg", title: "Live followers: the gateway's memory", bench: "BenchmarkScaleFollowers",
		xLabel: "SSE followers", yLabel: "MiB", logY: true, goal: 1024, goalLabel: "goal 1 GiB",
		lines: []series{{"gateway-rss-MiB", "gateway RSS"}}},
	{file: "followers-delay.svg", title: "Live followers: a line's delay, written to read", bench: "BenchmarkScaleFollowers",
		xLabel: "SSE followers", yLabel: "ms", logY: true, goal: 50, goalLabel: "p99 goal 50 ms",
		lines: []series{{"line-delay-p50-ms", "p50"}, {"line-delay-p99-ms", "p99"}}},
	{file: "submission-db.svg", title: "A submission's database work, share of a warm run", bench: "BenchmarkScaleSubmissionDB",
		xLabel: "submissions at once", yLabel: "% of a warm run", logY: true,
		lines: []series{{"share-of-warm-run-%", "one team"}, {"share-teams-apart-%", "each its own team"}}},
}

// point is one size's value of a metric.
type point struct{ x, y float64 }

// results maps benchmark → metric → size → values.
type results map[string]map[string]map[float64][]float64

var benchLine = regexp.MustCompile(`^(Benchmark\w+)/\w+=(\d+)(?:-\d+)?\s+\d+\s+(.*)$`)

// parse reads go test -bench output.
func parse(r io.Reader) (results, error) {
	res := results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		x, _ := strconv.ParseFloat(m[2], 64)
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: metric %q: %w", m[1], f[i+1], err)
			}
			if res[m[1]] == nil {
				res[m[1]] = map[string]map[float64][]float64{}
			}
			if res[m[1]][f[i+1]] == nil {
				res[m[1]][f[i+1]] = map[float64][]float64{}
			}
			res[m[1]][f[i+1]][x] = append(res[m[1]][f[i+1]][x], v)
		}
	}
	return res, sc.Err()
}

// points returns the medians of a metric by size, in order of size.
func (r results) points(bench, metric string) []point {
	var out []point
	for x, vs := range r[bench][metric] {
		s := slices.Sorted(slices.Values(vs))
		out = append(out, point{x, s[len(s)/2]})
	}
	slices.SortFunc(out, func(a, b point) int { return int(math.Copysign(1, a.x-b.x)) })
	return out
}

func main() {
	in := flag.String("in", "docs/benchmarks/scale.txt", "go test -bench output")
	out := flag.String("out", "docs/benchmarks", "directory for the SVG files and scale.md")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	res, err := parse(f)
	if err != nil {
		return err
	}
	for _, c := range charts {
		svg, ok := c.render(res)
		if !ok {
			fmt.Fprintf(os.Stderr, "benchplot: no %s results for %s\n", c.bench, c.file)
			continue
		}
		if err := os.WriteFile(filepath.Join(out, c.file), []byte(svg), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(out, c.file))
	}
	if err := os.WriteFile(filepath.Join(out, "scale.md"), []byte(table(res)), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", filepath.Join(out, "scale.md"))
	return nil
}
