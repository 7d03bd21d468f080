package gateway

import (
	"context"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
)

// The slots of the runs this node adopts, in the cluster's count
// (admission counts the runs it admits).

// holdSlot counts an adopted run whatever its team's limits.
func (s *runs) holdSlot(run sandgate.Run) {
	if s.d.Cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := s.d.Cluster.HoldSlot(ctx, sandgate.Slot{RunID: run.ID, Team: run.Team, Node: s.cfg.Node,
		MemoryMB: run.Spec.Resources.MemoryMB, CPUs: run.Spec.Resources.CPUs}); err != nil {
		s.log.Warn("hold the run's slot", "run_id", run.ID, "error", err)
	}
}

// releaseSlot gives the run's slot back.
func (s *runs) releaseSlot(runID string) {
	if s.d.Cluster == nil {
		return
	}
	admission.SaveRetrying("release run slot", time.Now().Add(finalStoreFor), 500*time.Millisecond, s.log.With("run_id", runID),
		func(ctx context.Context) error { return s.d.Cluster.ReleaseSlot(ctx, runID) })
}
