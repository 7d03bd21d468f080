package gateway

import (
	"context"
	"sync/atomic"

	"github.com/sandgate/sandgate/admission"
)

// node is this gateway node's own life: the runs and sessions it
// executes, what it takes over after a restart (reconcile.go), its part
// in a cluster (cluster.go), and its shutdown.
type node struct {
	base
	runs     *runs
	sessions *sessions
	// teams counts each team's runs and sessions here, with the gate: the
	// ones it adopts hold their places whatever the limits.
	teams *admission.Teams
	// cluster is this node's part in a cluster; nil for a node alone.
	cluster  *cluster
	draining atomic.Bool
}

// shutdown ends the runs (runs.shutdown), then the sessions: a command
// in a session needs its session to finish.
func (n *node) shutdown(ctx context.Context) error {
	n.draining.Store(true)
	defer n.sessions.endAll(ctx)
	return n.runs.shutdown(ctx)
}
