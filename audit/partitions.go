package audit

import (
	"context"
	"time"
)

// audit_events is partitioned by UTC month of recorded_at.

// partitionCheckInterval is how often a writer makes sure the month
// partitions ahead exist; partitionsAhead is how far ahead.
const (
	partitionCheckInterval = time.Hour
	partitionsAhead        = 3 * 31 * 24 * time.Hour
)

// ensurePartitions creates the month partitions of audit_events from this
// month to about three months ahead that do not exist yet. Failing is not
// fatal: rows no month partition covers go to the default partition.
func (w *writer) ensurePartitions() {
	w.lastEnsure = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := w.cfg.Clock()
	var created int
	err := w.s.pool.QueryRow(ctx, `SELECT audit_ensure_partitions($1, $2)`, now, now.Add(partitionsAhead)).Scan(&created)
	if err != nil {
		w.logf("audit: cannot create the month partitions ahead; new rows go to audit_events_default until it works", "err", err)
		return
	}
	if created > 0 {
		w.cfg.Logger.Info("audit: month partitions created", "count", created)
	}
}
