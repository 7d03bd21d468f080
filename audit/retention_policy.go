package audit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// The retention period: how long the trail keeps a month before
// retention archives it (when an archive directory is configured) and
// drops it. Applied by every gateway periodically (one at a time: an
// advisory lock) and by `sandgate audit retention`.

// DefaultRetention is the retention period when none is configured:
// thirteen months, a full year before the current month (PCI DSS asks for
// twelve months of audit history).
const DefaultRetention = "13mo"

// RetentionPeriod is how long the trail keeps its months. The zero
// period keeps them for ever.
type RetentionPeriod struct {
	Months int
	Days   int
}

// ParseRetentionPeriod reads a period: months ("13mo"), days ("400d"),
// or "forever" (also "off", "0"), which keeps everything.
func ParseRetentionPeriod(s string) (RetentionPeriod, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	switch s {
	case "forever", "off", "0", "never":
		return RetentionPeriod{}, nil
	}
	num, unit := s, ""
	for _, u := range []string{"mo", "d"} {
		if strings.HasSuffix(s, u) {
			num, unit = strings.TrimSuffix(s, u), u
			break
		}
	}
	n, err := strconv.Atoi(num)
	if unit == "" || err != nil || n < 1 || n > 1200 {
		return RetentionPeriod{}, fmt.Errorf("%q is not a retention period: months (13mo), days (400d) or forever", s)
	}
	if unit == "mo" {
		return RetentionPeriod{Months: n}, nil
	}
	if n > 36500 {
		return RetentionPeriod{}, fmt.Errorf("%q is longer than a century", s)
	}
	return RetentionPeriod{Days: n}, nil
}

// Forever reports whether the period keeps everything.
func (p RetentionPeriod) Forever() bool { return p.Months == 0 && p.Days == 0 }

// String writes the period as ParseRetentionPeriod reads it.
func (p RetentionPeriod) String() string {
	switch {
	case p.Forever():
		return "forever"
	case p.Months > 0:
		return strconv.Itoa(p.Months) + "mo"
	}
	return strconv.Itoa(p.Days) + "d"
}

// Cutoff is the time before which a month has expired at now: a month
// is dropped once all of it is older than the period.
func (p RetentionPeriod) Cutoff(now time.Time) time.Time {
	return now.UTC().AddDate(0, -p.Months, -p.Days)
}

// RetentionResult is what ApplyRetention did.
type RetentionResult struct {
	Period string `json:"period"`
	// Cutoff is when the months dropped end at the latest.
	Cutoff   time.Time               `json:"cutoff,omitzero"`
	Archived []proof.ArchiveManifest `json:"archived"`
	Purged   []PurgeResult           `json:"purged"`
	// Busy is set when another gateway was applying retention.
	Busy bool `json:"busy,omitempty"`
}

// retentionLock keys the advisory lock one gateway at a time applies
// retention under.
const retentionLock = "sandgate-audit-retention"

// ApplyRetention drops the months that have expired under period, oldest
// first, each as Purge does (recorded as retention.applied in this
// Store's chain, in the transaction of the drop). With archiveDir, an
// expired month never archived, or changed since its archive, is first
// archived there (audit.archived); without, only months an operator
// archived are dropped, and the first one that was not stops it (CONFLICT,
// as Purge). With dryRun, it reports what it would do and changes
// nothing. Gateways apply it one at a time: when another holds the lock,
// it does nothing and says Busy.
func (s *Retention) ApplyRetention(ctx context.Context, period RetentionPeriod, archiveDir string, dryRun bool, actor string) (RetentionResult, error) {
	res := RetentionResult{Period: period.String(), Archived: []proof.ArchiveManifest{}, Purged: []PurgeResult{}}
	if period.Forever() {
		return res, nil
	}
	res.Cutoff = period.Cutoff(s.cfg.Clock())
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, dbErr(err, "apply retention")
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, retentionLock).Scan(&locked); err != nil {
		return res, dbErr(err, "apply retention")
	}
	if !locked {
		res.Busy = true
		return res, nil
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext($1))`, retentionLock)

	if archiveDir != "" && !dryRun {
		if _, err := s.AdoptDefault(ctx); err != nil {
			return res, err
		}
		parts, err := s.Partitions(ctx)
		if err != nil {
			return res, err
		}
		for _, p := range parts {
			if p.Default || p.To.After(res.Cutoff) || p.To.After(monthStart(s.cfg.Clock())) {
				continue
			}
			rec, archived, err := s.lastArchive(ctx, p.Name)
			if err != nil {
				return res, err
			}
			if rec != nil && sameAsArchived(p, archived) == nil {
				continue
			}
			m, err := s.Archive(ctx, p.Name, archiveDir, actor)
			if err != nil {
				return res, err
			}
			res.Archived = append(res.Archived, m)
		}
	}
	purged, err := s.Purge(ctx, res.Cutoff, dryRun, actor)
	if purged != nil {
		res.Purged = purged
	}
	if err != nil {
		return res, err
	}
	return res, nil
}

// retentionActor is who a gateway's periodic retention is recorded as.
const retentionActor = "sandgate:retention"

// RetentionLoop applies period every interval until ctx ends (the first
// time after one interval), logging what it dropped and, once per
// distinct cause, why it could not. A gateway runs it.
func (s *Retention) RetentionLoop(ctx context.Context, period RetentionPeriod, archiveDir string, interval time.Duration) {
	if period.Forever() || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := s.ApplyRetention(ctx, period, archiveDir, false, retentionActor)
		for _, p := range res.Purged {
			if p.Dropped {
				s.cfg.Logger.Info("audit retention: month dropped", "partition", p.Partition.Name, "rows", p.Partition.Rows,
					"event_id", p.EventID, "period", res.Period)
			}
		}
		switch {
		case err == nil:
			lastErr = ""
		case ctx.Err() != nil:
			return
		case err.Error() != lastErr:
			lastErr = err.Error()
			level := s.cfg.Logger.Warn
			if sandgate.ErrorCodeOf(err) == sandgate.CodeConflict {
				level = s.cfg.Logger.Info // waiting for an operator's archive
			}
			level("audit retention: expired months kept", "period", res.Period, "err", err)
		}
	}
}
