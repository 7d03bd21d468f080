package runstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The run store at scale: a year of a large enterprise's runs, bulk-loaded
// with COPY, and the two reads the API makes of it most, a team's newest
// page with a filter and one run by ID. make bench-scale measures 10k,
// 100k and 1M runs (SANDGATE_BENCH_SCALE=full); make bench the first.

// scaleTeams is how many teams the runs belong to; their sizes follow a
// Zipf law, so the largest team holds about a fifth of all runs.
const scaleTeams = 200

// scaleOutcomes is the share (per mille) of each outcome among finished
// runs: most succeed, some fail, a few time out, run out of memory, are
// cancelled, fail to start or are lost.
var scaleOutcomes = []struct {
	outcome  sandgate.Outcome
	perMille int
}{
	{sandgate.OutcomeSucceeded, 850}, {sandgate.OutcomeFailed, 100}, {sandgate.OutcomeCancelled, 20},
	{sandgate.OutcomeTimedOut, 10}, {sandgate.OutcomeError, 10}, {sandgate.OutcomeOOMKilled, 5}, {sandgate.OutcomeLost, 5},
}

// runGen makes runs as a gateway stores them: created over the year before
// now, a Zipf-distributed team, an outcome from scaleOutcomes, the newest
// per mille still running, a session and task for a third of them.
type runGen struct {
	rnd  *rand.Rand
	zipf *rand.Zipf
	now  time.Time
	tmpl *runRow
	n    int // runs made so far
}

func newRunGen(seed uint64) (*runGen, error) {
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	exit := 0
	started := time.Now()
	finished := started.Add(300 * time.Millisecond)
	tmpl, err := toRow(&sandgate.Run{
		ID: "tmpl", Principal: "ci-bot", Team: "team-0", State: sandgate.StateFinished, Outcome: sandgate.OutcomeSucceeded,
		ExitCode: &exit, StartedAt: &started, FinishedAt: &finished, DurationMS: 300, PolicyRevision: "sha256:" + fmt.Sprintf("%064x", 7),
		Stdout: sandgate.Output{Data: "ok 42 tests passed\n", Encoding: "utf-8", Bytes: 19},
		Spec: sandgate.RunSpec{Image: "sandgate/sandbox:latest", Command: []string{"sh", "-c", "make test"},
			Env: map[string]string{"CI": "true"}, Labels: map[string]string{"ticket": "ENG-1"}},
		Usage: &sandgate.Usage{CPUMS: ptr[int64](120), MemoryPeakBytes: ptr[int64](12 << 20), PidsPeak: ptr[int64](4), WallMS: 300},
	})
	if err != nil {
		return nil, err
	}
	return &runGen{rnd: rnd, zipf: rand.NewZipf(rnd, 1.1, 1, scaleTeams-1), now: time.Now().UTC().Truncate(time.Microsecond), tmpl: tmpl}, nil
}

// v7 is a UUIDv7 for t, as the gateway gives a run at its creation.
func (g *runGen) v7(t time.Time) string {
	var u [16]byte
	binary.BigEndian.PutUint64(u[:8], uint64(t.UnixMilli())<<16|g.rnd.Uint64()&0xfff)
	binary.BigEndian.PutUint64(u[8:], g.rnd.Uint64())
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}

func ptr[T any](v T) *T { return &v }

// team is the name of team i (team-0 the largest).
func team(i uint64) string { return fmt.Sprintf("team-%d", i) }

// row makes the next run: the k-th of total, created k/total of the way
// through the year, so that the newest runs are the last loaded.
func (g *runGen) row(k, total int) []any {
	created := g.now.Add(-365 * 24 * time.Hour).Add(time.Duration(float64(365*24*time.Hour) * float64(k) / float64(total)))
	created = created.Add(time.Duration(g.rnd.IntN(1000)) * time.Microsecond)
	id := g.v7(created)
	r := *g.tmpl
	r.ID, r.CorrelationID, r.DecisionID = id, id, g.v7(created)
	r.Team = team(g.zipf.Uint64())
	r.Principal = r.Team + "-ci"
	r.Node = fmt.Sprintf("node-%d", g.rnd.IntN(4))
	r.CreatedAt, r.UpdatedAt = created, created
	if total-k <= total/1000 {
		r.State, r.Outcome, r.ExitCode, r.FinishedAt, r.DurationMS = string(sandgate.StateRunning), "", nil, nil, 0
	} else {
		x := g.rnd.IntN(1000)
		for _, o := range scaleOutcomes {
			if x < o.perMille {
				r.Outcome = string(o.outcome)
				break
			}
			x -= o.perMille
		}
		if r.Outcome != string(sandgate.OutcomeSucceeded) {
			code := 1 + g.rnd.IntN(2)
			r.ExitCode = &code
		}
	}
	if g.rnd.IntN(3) == 0 {
		r.SessionID, r.TaskID = fmt.Sprintf("s-%d", g.rnd.IntN(5000)), fmt.Sprintf("t-%d", g.rnd.IntN(50000))
	}
	g.n++
	return []any{r.ID, r.CorrelationID, r.DecisionID, r.PolicyRevision, r.Principal, r.Team, r.Node, r.State, r.Outcome,
		r.ExitCode, r.OOMKilled, r.SessionID, r.TaskID, r.CreatedAt, r.StartedAt, r.FinishedAt, r.UpdatedAt, r.DurationMS,
		r.Stdout, r.Stderr, r.StdoutData, r.Spec, r.Warnings, r.Usage}
}

var scaleRunColumns = []string{"id", "correlation_id", "decision_id", "policy_revision", "principal", "team", "node", "state",
	"outcome", "exit_code", "oom_killed", "session_id", "task_id", "created_at", "started_at", "finished_at", "updated_at",
	"duration_ms", "stdout", "stderr", "stdout_data", "spec", "warnings", "usage"}

// loadRuns grows the runs table to total rows with COPY, in batches, and
// analyses it (as autovacuum would soon after).
func (g *runGen) loadRuns(b *testing.B, db *sql.DB, total int) {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	from := g.n
	err = conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		const batch = 50_000
		for g.n < total {
			rows := make([][]any, 0, batch)
			for range min(batch, total-g.n) {
				rows = append(rows, g.row(g.n, total))
			}
			if _, err := pc.CopyFrom(ctx, pgx.Identifier{"runs"}, scaleRunColumns, pgx.CopyFromRows(rows)); err != nil {
				return err
			}
		}
		_, err := pc.Exec(ctx, "ANALYZE runs")
		return err
	})
	if err != nil {
		b.Fatalf("load runs: %v", err)
	}
	b.Logf("loaded %d runs in %v", total-from, time.Since(start).Round(time.Millisecond))
}

// BenchmarkScaleRunStore measures, at each size, the p50 and p99 of
// ListRuns for a team's newest 50 runs with a filter (the outcome failed,
// the rarer timed_out, or the state running; the largest team or a random
// one; the first page, or the next through its cursor) and of GetRun by
// ID, 600 of each. The runs are generated as if stored over a year
// (runGen) and the sizes grow in one database. Goals at 1M: list p99 ≤ 50
// ms, get p99 ≤ 5 ms. SANDGATE_BENCH_RUNS lists sizes by hand.
func BenchmarkScaleRunStore(b *testing.B) {
	sizes := sandgatetest.ScaleSizes("SANDGATE_BENCH_RUNS", []int{10_000}, []int{10_000, 100_000, 1_000_000})
	dsn := audittest.NewMigratedDatabase(b)
	db := audittest.OpenDB(b, dsn)
	s := testStore(b, dsn, nil)
	g, err := newRunGen(1)
	if err != nil {
		b.Fatal(err)
	}
	var base struct{ list, get time.Duration }
	for _, n := range sizes {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			if g.n < n {
				g.loadRuns(b, db, n)
			}
			var list, get []time.Duration
			for b.Loop() {
				list, get = measureRunStore(b, s, db, g)
			}
			lp99, gp99 := sandgatetest.Percentile(list, 99), sandgatetest.Percentile(get, 99)
			if base.list == 0 {
				base.list, base.get = lp99, gp99
			}
			b.ReportMetric(sandgatetest.Millis(sandgatetest.Median(list)), "list-p50-ms")
			b.ReportMetric(sandgatetest.Millis(lp99), "list-p99-ms")
			b.ReportMetric(sandgatetest.Millis(sandgatetest.Median(get)), "get-p50-ms")
			b.ReportMetric(sandgatetest.Millis(gp99), "get-p99-ms")
			b.ReportMetric(float64(lp99)/float64(base.list), "list-p99-x-smallest")
			b.ReportMetric(float64(gp99)/float64(base.get), "get-p99-x-smallest")
		})
	}
}

// measureRunStore times 600 lists and 600 gets, interleaved.
func measureRunStore(b *testing.B, s *Store, db *sql.DB, g *runGen) (list, get []time.Duration) {
	ctx := context.Background()
	var ids []string
	rows, err := db.QueryContext(ctx, `SELECT id FROM runs TABLESAMPLE SYSTEM (1) LIMIT 600`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if len(ids) == 0 {
		b.Fatal("no runs sampled")
	}
	filters := []sandgate.RunFilter{{Outcome: sandgate.OutcomeFailed}, {Outcome: sandgate.OutcomeTimedOut}, {State: sandgate.StateRunning}}
	rnd := rand.New(rand.NewPCG(2, 3))
	for i := range 600 {
		f := filters[i%len(filters)]
		f.Team, f.Limit = team(0), 50
		if i%2 == 1 {
			f.Team = team(rnd.Uint64N(scaleTeams))
		}
		if i%4 == 3 {
			// A next page, through the cursor of the first.
			if _, next, err := s.ListRuns(ctx, f); err == nil && next != "" {
				f.Cursor = next
			}
		}
		t0 := time.Now()
		page, _, err := s.ListRuns(ctx, f)
		list = append(list, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range page {
			if r.Team != f.Team || (f.Outcome != "" && r.Outcome != f.Outcome) || (f.State != "" && r.State != f.State) {
				b.Fatalf("ListRuns(%+v) returned %s of %s, %s/%s", f, r.ID, r.Team, r.State, r.Outcome)
			}
		}
		id := ids[i%len(ids)]
		t0 = time.Now()
		r, err := s.GetRun(ctx, id)
		get = append(get, time.Since(t0))
		if err != nil || r.ID != id {
			b.Fatalf("GetRun(%s): %v", id, err)
		}
	}
	return slices.Clip(list), slices.Clip(get)
}
