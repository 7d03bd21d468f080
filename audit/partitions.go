package audit

import (
	"context"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// audit_events is partitioned by UTC month of recorded_at
// (audit_events_YYYY_MM); audit_events_default takes the rows no month
// covers. Writers create the months ahead; AdoptDefault moves the rows that
// wait in the default partition into their months.

const (
	partitionPrefix  = "audit_events_"
	defaultPartition = "audit_events_default"
)

// partitionMonth parses a month partition's name into its bounds.
func partitionMonth(name string) (from, to time.Time, ok bool) {
	t, err := time.Parse("2006_01", strings.TrimPrefix(name, partitionPrefix))
	if err != nil || !strings.HasPrefix(name, partitionPrefix) {
		return time.Time{}, time.Time{}, false
	}
	return t, t.AddDate(0, 1, 0), true
}

// Partitions lists the partitions of audit_events, oldest month first and
// the default partition last, with their rows per chain.
func (s *Retention) Partitions(ctx context.Context) ([]proof.Partition, error) {
	var names []string
	err := s.db.WithContext(ctx).Raw(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'audit_events'::regclass`).Scan(&names).Error
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "list partitions")
	}
	var out []proof.Partition
	for _, name := range names {
		p := proof.Partition{Name: name, Default: name == defaultPartition}
		if !p.Default {
			var ok bool
			if p.From, p.To, ok = partitionMonth(name); !ok {
				continue // not sandgate's
			}
		}
		if err := s.partitionStats(ctx, &p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b proof.Partition) int {
		if a.Default != b.Default {
			if a.Default {
				return 1
			}
			return -1
		}
		return a.From.Compare(b.From)
	})
	return out, nil
}

// AdoptDefault moves the rows that wait in audit_events_default (their
// month had no partition when they were written) into the month
// partitions of their recorded_at, creating those, and returns how many
// it moved. Archive and Purge do it first, and writers whenever they make
// the months ahead, so retention handles those rows like any other. While
// it moves rows, writers wait.
func (s *Retention) AdoptDefault(ctx context.Context) (int64, error) {
	var moved int64
	if err := s.pool.QueryRow(ctx, `SELECT audit_adopt_default()`).Scan(&moved); err != nil {
		return 0, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "move the default partition's rows into their months")
	}
	if moved > 0 {
		s.cfg.Logger.Info("audit: rows moved from audit_events_default into their month partitions", "rows", moved)
	}
	return moved, nil
}

// partitionStats fills p's rows and chains from the partition itself.
func (s *Retention) partitionStats(ctx context.Context, p *proof.Partition) error {
	table := pgx.Identifier{p.Name}.Sanitize()
	rows, err := s.pool.Query(ctx, `SELECT chain_id, count(*), min(seq), max(seq) FROM `+table+` GROUP BY chain_id ORDER BY chain_id`)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read partition %s", p.Name)
	}
	p.Chains, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (proof.PartitionChain, error) {
		var c proof.PartitionChain
		err := r.Scan(&c.ChainID, &c.Rows, &c.FirstSeq, &c.LastSeq)
		return c, err
	})
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read partition %s", p.Name)
	}
	p.Rows = 0
	for i := range p.Chains {
		c := &p.Chains[i]
		p.Rows += c.Rows
		var prev, last []byte
		err := s.pool.QueryRow(ctx, `SELECT (SELECT prev_hash FROM `+table+` WHERE chain_id = $1 AND seq = $2 LIMIT 1),
			(SELECT hash FROM `+table+` WHERE chain_id = $1 AND seq = $3 LIMIT 1)`, c.ChainID, c.FirstSeq, c.LastSeq).Scan(&prev, &last)
		if err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read partition %s", p.Name)
		}
		c.PrevHash, c.LastHash = hex.EncodeToString(prev), hex.EncodeToString(last)
	}
	if p.Chains == nil {
		p.Chains = []proof.PartitionChain{}
	}
	return nil
}

// partition returns the month partition named name, refusing the default
// partition, unknown names and months that are not over.
func (s *Retention) partition(ctx context.Context, name string) (proof.Partition, error) {
	from, to, ok := partitionMonth(name)
	if !ok {
		return proof.Partition{}, sandgate.FieldError("partition", "%q is not a month partition (audit_events_YYYY_MM)", name)
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
		return proof.Partition{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "find partition %s", name)
	}
	if !exists {
		return proof.Partition{}, sandgate.Errorf(sandgate.CodeNotFound, "partition %s does not exist (already purged, or never created)", name)
	}
	if thisMonth := monthStart(s.cfg.Clock()); to.After(thisMonth) {
		return proof.Partition{}, sandgate.Errorf(sandgate.CodeConflict, "partition %s is not over yet: only months before %s can be archived or purged", name, thisMonth.Format("2006-01"))
	}
	p := proof.Partition{Name: name, From: from, To: to}
	return p, s.partitionStats(ctx, &p)
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

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
	err := w.s.ctl.QueryRow(ctx, `SELECT audit_ensure_partitions($1, $2)`, now, now.Add(partitionsAhead)).Scan(&created)
	if err != nil {
		w.logf("audit: cannot create the month partitions ahead; new rows go to audit_events_default until it works", "err", err)
		return
	}
	if created > 0 {
		w.cfg.Logger.Info("audit: month partitions created", "count", created)
	}
}
