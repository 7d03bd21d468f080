package proof

import (
	"encoding/json"
	"sync"
	"testing"
	"time"
)

// TestForkJoinSameReport: chains checked on forks, each on a goroutine of
// its own, and joined in chain order give the report that one verifier
// reading the chains in turn gives: the same problems in the same order,
// the same count, the list cut at the same place.
func TestForkJoinSameReport(t *testing.T) {
	at := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		chains []string
		rows   int
		tamper func(chain int, rows []*Row) []*Row
	}{
		{"clean", []string{"a", "b", "c", "d"}, 200, func(int, []*Row) []*Row { return nil }},
		{"tampered", []string{"a", "b", "c", "d", "e"}, 200, func(i int, rows []*Row) []*Row {
			rows[10+i].Body = append([]byte(nil), rows[10+i].Body...)
			rows[10+i].Body[5] ^= 1                      // hash and body
			rows[50+i].Event.Actor = "mallory"           // a column
			rows[90+i].PrevHash = rows[80+i].Hash        // a link
			return append(rows[:120+i], rows[125+i:]...) // a gap
		}},
		{"cut", []string{"a", "b"}, 6_000, func(_ int, rows []*Row) []*Row {
			for _, r := range rows {
				r.Event.Actor = "mallory"
			}
			return rows
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trail := func() map[string][]*Row {
				m := map[string][]*Row{}
				for i, c := range tc.chains {
					rows := lifecycleRows(t, c, tc.rows)
					if r := tc.tamper(i, rows); r != nil {
						rows = r
					}
					m[c] = rows
				}
				return m
			}
			newV := func() *Verifier { return NewOnlineVerifier(Anchors{}, nil, nil, at, at, time.Minute) }

			one := newV()
			rowsOf := trail()
			for _, c := range tc.chains {
				one.Checkpoints(c, nil)
			}
			for _, c := range tc.chains {
				for _, r := range rowsOf[c] {
					one.Row(r)
				}
			}
			want := one.Finish(at)

			par := newV()
			rowsOf = trail()
			for _, c := range tc.chains {
				par.Checkpoints(c, nil)
			}
			forks := make([]*Verifier, len(tc.chains))
			for i, c := range tc.chains {
				forks[i] = par.Fork(c)
			}
			var wg sync.WaitGroup
			for i, c := range tc.chains {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, r := range rowsOf[c] {
						forks[i].Row(r)
					}
				}()
			}
			wg.Wait()
			for _, f := range forks {
				par.Join(f)
			}
			got := par.Finish(at)

			w, _ := json.Marshal(want)
			g, _ := json.Marshal(got)
			if string(w) != string(g) {
				t.Fatalf("forked report differs:\n got %s\nwant %s", g, w)
			}
			if tc.name != "clean" && len(want.Problems) < len(tc.chains) {
				t.Fatalf("want problems from every chain, got %+v", want.Problems)
			}
			if tc.name == "cut" && want.Problems[len(want.Problems)-1].Kind != ProblemTooMany {
				t.Fatalf("the list was not cut: %d problems", len(want.Problems))
			}
		})
	}
}
