package admission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// stepRecorder is a request that records the steps the gate takes it
// through, and fails at one of them.
type stepRecorder struct {
	steps  *[]string
	failAt string
}

func (stepRecorder) operation() string { return "test" }

func (r stepRecorder) step(name string) error {
	*r.steps = append(*r.steps, name)
	if name == r.failAt {
		return sandgate.Errorf(sandgate.CodeNotFound, "refused at %s", name)
	}
	return nil
}

func (r stepRecorder) target(context.Context, *pass) error    { return r.step("target") }
func (r stepRecorder) bounds(context.Context, *pass) error    { return r.step("bounds") }
func (r stepRecorder) normalize(context.Context, *pass) error { return r.step("normalize") }
func (r stepRecorder) decide(context.Context, *pass) error    { return r.step("decide") }
func (r stepRecorder) record(context.Context, *pass) error    { return r.step("record") }
func (r stepRecorder) store(context.Context, *pass) error     { return r.step("store") }
func (r stepRecorder) execute(context.Context, *pass) error   { return r.step("execute") }

// TestAdmitOrder: every request is taken through the same steps in the
// same order, and a refusal at one step ends it there; a request without
// a principal reaches no step.
func TestAdmitOrder(t *testing.T) {
	g := testGate(t)
	all := []string{"target", "bounds", "normalize", "decide", "record", "store", "execute"}
	for i, failAt := range append([]string{""}, all...) {
		var steps []string
		_, err := g.Admit(context.Background(), testCaller("alice", "a"), stepRecorder{steps: &steps, failAt: failAt})
		want := all
		if failAt != "" {
			want = all[:i]
		}
		if diff := cmp.Diff(want, steps); diff != "" {
			t.Errorf("failing at %q, steps (-want +got):\n%s", failAt, diff)
		}
		if (err != nil) != (failAt != "") {
			t.Errorf("failing at %q: err %v", failAt, err)
		}
	}
	var steps []string
	if _, err := g.Admit(context.Background(), Caller{}, stepRecorder{steps: &steps}); sandgate.ErrorCodeOf(err) != sandgate.CodeUnauthenticated || len(steps) != 0 {
		t.Errorf("no principal: %v after %v", err, steps)
	}
}

// unreadable is a body that fails the test if it is read.
type unreadable struct{ t *testing.T }

func (u unreadable) Read([]byte) (int, error) {
	u.t.Errorf("the body was read")
	return 0, io.EOF
}

// TestTargetBeforeBody: a request on another team's session, on one that
// does not exist, and on a run of another team, is refused with the same
// answer before its body is read; the owner's team reaches it.
func TestTargetBeforeBody(t *testing.T) {
	g := testGate(t)
	live := g.d.Live.(*fakeLive)
	sid, rid := "01900000-0000-7000-8000-000000000001", "01900000-0000-7000-8000-000000000002"
	started := time.Unix(1, 0)
	live.sessions[sid] = &LiveSession{Session: sandgate.Session{ID: sid, Team: "a", State: sandgate.SessionOpen, StartedAt: &started}}
	live.runs[rid] = &sandgate.Run{ID: rid, Team: "a", State: sandgate.StateRunning}
	body := Body{R: unreadable{t}, Size: 256 << 20}
	none := "01900000-0000-7000-8000-0000000000ff"
	for _, tc := range []struct {
		name     string
		req      func(id string) Request
		obj      string
		what     string
		readable bool
	}{
		{"put files", func(id string) Request {
			return PutFiles{Session: id, Path: "f", Format: sandgate.FileFormatFile, Body: body}
		}, sid, "session", false},
		{"command", func(id string) Request { return Command{Session: id, Body: body} }, sid, "session", false},
		{"get files", func(id string) Request { return GetFiles{Session: id, Path: "f"} }, sid, "session", false},
		{"end session", func(id string) Request { return EndSession{Session: id} }, sid, "session", false},
		{"read session", func(id string) Request { return ReadSession{Session: id} }, sid, "session", false},
		{"cancel", func(id string) Request { return Cancel{Run: id} }, rid, "run", false},
		{"read run", func(id string) Request { return ReadRun{Run: id} }, rid, "run", false},
		{"artifacts", func(id string) Request { return Artifacts{Run: id} }, rid, "run", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, other := g.Admit(context.Background(), testCaller("bob", "b"), tc.req(tc.obj))
			_, absent := g.Admit(context.Background(), testCaller("bob", "b"), tc.req(none))
			if sandgate.ErrorCodeOf(other) != sandgate.CodeNotFound ||
				strings.ReplaceAll(other.Error(), tc.obj, "X") != strings.ReplaceAll(absent.Error(), none, "X") {
				t.Errorf("another team's %s: %v; one that does not exist: %v", tc.what, other, absent)
			}
		})
	}
	// The owner's team, and an admin for a read, reach them.
	if ans, err := g.Admit(context.Background(), testCaller("al", "a"), ReadSession{Session: sid}); err != nil || ans.Session.ID != sid {
		t.Errorf("the owner's read = %+v, %v", ans, err)
	}
	admin := Caller{Principal: sandgate.Principal{Name: "adm", Team: "ops", Roles: []sandgate.Role{sandgate.RoleAdmin}}}
	if ans, err := g.Admit(context.Background(), admin, ReadRun{Run: rid}); err != nil || ans.Run.ID != rid {
		t.Errorf("an admin's read = %+v, %v", ans, err)
	}
	if node, active := g.RunOwner(context.Background(), testCaller("bob", "b"), rid); node != "" || active {
		t.Errorf("RunOwner of another team's run = %q %v, want nothing", node, active)
	}
}

// TestUploadQuotaAccounting: an upload holds its declared size while it
// is read, against its principal, its team and the gateway; once landed
// it holds its size on disk against its team and the gateway; released,
// nothing.
func TestUploadQuotaAccounting(t *testing.T) {
	u := newUploads(UploadLimits{MaxBytes: 100, PrincipalBytes: 150, PrincipalUploads: 2, TeamBytes: 200, GlobalBytes: 350, GlobalUploads: 10}.withDefaults(), time.Now)
	a1, err := u.reserve("alice", "a", 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.reserve("alice", "a", 60); sandgate.ErrorCodeOf(err) != sandgate.CodeRateLimited {
		t.Errorf("past the principal's bytes: %v", err)
	}
	if _, err := u.reserve("alice", "a", 101); sandgate.ErrorCodeOf(err) != sandgate.CodeTooLarge {
		t.Errorf("past one upload's size: %v", err)
	}
	a1.landed(40)
	a2, err := u.reserve("alice", "a", -1) // undeclared: counted as the largest
	if err != nil {
		t.Fatalf("after the first landed: %v", err)
	}
	if _, err := u.reserve("carol", "a", 100); sandgate.ErrorCodeOf(err) != sandgate.CodeRateLimited {
		t.Errorf("past the team's bytes (40 held, 100 in flight): %v", err)
	}
	b1, err := u.reserve("bob", "b", 100)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := u.reserve("bob", "b", 50)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.reserve("dan", "d", 100); sandgate.ErrorCodeOf(err) != sandgate.CodeStorageFull {
		t.Errorf("past the gateway's bytes (290 held): %v", err)
	}
	if bytes, n := u.totals(); bytes != 290 || n != 3 {
		t.Errorf("totals = %d bytes, %d in flight; want 290, 3", bytes, n)
	}
	for _, h := range []*uploadHold{a1, a2, b1, b2, a1} {
		h.release()
	}
	if bytes, n := u.totals(); bytes != 0 || n != 0 || len(u.byPrincipal) != 0 || len(u.byTeam) != 0 {
		t.Errorf("after release: %d bytes, %d in flight, %v %v", bytes, n, u.byPrincipal, u.byTeam)
	}
}

// slowReader gives one byte a read, each read a second later on a fake
// clock.
type slowReader struct{ now *time.Time }

func (r slowReader) Read(p []byte) (int, error) {
	*r.now = r.now.Add(time.Second)
	p[0] = 'x'
	return 1, nil
}

// TestPacedReaderCutsTrickle: an upload slower than the minimum rate over
// a window is cut with INVALID-REQUEST naming the body, and its read
// deadline left in the past; a stalled read (the deadline fired) is cut
// the same way.
func TestPacedReaderCutsTrickle(t *testing.T) {
	now := time.Unix(0, 0)
	u := newUploads(UploadLimits{MinRate: 10, RateWindow: 5 * time.Second}.withDefaults(), func() time.Time { return now })
	var deadlines []time.Time
	pr := u.paced(slowReader{&now}, func(d time.Time) error { deadlines = append(deadlines, d); return nil })
	n, err := io.Copy(io.Discard, pr)
	pr.stop()
	var se *sandgate.Error
	if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest || se.Field != "body" || n != 5 {
		t.Errorf("a trickle = %d bytes, %v; want 5 bytes and the body refused", n, err)
	}
	if last := deadlines[len(deadlines)-1]; last.IsZero() || last.After(time.Now()) {
		t.Errorf("the deadline after a cut = %v, want in the past", last)
	}
	stalled := u.paced(readerFunc(func([]byte) (int, error) { return 0, os.ErrDeadlineExceeded }), nil)
	if _, err := stalled.Read(make([]byte, 1)); sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
		t.Errorf("a stalled read = %v", err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestTeamsCountThenFit: a team is counted before its request is read,
// and sized once its spec is normalised; either refusal is RATE-LIMITED
// naming the limit, and release gives both back.
func TestTeamsCountThenFit(t *testing.T) {
	teams := NewTeams()
	l := sandgate.TeamLimits{Concurrent: 1, Queued: 1, MemoryMB: 1000}
	h1, err := teams.count("a", l)
	if err != nil {
		t.Fatal(err)
	}
	if err := h1.fit(sandgate.Resources{MemoryMB: 600}); err != nil {
		t.Fatal(err)
	}
	h2, err := teams.count("a", l)
	if err != nil {
		t.Fatal(err)
	}
	var se *sandgate.Error
	if err := h2.fit(sandgate.Resources{MemoryMB: 600}); !errors.As(err, &se) || se.Details["limit"] != "memory_mb" {
		t.Errorf("past the memory budget: %v", err)
	}
	if _, err := teams.count("a", l); !errors.As(err, &se) || se.Details["limit"] != "runs" {
		t.Errorf("past the runs: %v", err)
	}
	if _, err := teams.count("b", l); err != nil {
		t.Errorf("another team: %v", err)
	}
	h1.release()
	h2.release()
	h1.release()
	if h, err := teams.count("a", l); err != nil || h.fit(sandgate.Resources{MemoryMB: 1000}) != nil {
		t.Errorf("after release: %v", err)
	}
}

// TestIsID: the form of sandgate's run and session IDs.
func TestIsID(t *testing.T) {
	for s, want := range map[string]bool{
		"01900000-0000-7000-8000-0000000000ff": true,
		"01900000-0000-7000-8000-0000000000FF": true,
		"01900000-0000-7000-8000-0000000000f":  false,
		"01900000x0000-7000-8000-0000000000ff": false,
		"0190000g-0000-7000-8000-0000000000ff": false,
		"s-1":                                  false,
		"":                                     false,
	} {
		if isID(s) != want {
			t.Errorf("isID(%q) = %v", s, !want)
		}
	}
}

// TestTeamsCountSessions: sessions are counted apart from runs, against
// the team's sessions and the node's budget, each refusal RATE-LIMITED
// naming its limit; sessions opened at once never pass either together;
// release gives the place back.
func TestTeamsCountSessions(t *testing.T) {
	teams := NewTeams()
	l := sandgate.TeamLimits{Concurrent: 1, Queued: 1, Sessions: 2}
	var held []*Hold
	for range 2 {
		h, err := teams.countSession("a", l, 3)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
	}
	var se *sandgate.Error
	if _, err := teams.countSession("a", l, 3); !errors.As(err, &se) || se.Code != sandgate.CodeRateLimited || se.Details["field"] != "team_limits.sessions" {
		t.Errorf("past the team's sessions: %v", err)
	}
	// Sessions leave the team's runs alone.
	if _, err := teams.count("a", l); err != nil {
		t.Errorf("a run beside the sessions: %v", err)
	}
	if _, err := teams.countSession("b", l, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := teams.countSession("c", l, 3); !errors.As(err, &se) || se.Details["field"] != "SANDGATE_MAX_SESSIONS" {
		t.Errorf("past the node's budget: %v", err)
	}
	held[0].release()
	held[0].release()
	if _, err := teams.countSession("c", l, 3); err != nil {
		t.Errorf("after a release: %v", err)
	}

	// Many teams' sessions at once: exactly the budget is counted.
	race := NewTeams()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := race.countSession(fmt.Sprintf("t%d", i%8), sandgate.TeamLimits{Sessions: 3}, 10); err == nil {
				mu.Lock()
				got++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got != 10 || race.sessions != 10 {
		t.Errorf("%d sessions counted at once (%d held), want the budget of 10", got, race.sessions)
	}
}
