package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// Retention works on whole months: audit_events is partitioned by month of
// recorded_at (audit_events_YYYY_MM). A month is archived first (Archive:
// its rows and the checkpoints that sign them, written to files, verified
// offline and recorded as audit.archived), then dropped (Purge: only when
// the archive still matches the month, in the same transaction as the
// retention.applied event that records it). Verify starts each purged
// chain at the boundary retention.applied names.

// PurgeResult is what Purge did, or would do, to one partition.
type PurgeResult struct {
	Partition      proof.Partition `json:"partition"`
	ArchiveEventID string          `json:"archive_event_id"`
	Location       string          `json:"location"`
	// ArchiveVerified is set when the archive was readable here and was
	// verified again before the drop.
	ArchiveVerified bool   `json:"archive_verified"`
	Dropped         bool   `json:"dropped"`
	EventID         string `json:"event_id,omitempty"` // the retention.applied event
}

// covered checks that each chain's last row in p is under a signed
// checkpoint, so that what stays after a purge is still vouched for.
func (s *Retention) covered(ctx context.Context, p proof.Partition) error {
	for _, c := range p.Chains {
		var top *int64
		if err := s.pool.QueryRow(ctx, `SELECT max(seq) FROM audit_checkpoints WHERE chain_id = $1`, c.ChainID).Scan(&top); err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read checkpoints")
		}
		if top == nil || *top < c.LastSeq {
			return sandgate.Errorf(sandgate.CodeConflict, "partition %s: chain %s up to seq %d is not yet under a signed checkpoint; archive it after the next checkpoint",
				p.Name, c.ChainID, c.LastSeq)
		}
	}
	return nil
}

// lastArchive returns the newest audit.archived event of partition name.
func (s *Retention) lastArchive(ctx context.Context, name string) (*sandgate.AuditRecord, proof.ArchivedPayload, error) {
	var r eventRow
	rows, err := s.db.WithContext(ctx).Raw(`SELECT `+eventColumns+` FROM audit_events
		WHERE type = ? AND payload->>'partition' = ? ORDER BY recorded_at DESC, chain_id, seq DESC LIMIT 1`,
		string(sandgate.EventAuditArchived), name).Rows()
	if err != nil {
		return nil, proof.ArchivedPayload{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "find the archive of %s", name)
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, proof.ArchivedPayload{}, rows.Err()
	}
	if err := r.scan(rows); err != nil {
		return nil, proof.ArchivedPayload{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "find the archive of %s", name)
	}
	rec := r.record()
	p, err := proof.DecodeArchived(rec.Payload)
	if err != nil {
		return nil, proof.ArchivedPayload{}, fmt.Errorf("audit.archived %s: %w", rec.ID, err)
	}
	return &rec, p, nil
}

// Purge drops, oldest first, every month partition that ends at or before
// before (and before the current month), recording each drop as
// retention.applied in the same transaction. It stops at the first month
// it must refuse and says why: one never archived, one changed since its
// archive (rows or chain heads differ), rows of its chains older than it
// still elsewhere (a purge must remove a chain's oldest rows), or rows not
// under a checkpoint. Rows waiting in the default partition are first
// moved into their months (AdoptDefault), so a month of them is purged by
// the same rules. With dryRun it checks and reports without dropping or
// moving. The database role needs to own audit_events (DROP TABLE).
func (s *Retention) Purge(ctx context.Context, before time.Time, dryRun bool, actor string) ([]PurgeResult, error) {
	if s.writer.w == nil {
		return nil, sandgate.Errorf(sandgate.CodeAuditUnavailable, "purge needs a writing store: it records retention.applied")
	}
	limit := monthStart(s.cfg.Clock())
	if before.Before(limit) {
		limit = before
	}
	if !dryRun {
		if _, err := s.AdoptDefault(ctx); err != nil {
			return nil, err
		}
	}
	parts, err := s.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	var out []PurgeResult
	var dropping []string // this run's partitions so far, and p
	for _, p := range parts {
		if p.Default || p.To.After(limit) {
			continue
		}
		dropping = append(dropping, p.Name)
		rec, archived, err := s.lastArchive(ctx, p.Name)
		if err != nil {
			return out, err
		}
		if rec == nil {
			return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s was never archived: run sandgate audit archive first", p.Name)
		}
		if err := sameAsArchived(p, archived); err != nil {
			return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s changed since it was archived (%s, event %s): %v; archive it again",
				p.Name, rec.RecordedAt.Format(time.RFC3339), rec.ID, err)
		}
		if err := s.covered(ctx, p); err != nil {
			return out, err
		}
		res := PurgeResult{Partition: p, ArchiveEventID: rec.ID, Location: archived.Location}
		if _, err := os.Stat(filepath.Join(archived.Location, proof.ArchiveManifestFile)); err == nil {
			// The archive is reachable from here: it must still verify.
			keys, err := s.archiveKeys(ctx)
			if err != nil {
				return out, err
			}
			rep, err := proof.VerifyArchive(archived.Location, keys...)
			if err != nil {
				return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s: its archive at %s does not verify (%v); archive it again", p.Name, archived.Location, err)
			}
			if !rep.OK {
				return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s: its archive at %s does not verify (%d problems, first: %s: %s); archive it again",
					p.Name, archived.Location, len(rep.Problems), rep.Problems[0].Kind, rep.Problems[0].Detail)
			}
			res.ArchiveVerified = true
		}
		for _, c := range p.Chains {
			var older int64
			err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE chain_id = $1 AND seq <= $2 AND tableoid <> ALL($3::regclass[])`,
				c.ChainID, c.LastSeq, dropping).Scan(&older)
			if err != nil {
				return out, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "check partition %s", p.Name)
			}
			if older > 0 {
				return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s: %d rows of chain %s up to seq %d are in other partitions; purge must remove a chain's oldest rows",
					p.Name, older, c.ChainID, c.LastSeq)
			}
		}
		if dryRun {
			out = append(out, res)
			continue
		}
		// The trees of the dropped rows, stored first where they are not
		// yet: audit_tree_hashes is never purged.
		trees, err := s.purgeTrees(ctx, p)
		if err != nil {
			return out, err
		}
		ev := sandgate.NewRetentionApplied(sandgate.Subject{Actor: actor}, time.Time{},
			proof.ArchivedPayload{Partition: p.Name, From: p.From, To: p.To, Rows: p.Rows, Chains: p.Chains,
				ManifestSHA256: archived.ManifestSHA256, Location: archived.Location, ArchiveEventID: rec.ID, Trees: trees}.AsMap())
		ev.ID = s.cfg.IDs()
		table := pgx.Identifier{p.Name}.Sanitize()
		err = s.writer.recordWith(ctx, ev, func(ctx context.Context, tx pgx.Tx) error {
			// Nothing may land in the month between the checks and the
			// drop: SHARE stops writes to it and lets readers go on. The
			// drop needs audit_events itself exclusively, taken next,
			// before the month's exclusive lock: a query of the trail
			// holds audit_events and then each month, so taking the
			// month exclusively first would deadlock with it.
			if _, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN SHARE MODE`); err != nil {
				return err
			}
			var rows int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&rows); err != nil {
				return err
			}
			if rows != p.Rows {
				return fmt.Errorf("partition %s changed during purge (%d rows, now %d)", p.Name, p.Rows, rows)
			}
			if _, err := tx.Exec(ctx, `LOCK TABLE audit_events IN ACCESS EXCLUSIVE MODE`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `DROP TABLE `+table)
			return err
		})
		if err != nil {
			return out, err
		}
		res.Dropped, res.EventID = true, ev.ID
		out = append(out, res)
		dropping = dropping[:len(dropping)-1] // gone: no longer a relation
	}
	return out, nil
}

// sameAsArchived reports how p differs from what its archive recorded.
func sameAsArchived(p proof.Partition, a proof.ArchivedPayload) error {
	if p.Rows != a.Rows {
		return fmt.Errorf("%d rows now, %d archived", p.Rows, a.Rows)
	}
	if len(p.Chains) != len(a.Chains) {
		return fmt.Errorf("%d chains now, %d archived", len(p.Chains), len(a.Chains))
	}
	for i, c := range p.Chains {
		if c != a.Chains[i] {
			return fmt.Errorf("chain %s: seq %d–%d (%s) now, %d–%d (%s) archived", c.ChainID, c.FirstSeq, c.LastSeq, c.LastHash,
				a.Chains[i].FirstSeq, a.Chains[i].LastSeq, a.Chains[i].LastHash)
		}
	}
	return nil
}

// recordWith is Record for one event that commits together with also.
func (s *Store) recordWith(ctx context.Context, ev sandgate.Event, also func(context.Context, pgx.Tx) error) error {
	return s.await(ctx, &request{events: []proof.Canonical{s.prepare(ev)}, done: make(chan error, 1), ctx: ctx, also: also})
}
