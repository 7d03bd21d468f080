package sandgate_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// TestCapacityEffective: a team's concurrent and sessions follow the
// node's share when the bundle sets none, and the lower of the two when
// it does; the zero capacity bounds nothing.
func TestCapacityEffective(t *testing.T) {
	node := sandgate.Capacity{Runs: 2, Sessions: 8, SharePercent: 50}
	for _, tc := range []struct {
		name string
		c    sandgate.Capacity
		in   sandgate.TeamLimits
		want sandgate.TeamLimits
	}{
		{"unset follows the node", node, sandgate.TeamLimits{Queued: 64}, sandgate.TeamLimits{Concurrent: 1, Sessions: 4, Queued: 64}},
		{"above the share is bounded", node, sandgate.TeamLimits{Concurrent: 8, Sessions: 20}, sandgate.TeamLimits{Concurrent: 1, Sessions: 4}},
		{"below the share is kept", sandgate.Capacity{Runs: 16, Sessions: 16, SharePercent: 50}, sandgate.TeamLimits{Concurrent: 3, Sessions: 2}, sandgate.TeamLimits{Concurrent: 3, Sessions: 2}},
		{"a share rounds up", sandgate.Capacity{Runs: 3, Sessions: 1, SharePercent: 50}, sandgate.TeamLimits{}, sandgate.TeamLimits{Concurrent: 2, Sessions: 1}},
		{"a whole node", sandgate.Capacity{Runs: 4, Sessions: 4, SharePercent: 100}, sandgate.TeamLimits{}, sandgate.TeamLimits{Concurrent: 4, Sessions: 4}},
		{"no capacity", sandgate.Capacity{}, sandgate.TeamLimits{Concurrent: 8}, sandgate.TeamLimits{Concurrent: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.c.Effective(tc.in)); diff != "" {
				t.Errorf("Effective (-want +got):\n%s", diff)
			}
		})
	}
}
