// Command coverage prints the statement coverage of each package from a
// Go cover profile, as make test (and so CI) writes it: every test binary
// instruments every package of the module (-coverpkg=./...), so a
// package's figure counts the statements any test reached, the end-to-end
// tests' included. A block that appears in several test binaries' parts of
// the profile is covered when any of them reached it.
//
//	go run ./deploy/coverage -profile cover.out -goal 80
//
// It prints one line per package, lowest first, marking those under the
// goal, then the module's total. It does not fail for a package under the
// goal: the figure is reported, not enforced. Standard library only.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
)

// block is one profile line's block: file and position.
type block struct {
	file, pos string
}

// packageCoverage is a package's statements and those reached.
type packageCoverage struct {
	name             string
	statements, done int
}

func (p packageCoverage) percent() float64 {
	if p.statements == 0 {
		return 100
	}
	return 100 * float64(p.done) / float64(p.statements)
}

// parse reads a cover profile and returns each package's coverage.
func parse(r io.Reader) ([]packageCoverage, error) {
	stmts := map[block]int{}
	hit := map[block]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "mode:") {
			continue
		}
		// file.go:12.34,15.2 3 1
		colon := strings.LastIndexByte(line, ':')
		f := strings.Fields(line[colon+1:])
		if colon < 0 || len(f) != 3 {
			return nil, fmt.Errorf("line %d: not a cover profile line: %q", n, line)
		}
		s, err1 := strconv.Atoi(f[1])
		c, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("line %d: bad counts: %q", n, line)
		}
		b := block{line[:colon], f[0]}
		stmts[b] = s
		hit[b] = hit[b] || c > 0
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	by := map[string]*packageCoverage{}
	for b, s := range stmts {
		pkg := path.Dir(b.file)
		p := by[pkg]
		if p == nil {
			p = &packageCoverage{name: pkg}
			by[pkg] = p
		}
		p.statements += s
		if hit[b] {
			p.done += s
		}
	}
	out := make([]packageCoverage, 0, len(by))
	for _, p := range by {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].percent() != out[j].percent() {
			return out[i].percent() < out[j].percent()
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// report writes the table.
func report(w io.Writer, pkgs []packageCoverage, goal float64) {
	var total packageCoverage
	under := 0
	fmt.Fprintf(w, "statement coverage per package (goal %.0f %%):\n", goal)
	for _, p := range pkgs {
		mark := ""
		if p.percent() < goal {
			mark = "  < goal"
			under++
		}
		fmt.Fprintf(w, "  %6.1f %%  %6d statements  %s%s\n", p.percent(), p.statements, p.name, mark)
		total.statements += p.statements
		total.done += p.done
	}
	fmt.Fprintf(w, "  %6.1f %%  %6d statements  total; %d of %d packages under the goal\n", total.percent(), total.statements, under, len(pkgs))
}

func main() {
	profile := flag.String("profile", "cover.out", "the cover profile")
	goal := flag.Float64("goal", 80, "the goal, in percent")
	flag.Parse()
	f, err := os.Open(*profile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coverage:", err)
		os.Exit(1)
	}
	defer f.Close()
	pkgs, err := parse(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coverage:", err)
		os.Exit(1)
	}
	report(os.Stdout, pkgs, *goal)
}
