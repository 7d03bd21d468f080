package gateway

import (
	"fmt"
	"sync"

	"github.com/sandgate/sandgate"
)

// teamLoad is what each team's admitted, unfinished runs hold on this
// node, so that one team's flood is refused for that team alone: a team
// at its limits (the policy's data.sandgate.config.team_limits: runs
// holding a container plus runs waiting for one, and the sums of their
// memory and CPU limits) gets RATE-LIMITED, and every other team's runs go
// on. The executor then hands containers out fairly between the teams'
// waiting runs (Job.TeamConcurrency).
type teamLoad struct {
	mu     sync.Mutex
	byTeam map[string]*teamUse
}

type teamUse struct {
	runs     int
	memoryMB int64
	cpus     float64
}

func newTeamLoad() *teamLoad { return &teamLoad{byTeam: map[string]*teamUse{}} }

// reserve counts a run of team with resources r against its limits. It
// returns the function that gives the reservation back (call it once),
// or RATE-LIMITED naming the limit that is reached.
func (t *teamLoad) reserve(team string, l sandgate.TeamLimits, r sandgate.Resources) (func(), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.byTeam[team]
	if u == nil {
		u = &teamUse{}
	}
	limited := func(what string, details map[string]any) error {
		details["team"] = team
		return &sandgate.Error{Code: sandgate.CodeRateLimited, Details: details,
			Message: fmt.Sprintf("team %s is at its limit of %s on this gateway; retry later", team, what)}
	}
	// Runs holding a container and runs waiting for one: both limits
	// must be set for the sum to be one.
	if max := l.Concurrent + l.Queued; l.Concurrent > 0 && l.Queued > 0 && u.runs >= max {
		return nil, limited(fmt.Sprintf("%d runs (%d running, %d queued)", max, l.Concurrent, l.Queued),
			map[string]any{"limit": "runs", "runs": u.runs, "concurrent": l.Concurrent, "queued": l.Queued})
	}
	if l.MemoryMB > 0 && u.memoryMB+r.MemoryMB > l.MemoryMB {
		return nil, limited(fmt.Sprintf("%d MB of memory (%d MB held, %d asked)", l.MemoryMB, u.memoryMB, r.MemoryMB),
			map[string]any{"limit": "memory_mb", "held": u.memoryMB, "asked": r.MemoryMB, "budget": l.MemoryMB})
	}
	if l.CPUs > 0 && u.cpus+r.CPUs > l.CPUs+1e-9 {
		return nil, limited(fmt.Sprintf("%g CPUs (%g held, %g asked)", l.CPUs, u.cpus, r.CPUs),
			map[string]any{"limit": "cpus", "held": u.cpus, "asked": r.CPUs, "budget": l.CPUs})
	}
	return t.holdLocked(team, u, r), nil
}

// hold counts a run of team whatever its limits (one adopted after a
// restart) and returns the function that gives it back.
func (t *teamLoad) hold(team string, r sandgate.Resources) func() {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.byTeam[team]
	if u == nil {
		u = &teamUse{}
	}
	return t.holdLocked(team, u, r)
}

func (t *teamLoad) holdLocked(team string, u *teamUse, r sandgate.Resources) func() {
	u.runs++
	u.memoryMB += r.MemoryMB
	u.cpus += r.CPUs
	t.byTeam[team] = u
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			u.runs--
			u.memoryMB -= r.MemoryMB
			u.cpus -= r.CPUs
			if u.runs <= 0 {
				delete(t.byTeam, team)
			}
		})
	}
}
