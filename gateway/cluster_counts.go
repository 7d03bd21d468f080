package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate"
)

// What the nodes of a cluster count together in the database: each
// admitted run's slot against its team's limits, and each idempotency
// key's claim.

// slotLimits are a team's limits as the cluster counts them.
func slotLimits(l sandgate.TeamLimits) sandgate.SlotLimits {
	sl := sandgate.SlotLimits{TeamMemoryMB: l.MemoryMB, TeamCPUs: l.CPUs}
	if l.Concurrent > 0 && l.Queued > 0 {
		sl.TeamRuns = l.Concurrent + l.Queued
	}
	return sl
}

// reserveSlot counts a run against its team's limits across the cluster.
// It returns RATE-LIMITED when the team is at one of them.
func (s *service) reserveSlot(ctx context.Context, runID, team string, l sandgate.TeamLimits, r sandgate.Resources) error {
	if s.cluster == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	sl := slotLimits(l)
	use, ok, err := s.cluster.store.ReserveSlot(rctx, sandgate.Slot{RunID: runID, Team: team, Node: s.cfg.Node, MemoryMB: r.MemoryMB, CPUs: r.CPUs}, sl)
	if err != nil {
		return failClosed(err, "the cluster's run slots")
	}
	if ok {
		return nil
	}
	return &sandgate.Error{Code: sandgate.CodeRateLimited,
		Message: fmt.Sprintf("team %s is at its limits across the cluster (%d runs, %d MB, %g CPUs held); retry later", team, use.TeamRuns, use.TeamMemoryMB, use.TeamCPUs),
		Details: map[string]any{"team": team, "scope": "cluster", "runs": use.TeamRuns, "memory_mb": use.TeamMemoryMB, "cpus": use.TeamCPUs,
			"limit_runs": sl.TeamRuns, "limit_memory_mb": sl.TeamMemoryMB, "limit_cpus": sl.TeamCPUs}}
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

// holdSlot counts an adopted run whatever its team's limits.
func (s *service) holdSlot(run sandgate.Run) {
	if s.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := s.cluster.store.HoldSlot(ctx, sandgate.Slot{RunID: run.ID, Team: run.Team, Node: s.cfg.Node,
		MemoryMB: run.Spec.Resources.MemoryMB, CPUs: run.Spec.Resources.CPUs}); err != nil {
		s.log.Warn("hold the run's slot", "run_id", run.ID, "error", err)
	}
}

// releaseSlot gives the run's slot back.
func (s *service) releaseSlot(runID string) {
	if s.cluster == nil {
		return
	}
	saveRetrying("release run slot", time.Now().Add(finalStoreFor), 500*time.Millisecond, s.log.With("run_id", runID),
		func(ctx context.Context) error { return s.cluster.store.ReleaseSlot(ctx, runID) })
}

// claimKey claims an idempotency key across the cluster for runID and
// the request's digest. It returns "" when this request is the one to
// decide, else the run the key names once that run exists, and the digest
// of the request that made it. A claim whose run does not appear (its
// request was being decided elsewhere and was refused) is taken again.
func (s *service) claimKey(ctx context.Context, principal, key, runID, digest string) (string, string, error) {
	if s.cluster == nil || key == "" {
		return "", "", nil
	}
	deadline := time.Now().Add(storeTimeout)
	for {
		held, heldDigest, err := s.cluster.store.ClaimIdempotencyKey(ctx, principal, key, runID, digest)
		if err != nil {
			return "", "", failClosed(err, "the idempotency keys")
		}
		if held == "" {
			return "", "", nil
		}
		if _, err := s.d.Runs.GetRun(ctx, held); err == nil {
			return held, heldDigest, nil
		}
		if time.Now().After(deadline) {
			return "", "", &sandgate.Error{Code: sandgate.CodeConflict,
				Message: fmt.Sprintf("a request with Idempotency-Key %q is still being admitted; retry later", key),
				Details: map[string]any{"run_id": held}}
		}
		select {
		case <-ctx.Done():
			return "", "", unavailable(ctx.Err(), "the idempotency keys")
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// releaseKey gives up a claim whose request made no run.
func (s *service) releaseKey(principal, key, runID string) {
	if s.cluster == nil || key == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := s.cluster.store.ReleaseIdempotencyKey(ctx, principal, key, runID); err != nil {
		s.log.Warn("release idempotency key", "error", err)
	}
}
