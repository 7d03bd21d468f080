package executor

import (
	"context"
	"sync"
)

// slots hands out places fairly between teams: the MaxConcurrent run
// slots a run needs to hold a container, or the MaxSessions places of
// session containers (one slots each). A team may hold at most the lower
// of its own limit (the decision's Job.TeamConcurrency) and its share of
// the node (Config.TeamSharePercent of max): places are never taken back
// from a run, so the share is what keeps room for another team however
// long one team's runs last. When a place is freed it goes to the waiting
// team that holds the fewest, not to whichever team queued the most. One
// team's flood waits behind that team's own runs; the others' runs go on.
type slots struct {
	max int
	// share is the most places one team may hold (0: max).
	share int

	mu      sync.Mutex
	held    int
	byTeam  map[string]int
	waiting map[string][]*slotWaiter
	// turn is the order teams with waiters are served in: a team goes to
	// the back when one of its runs is granted.
	turn []string
}

type slotWaiter struct {
	limit   int
	granted chan struct{}
}

func newSlots(max, share int) *slots {
	return &slots{max: max, share: share, byTeam: map[string]int{}, waiting: map[string][]*slotWaiter{}}
}

// acquire waits for a place for a run of team, which may hold at most
// limit places (0: no limit of its own) and never more than its share.
// It returns false when ctx ends first; the caller then holds nothing.
func (s *slots) acquire(ctx context.Context, team string, limit int) bool {
	if s.share > 0 && (limit <= 0 || limit > s.share) {
		limit = s.share
	}
	s.mu.Lock()
	if s.held < s.max && under(s.byTeam[team], limit) && len(s.waiting[team]) == 0 {
		s.grantLocked(team)
		s.mu.Unlock()
		return true
	}
	w := &slotWaiter{limit: limit, granted: make(chan struct{})}
	if len(s.waiting[team]) == 0 {
		s.turn = append(s.turn, team)
	}
	s.waiting[team] = append(s.waiting[team], w)
	s.mu.Unlock()

	select {
	case <-w.granted:
		return true
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.granted:
		// Granted as ctx ended: give it to the next.
		s.releaseLocked(team)
		return false
	default:
	}
	s.removeWaiterLocked(team, w)
	return false
}

// release frees a place of team's.
func (s *slots) release(team string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(team)
}

func (s *slots) releaseLocked(team string) {
	s.held--
	if s.byTeam[team]--; s.byTeam[team] <= 0 {
		delete(s.byTeam, team)
	}
	s.dispatchLocked()
}

// dispatchLocked grants free places to waiters: each to the waiting team,
// under its limit, that holds the fewest places, the earliest in turn
// among equals.
func (s *slots) dispatchLocked() {
	for s.held < s.max {
		pick := -1
		for i, team := range s.turn {
			q := s.waiting[team]
			if len(q) == 0 || !under(s.byTeam[team], q[0].limit) {
				continue
			}
			if pick < 0 || s.byTeam[team] < s.byTeam[s.turn[pick]] {
				pick = i
			}
		}
		if pick < 0 {
			return
		}
		team := s.turn[pick]
		q := s.waiting[team]
		w := q[0]
		s.waiting[team] = q[1:]
		// The team goes to the back of the turn, or leaves it.
		s.turn = append(s.turn[:pick:pick], s.turn[pick+1:]...)
		if len(s.waiting[team]) > 0 {
			s.turn = append(s.turn, team)
		} else {
			delete(s.waiting, team)
		}
		s.grantLocked(team)
		close(w.granted)
	}
}

func (s *slots) grantLocked(team string) {
	s.held++
	s.byTeam[team]++
}

func (s *slots) removeWaiterLocked(team string, w *slotWaiter) {
	q := s.waiting[team]
	for i, x := range q {
		if x == w {
			s.waiting[team] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(s.waiting[team]) == 0 {
		delete(s.waiting, team)
		for i, t := range s.turn {
			if t == team {
				s.turn = append(s.turn[:i:i], s.turn[i+1:]...)
				break
			}
		}
	}
}

// under reports whether a team holding n places may take another.
func under(n, limit int) bool { return limit <= 0 || n < limit }
