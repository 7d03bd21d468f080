package runstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
)

func testRun(id string, created time.Time) *sandgate.Run {
	return &sandgate.Run{
		ID: id, CorrelationID: "c-" + id, DecisionID: "d-" + id, PolicyRevision: "sha256:aa",
		Principal: "alice", Team: "payments", Node: "n1", State: sandgate.StatePending,
		CreatedAt: created, Warnings: []string{},
		Spec: sandgate.RunSpec{Image: "sandgate/sandbox:latest", Command: []string{"echo", "hi"}, SessionID: "s1", TaskID: "t-" + id},
	}
}

// TestRunStoreCRUD: a run round-trips through create, update and get.
func TestRunStoreCRUD(t *testing.T) {
	s := testStore(t, audittest.NewMigratedDatabase(t), nil)
	ctx := context.Background()
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	run := testRun("r1", created)
	if err := s.CreateRun(ctx, run); err != nil {
		t.Fatalf("CreateRun = %v", err)
	}
	if err := s.CreateRun(ctx, testRun("r1", created)); !isCode(err, sandgate.CodeConflict) {
		t.Errorf("CreateRun(dup) = %v, want CONFLICT", err)
	}
	got, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	if diff := cmp.Diff(run, got); diff != "" {
		t.Errorf("GetRun (-want +got):\n%s", diff)
	}
	started, finished := created.Add(time.Second), created.Add(3*time.Second)
	code := 0
	run.State, run.Outcome, run.ExitCode, run.ContainerID = sandgate.StateFinished, sandgate.OutcomeSucceeded, &code, "ctr"
	run.StartedAt, run.FinishedAt, run.DurationMS = &started, &finished, 2000
	run.Stdout = sandgate.Output{Data: "hi\n", Encoding: "utf-8", Bytes: 3, SHA256: "98ea"}
	run.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: "x"}
	run.Warnings = []string{"w"}
	if err := s.UpdateRun(ctx, run); err != nil {
		t.Fatalf("UpdateRun: %v", err)
	}
	got, err = s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	// The output comes back as the bytes it was.
	want := *run
	want.Stdout = sandgate.Output{Encoding: "utf-8", Bytes: 3, SHA256: "98ea", Raw: []byte("hi\n")}
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("after UpdateRun (-want +got):\n%s", diff)
	}
	// Any bytes, held as they are: control bytes and invalid UTF-8 cost
	// their size.
	run.Stdout = sandgate.Output{Raw: []byte("\x00\x01\xff<"), Bytes: 4}
	if err := s.UpdateRun(ctx, run); err != nil {
		t.Fatalf("UpdateRun: %v", err)
	}
	if got, err = s.GetRun(ctx, "r1"); err != nil || string(got.Stdout.Raw) != "\x00\x01\xff<" || got.Stdout.Encoding != sandgate.EncodingBase64 {
		t.Errorf("binary output read back as %+v, %v", got.Stdout, err)
	}
	// A row written before output had columns of its own.
	if err := s.db.Exec(`UPDATE runs SET stdout = '{"data":"old\n","encoding":"utf-8","bytes":4}', stdout_data = NULL WHERE id = 'r1'`).Error; err != nil {
		t.Fatal(err)
	}
	if got, err = s.GetRun(ctx, "r1"); err != nil || got.Stdout.Data != "old\n" || got.Stdout.Raw != nil {
		t.Errorf("an older row read back as %+v, %v", got.Stdout, err)
	}
	if _, err := s.GetRun(ctx, "nope"); !isCode(err, sandgate.CodeNotFound) {
		t.Errorf("GetRun(nope) = %v, want NOT-FOUND", err)
	}
	if err := s.UpdateRun(ctx, testRun("nope", created)); !isCode(err, sandgate.CodeNotFound) {
		t.Errorf("UpdateRun(nope) = %v, want NOT-FOUND", err)
	}
	if err := s.CreateRun(ctx, &sandgate.Run{Principal: "a"}); !isCode(err, sandgate.CodeInvalidRequest) {
		t.Errorf("CreateRun(no id) = %v, want INVALID-REQUEST", err)
	}
}

// TestRunStoreUsage: a finished run's usage is kept and comes back from
// GetRun and from ListRuns (which leaves the output data out, not the
// usage); a run without one has none.
func TestRunStoreUsage(t *testing.T) {
	s := testStore(t, audittest.NewMigratedDatabase(t), nil)
	ctx := context.Background()
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"with", "without"} {
		if err := s.CreateRun(ctx, testRun(id, created)); err != nil {
			t.Fatal(err)
		}
	}
	i := func(v int64) *int64 { return &v }
	at := created.Add(2 * time.Second).Add(123456 * time.Nanosecond)
	usage := &sandgate.Usage{CPUMS: i(1250), CPUUserMS: i(1000), CPUSystemMS: i(250), MemoryPeakBytes: i(42 << 20),
		PidsPeak: i(7), IOReadBytes: i(0), IOWriteBytes: i(4096), NetRxBytes: i(5334), NetTxBytes: i(916),
		WallMS: 2100, Source: sandgate.UsageCgroupV1, SampledAt: &at}
	run, err := s.GetRun(ctx, "with")
	if err != nil {
		t.Fatal(err)
	}
	run.State, run.Outcome, run.Usage = sandgate.StateFinished, sandgate.OutcomeSucceeded, usage
	if err := s.UpdateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, "with")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(usage, got.Usage); diff != "" {
		t.Errorf("GetRun usage (-want +got):\n%s", diff)
	}
	runs, _, err := s.ListRuns(ctx, sandgate.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		switch {
		case r.ID == "with":
			if diff := cmp.Diff(usage, r.Usage); diff != "" {
				t.Errorf("ListRuns usage (-want +got):\n%s", diff)
			}
		case r.Usage != nil:
			t.Errorf("run %s has usage %+v, want none", r.ID, r.Usage)
		}
	}
}

// TestRunStoreIdempotency: one key, one principal, one run for 24 hours,
// decided by the key's claim alone, also when the requests race; another
// principal or an expired key claims it afresh. CreateRun decides nothing
// of keys: it stores the run under the claim made for it.
func TestRunStoreIdempotency(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := testStore(t, dsn, func(c *Config) { c.Clock = clock })
	ctx := context.Background()

	var wg sync.WaitGroup
	winners := make(chan string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("race-%d", i)
			held, _, err := s.ClaimIdempotencyKey(ctx, "alice", "k1", id, "d")
			if err != nil {
				t.Errorf("ClaimIdempotencyKey: %v", err)
				return
			}
			if held == "" {
				winners <- id
			}
		}()
	}
	wg.Wait()
	close(winners)
	var won []string
	for id := range winners {
		won = append(won, id)
	}
	if len(won) != 1 {
		t.Fatalf("claims won with one key = %v, want exactly one", won)
	}
	r := testRun(won[0], now)
	r.IdempotencyKey = "k1"
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatalf("CreateRun under its claim: %v", err)
	}

	tests := []struct {
		name      string
		principal string
		advance   time.Duration
		claimed   bool
	}{
		{"same principal within 24h", "alice", 23 * time.Hour, false},
		{"other principal", "bob", 0, true},
		{"same principal after 24h", "alice", 2 * time.Hour, true},
		{"again right after", "alice", time.Minute, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			now = now.Add(tt.advance)
			mu.Unlock()
			id := fmt.Sprintf("later-%d", i)
			held, _, err := s.ClaimIdempotencyKey(ctx, tt.principal, "k1", id, "d")
			if err != nil {
				t.Fatalf("ClaimIdempotencyKey: %v", err)
			}
			if (held == "") != tt.claimed {
				t.Fatalf("claimed = %v (held by %q), want %v", held == "", held, tt.claimed)
			}
			if held == "" {
				r := testRun(id, clock())
				r.Principal, r.IdempotencyKey = tt.principal, "k1"
				if err := s.CreateRun(ctx, r); err != nil {
					t.Fatal(err)
				}
			} else if existing, err := s.GetRun(ctx, held); err != nil || existing.Principal != tt.principal {
				t.Errorf("the key names run %s of %v (%v), want one of %s", held, existing, err, tt.principal)
			}
		})
	}
	// Two runs may carry one key: CreateRun refuses a run only for its ID.
	dup := testRun("dup-key", now)
	dup.IdempotencyKey = "k1"
	if err := s.CreateRun(ctx, dup); err != nil {
		t.Errorf("CreateRun of a second run with a key = %v; the key's claim is what decides", err)
	}
}

// TestListRuns: filters, newest first, keyset pages, bad input refused.
func TestListRuns(t *testing.T) {
	s := testStore(t, audittest.NewMigratedDatabase(t), nil)
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 12 {
		r := testRun(fmt.Sprintf("r%02d", i), base.Add(time.Duration(i/2)*time.Minute)) // pairs share a time
		if i%3 == 0 {
			r.Team, r.Spec.SessionID = "research", "s2"
		}
		if i%4 == 0 {
			r.State, r.Outcome = sandgate.StateFinished, sandgate.OutcomeFailed
		}
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(runs []sandgate.Run) []string {
		var out []string
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	tests := []struct {
		name string
		f    sandgate.RunFilter
		want []string
	}{
		{"team", sandgate.RunFilter{Team: "research"}, []string{"r09", "r06", "r03", "r00"}},
		{"state", sandgate.RunFilter{State: sandgate.StateFinished}, []string{"r08", "r04", "r00"}},
		{"outcome", sandgate.RunFilter{Outcome: sandgate.OutcomeFailed, Team: "payments"}, []string{"r08", "r04"}},
		{"session", sandgate.RunFilter{SessionID: "s2", Until: base.Add(3 * time.Minute)}, []string{"r03", "r00"}},
		{"task", sandgate.RunFilter{TaskID: "t-r05"}, []string{"r05"}},
		{"since", sandgate.RunFilter{Since: base.Add(5 * time.Minute)}, []string{"r11", "r10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs, next, err := s.ListRuns(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, ids(runs), cmpopts.EquateEmpty()); diff != "" || next != "" {
				t.Errorf("ListRuns (-want +got):\n%s next %q", diff, next)
			}
		})
	}
	var all []string
	cursor := ""
	for {
		runs, next, err := s.ListRuns(ctx, sandgate.RunFilter{Limit: 5, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ids(runs)...)
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{"r11", "r10", "r09", "r08", "r07", "r06", "r05", "r04", "r03", "r02", "r01", "r00"}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("paged (-want +got):\n%s", diff)
	}
	for _, f := range []sandgate.RunFilter{{Cursor: "garbage!"}, {State: "sleeping"}, {Outcome: "meh"}, {Limit: -2}} {
		if _, _, err := s.ListRuns(ctx, f); !isCode(err, sandgate.CodeInvalidRequest) {
			t.Errorf("ListRuns(%+v) = %v, want INVALID-REQUEST", f, err)
		}
	}
}

// TestRunStoreAsAppRole: the run store works as the sandgate_app role
// (what serve runs as), which may not remove runs.
func TestRunStoreAsAppRole(t *testing.T) {
	s := testStore(t, audittest.NewMigratedDatabase(t)+" role=sandgate_app", nil)
	ctx := context.Background()
	if err := s.CreateRun(ctx, &sandgate.Run{ID: "r1", Principal: "alice", IdempotencyKey: "k"}); err != nil {
		t.Fatalf("CreateRun as sandgate_app: %v", err)
	}
	if err := s.UpdateRun(ctx, &sandgate.Run{ID: "r1", Principal: "alice", State: sandgate.StateRunning}); err != nil {
		t.Fatalf("UpdateRun as sandgate_app: %v", err)
	}
	if _, _, err := s.ListRuns(ctx, sandgate.RunFilter{}); err != nil {
		t.Fatalf("ListRuns as sandgate_app: %v", err)
	}
	if err := s.db.Exec("DELETE FROM runs").Error; err == nil || !strings.Contains(err.Error(), "42501") {
		t.Errorf("DELETE as sandgate_app = %v, want permission denied", err)
	}
}
