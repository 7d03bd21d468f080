package executor

import (
	"fmt"
	"syscall"

	"github.com/sandgate/sandgate"
)

// The bounds of the session budget SANDGATE_MAX_SESSIONS.
const (
	MinSessions = 1
	MaxSessions = 1024
)

// DefaultMaxSessions is the session budget of a node that sets none: one
// session per GiB of the host's memory (a session's default memory limit
// is 512 MB, so sessions alone can hold at most half of it), between 2
// and 256. The host is the gateway's; a node driving a remote daemon
// should set SANDGATE_MAX_SESSIONS for that daemon's host.
func DefaultMaxSessions() int {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 2
	}
	gib := uint64(si.Totalram) * uint64(si.Unit) >> 30
	return int(min(max(gib, 2), 256))
}

// validateCapacity fills in the session budget and the team share.
func (c *Config) validateCapacity() error {
	switch {
	case c.MaxSessions == 0:
		c.MaxSessions = DefaultMaxSessions()
	case c.MaxSessions < MinSessions || c.MaxSessions > MaxSessions:
		return fmt.Errorf("executor: MaxSessions must be between %d and %d, not %d", MinSessions, MaxSessions, c.MaxSessions)
	}
	switch {
	case c.TeamSharePercent == 0:
		c.TeamSharePercent = sandgate.DefaultTeamSharePercent
	case c.TeamSharePercent < 1 || c.TeamSharePercent > 100:
		return fmt.Errorf("executor: TeamSharePercent must be between 1 and 100, not %d", c.TeamSharePercent)
	}
	return nil
}

// capacity is the node's capacity as its teams share it.
func (c Config) capacity() sandgate.Capacity {
	return sandgate.Capacity{Runs: c.MaxConcurrent, Sessions: c.MaxSessions, SharePercent: c.TeamSharePercent}
}
