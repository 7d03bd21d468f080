package sandgate

// Capacity is what one node can hold at once and how much of it one team
// may take: Runs run slots (SANDGATE_MAX_CONCURRENT), Sessions session
// places (SANDGATE_MAX_SESSIONS), and SharePercent of each at most per
// team (SANDGATE_TEAM_SHARE). A session holds a session place, never a
// run slot, so idle sessions cannot starve runs. Places are not taken
// back from a run that holds one; a team's share is what leaves room for
// the others, however long its runs last. The zero value bounds nothing.
type Capacity struct {
	Runs         int `json:"runs"`
	Sessions     int `json:"sessions"`
	SharePercent int `json:"share_percent"`
}

// DefaultTeamSharePercent is SANDGATE_TEAM_SHARE's default: no team holds
// more than half of a node's run slots or session places.
const DefaultTeamSharePercent = 50

// Share is how many of n places one team may hold: SharePercent of n,
// rounded up, at least 1; 0 (no bound) when n or SharePercent is 0.
func (c Capacity) Share(n int) int {
	if n <= 0 || c.SharePercent <= 0 {
		return 0
	}
	return max(1, (n*c.SharePercent+99)/100)
}

// Effective is l as this node enforces it: a team's Concurrent and
// Sessions are its share of the node's run slots and session places, or
// the bundle's number when that is lower. A limit the bundle leaves
// unset (0) follows the node.
func (c Capacity) Effective(l TeamLimits) TeamLimits {
	l.Concurrent = lowest(l.Concurrent, c.Share(c.Runs))
	l.Sessions = lowest(l.Sessions, c.Share(c.Sessions))
	return l
}

// lowest is the lower of two limits where 0 is none.
func lowest(a, b int) int {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
