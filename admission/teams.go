package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate"
)

// Step 3, a team's share: what each team's admitted, unfinished runs and
// sessions hold on this node, so that one team's flood is refused for
// that team alone. A team at its limits (the policy's
// data.sandgate.config.team_limits as the node's capacity bounds them,
// sandgate.Capacity.Effective: runs holding a container plus runs
// waiting for one, open sessions, and the sums of their memory and CPU
// limits) gets RATE-LIMITED, and every other team's requests go on. A
// session is counted apart from runs, against its team's sessions and the
// node's session budget, which every team's sessions share. A request is
// counted at step 3, before its body is read; its size is added once its
// spec is normalised (Hold.fit), before its upload is read or anything is
// decided. Across a cluster, the database counts the same (Slots).

// Teams counts each team's runs and sessions on this node.
type Teams struct {
	mu     sync.Mutex
	byTeam map[string]*teamUse
	// sessions are the open sessions of every team.
	sessions int
}

type teamUse struct {
	runs     int
	sessions int
	memoryMB int64
	cpus     float64
}

// NewTeams returns an empty count.
func NewTeams() *Teams { return &Teams{byTeam: map[string]*teamUse{}} }

// Hold counts a run of team whatever its limits (one adopted after a
// restart or a takeover) and returns the function that gives it back
// (call it once).
func (t *Teams) Hold(team string, r sandgate.Resources) func() {
	return t.hold(team, r, false)
}

// HoldSession counts a session of team as Hold counts a run.
func (t *Teams) HoldSession(team string, r sandgate.Resources) func() {
	return t.hold(team, r, true)
}

func (t *Teams) hold(team string, r sandgate.Resources, session bool) func() {
	h := &Hold{t: t, team: team, session: session}
	t.mu.Lock()
	t.takeLocked(team, session)
	t.addLocked(team, r)
	t.mu.Unlock()
	h.counted, h.r = true, r
	return h.release
}

// takeLocked counts one run or session of team.
func (t *Teams) takeLocked(team string, session bool) {
	u := t.use(team)
	if session {
		u.sessions++
		t.sessions++
		return
	}
	u.runs++
}

func (t *Teams) use(team string) *teamUse {
	u := t.byTeam[team]
	if u == nil {
		u = &teamUse{}
		t.byTeam[team] = u
	}
	return u
}

func (t *Teams) addLocked(team string, r sandgate.Resources) {
	u := t.use(team)
	u.memoryMB += r.MemoryMB
	u.cpus += r.CPUs
}

// Hold is what one request holds of its team's bounds.
type Hold struct {
	t       *Teams
	team    string
	limits  sandgate.TeamLimits
	r       sandgate.Resources
	counted bool
	// session says the hold is a session's, counted apart from runs.
	session bool
	once    sync.Once
	// slot gives back the request's slot in the cluster's count.
	slot func()
}

func limited(team, what string, details map[string]any) error {
	details["team"] = team
	return &sandgate.Error{Code: sandgate.CodeRateLimited, Details: details,
		Message: fmt.Sprintf("team %s is at its limit of %s on this gateway; retry later", team, what)}
}

// count counts a request of team against its limit of runs (running
// plus queued): RATE-LIMITED when the team is at it.
func (t *Teams) count(team string, l sandgate.TeamLimits) (*Hold, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.use(team)
	// Both limits must be set for the sum to be one.
	if max := l.Concurrent + l.Queued; l.Concurrent > 0 && l.Queued > 0 && u.runs >= max {
		return nil, limited(team, fmt.Sprintf("%d runs (%d running, %d queued)", max, l.Concurrent, l.Queued),
			map[string]any{"limit": "runs", "runs": u.runs, "concurrent": l.Concurrent, "queued": l.Queued})
	}
	u.runs++
	return &Hold{t: t, team: team, limits: l, counted: true}, nil
}

// countSession counts a session of team against its limit of sessions
// and the node's session budget: RATE-LIMITED, naming the limit, when
// either is reached. The check and the count are one step under the
// lock, so sessions opened at once cannot pass the budget together.
func (t *Teams) countSession(team string, l sandgate.TeamLimits, budget int) (*Hold, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.use(team)
	if l.Sessions > 0 && u.sessions >= l.Sessions {
		return nil, limited(team, fmt.Sprintf("%d open sessions", l.Sessions),
			map[string]any{"limit": "sessions", "field": "team_limits.sessions", "sessions": u.sessions, "budget": l.Sessions})
	}
	if budget > 0 && t.sessions >= budget {
		return nil, &sandgate.Error{Code: sandgate.CodeRateLimited,
			Message: fmt.Sprintf("this gateway holds as many sessions as it may (%d, SANDGATE_MAX_SESSIONS); retry later", budget),
			Details: map[string]any{"team": team, "limit": "node_sessions", "field": "SANDGATE_MAX_SESSIONS", "sessions": t.sessions, "budget": budget}}
	}
	t.takeLocked(team, true)
	return &Hold{t: t, team: team, limits: l, counted: true, session: true}, nil
}

// fit adds the request's size to its team's: RATE-LIMITED when the team's
// memory or CPU budget cannot take it.
func (h *Hold) fit(r sandgate.Resources) error {
	t, l := h.t, h.limits
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.use(h.team)
	if l.MemoryMB > 0 && u.memoryMB+r.MemoryMB > l.MemoryMB {
		return limited(h.team, fmt.Sprintf("%d MB of memory (%d MB held, %d asked)", l.MemoryMB, u.memoryMB, r.MemoryMB),
			map[string]any{"limit": "memory_mb", "held": u.memoryMB, "asked": r.MemoryMB, "budget": l.MemoryMB})
	}
	if l.CPUs > 0 && u.cpus+r.CPUs > l.CPUs+1e-9 {
		return limited(h.team, fmt.Sprintf("%g CPUs (%g held, %g asked)", l.CPUs, u.cpus, r.CPUs),
			map[string]any{"limit": "cpus", "held": u.cpus, "asked": r.CPUs, "budget": l.CPUs})
	}
	t.addLocked(h.team, r)
	h.r = r
	return nil
}

// release gives back what the hold holds; it is safe to call more than
// once.
func (h *Hold) release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		t := h.t
		t.mu.Lock()
		u := t.use(h.team)
		switch {
		case h.counted && h.session:
			u.sessions--
			t.sessions--
		case h.counted:
			u.runs--
		}
		u.memoryMB -= h.r.MemoryMB
		u.cpus -= h.r.CPUs
		if u.runs <= 0 && u.sessions <= 0 {
			delete(t.byTeam, h.team)
		}
		t.mu.Unlock()
		if h.slot != nil {
			h.slot()
		}
	})
}

// slotLimits are a team's limits as the cluster counts them.
func slotLimits(l sandgate.TeamLimits) sandgate.SlotLimits {
	sl := sandgate.SlotLimits{TeamMemoryMB: l.MemoryMB, TeamCPUs: l.CPUs}
	if l.Concurrent > 0 && l.Queued > 0 {
		sl.TeamRuns = l.Concurrent + l.Queued
	}
	return sl
}

// storeTimeout bounds the database calls of an admission.
const storeTimeout = 15 * time.Second

// reserveSlot counts the run runID against its team's limits across the
// cluster, as part of h: RATE-LIMITED when the team is at one of them.
func (g *Gate) reserveSlot(ctx context.Context, h *Hold, runID string) error {
	if g.d.Slots == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	sl := slotLimits(h.limits)
	use, ok, err := g.d.Slots.ReserveSlot(rctx, sandgate.Slot{RunID: runID, Team: h.team, Node: g.cfg.Node, MemoryMB: h.r.MemoryMB, CPUs: h.r.CPUs}, sl)
	if err != nil {
		return failClosed(err, "the cluster's run slots")
	}
	if !ok {
		return &sandgate.Error{Code: sandgate.CodeRateLimited,
			Message: fmt.Sprintf("team %s is at its limits across the cluster (%d runs, %d MB, %g CPUs held); retry later", h.team, use.TeamRuns, use.TeamMemoryMB, use.TeamCPUs),
			Details: map[string]any{"team": h.team, "scope": "cluster", "runs": use.TeamRuns, "memory_mb": use.TeamMemoryMB, "cpus": use.TeamCPUs,
				"limit_runs": sl.TeamRuns, "limit_memory_mb": sl.TeamMemoryMB, "limit_cpus": sl.TeamCPUs}}
	}
	h.slot = func() { g.releaseSlot(runID) }
	return nil
}

// releaseSlot gives the run's slot back, retrying while the database
// does not answer.
func (g *Gate) releaseSlot(runID string) {
	SaveRetrying("release run slot", time.Now().Add(finalStoreFor), 500*time.Millisecond, g.d.Logger.With("run_id", runID),
		func(ctx context.Context) error { return g.d.Slots.ReleaseSlot(ctx, runID) })
}

// failClosed is the refusal of an admission whose cluster-wide count or
// key claim the database could not answer: that database is the trail's,
// so the admission fails closed as one the trail cannot record would
// (AUDIT-UNAVAILABLE, 503 with Retry-After), whichever step met the
// outage first.
func failClosed(err error, what string) error {
	if sandgate.ErrorCodeOf(err) != sandgate.CodeUnavailable && !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return unavailable(err, what)
	}
	return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "%s: the audit database is unavailable; nothing is admitted until it is back", what)
}

// unavailable gives an uncoded dependency error the UNAVAILABLE code.
func unavailable(err error, what string) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return sandgate.WrapError(sandgate.CodeUnavailable, err, "request cancelled")
	}
	return sandgate.WrapError(sandgate.CodeUnavailable, err, "%s is unavailable", what)
}
