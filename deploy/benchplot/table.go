package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// goal is a metric's goal from issue #35: at most (or, atLeast, at
// least) limit, at every size or only at the largest.
type goal struct {
	limit     float64
	atLeast   bool
	onlyLast  bool
	statement string
}

// goals are the scale benchmarks' goals, by benchmark and metric.
var goals = map[string]map[string]goal{
	"BenchmarkScaleRunStore": {
		"list-p99-ms": {limit: 50, statement: "list p99 ≤ 50 ms"},
		"get-p99-ms":  {limit: 5, statement: "get p99 ≤ 5 ms"},
	},
	"BenchmarkScaleTrail": {
		"corr-p99-ms":     {limit: 20, statement: "by correlation p99 ≤ 20 ms"},
		"run-p99-ms":      {limit: 20, statement: "by run p99 ≤ 20 ms"},
		"proof-p99-ms":    {limit: 5, statement: "inclusion proof p99 ≤ 5 ms"},
		"export-events/s": {limit: 100_000, atLeast: true, statement: "export ≥ 100k events/s"},
		"verify-events/s": {limit: 200_000, atLeast: true, statement: "online verify ≥ 200k events/s"},
	},
	"BenchmarkScaleSessions": {
		"MiB/session":    {limit: 16, statement: "≤ 16 MiB per idle session"},
		"command-p50-ms": {limit: 15, onlyLast: true, statement: "command p50 ≤ 15 ms at the largest size"},
	},
	"BenchmarkScaleFollowers": {
		"gateway-rss-MiB":   {limit: 1024, statement: "gateway RSS ≤ 1 GiB"},
		"line-delay-p99-ms": {limit: 50, statement: "line delay p99 ≤ 50 ms"},
	},
}

// benchOrder is the order of the tables.
var benchOrder = []string{"BenchmarkScaleRunStore", "BenchmarkScaleTrail", "BenchmarkScaleSessions",
	"BenchmarkScaleFollowers", "BenchmarkScaleSubmissionDB"}

// met reports whether v meets g.
func (g goal) met(v float64) bool {
	if g.atLeast {
		return v >= g.limit
	}
	return v <= g.limit
}

// table renders the results as Markdown: per benchmark, one row per
// metric and one column per size (medians), a value that misses its
// goal marked "✗", and the goal in the last column.
func table(res results) string {
	var b strings.Builder
	b.WriteString("<!-- Written by deploy/benchplot from docs/benchmarks/scale.txt (make bench-scale); do not edit. -->\n")
	for _, bench := range benchOrder {
		metrics := res[bench]
		if len(metrics) == 0 {
			continue
		}
		sizes := map[float64]bool{}
		for _, bySize := range metrics {
			for x := range bySize {
				sizes[x] = true
			}
		}
		xs := slices.Sorted(maps.Keys(sizes))
		fmt.Fprintf(&b, "\n### %s\n\n| metric |", strings.TrimPrefix(bench, "Benchmark"))
		for _, x := range xs {
			fmt.Fprintf(&b, " %s |", strconv.FormatFloat(x, 'f', -1, 64))
		}
		b.WriteString(" goal |\n|---|")
		b.WriteString(strings.Repeat("--:|", len(xs)))
		b.WriteString("---|\n")
		for _, m := range slices.Sorted(maps.Keys(metrics)) {
			if m == "ns/op" {
				continue // the whole benchmark's time, set-up included
			}
			g, hasGoal := goals[bench][m]
			fmt.Fprintf(&b, "| %s |", m)
			for i, x := range xs {
				vs := metrics[m][x]
				if len(vs) == 0 {
					b.WriteString(" |")
					continue
				}
				v := slices.Sorted(slices.Values(vs))[len(vs)/2]
				mark := ""
				if hasGoal && (!g.onlyLast || i == len(xs)-1) && !g.met(v) {
					mark = " ✗"
				}
				fmt.Fprintf(&b, " %s%s |", strconv.FormatFloat(v, 'g', 4, 64), mark)
			}
			if hasGoal {
				fmt.Fprintf(&b, " %s |\n", g.statement)
			} else {
				b.WriteString(" |\n")
			}
		}
	}
	return b.String()
}
