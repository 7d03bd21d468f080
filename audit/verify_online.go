package audit

import (
	"context"
	"math"
	"runtime"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// Verify against the live trail: the verifier fed from the database, with
// its clock. verify_export.go feeds it an export, archive.go an archive.

// Verify checks the trail over r and returns the problems found (see
// VerifyTrail, which also lists the keys). The error is AUDIT-UNAVAILABLE
// when the database cannot be read.
func (s *Verifier) Verify(ctx context.Context, r sandgate.VerifyRange) (sandgate.VerifyReport, error) {
	rep, err := s.VerifyTrail(ctx, r)
	return rep.VerifyReport, err
}

// VerifyTrail checks the trail over r: every row's hash, its columns
// against its hashed body, seq continuity and prev_hash links per chain,
// every checkpoint's signature and the links between checkpoints, that
// each checkpoint's seq still has the hash it signed, and each key: with
// Config.TrustedKeys, every key outside them is a problem; without, the
// key registry decides which keys are known (a node's first key, a
// rotation its predecessor endorsed). For the whole chain it checks its
// tail: rows a checkpoint covers must exist (deleting the newest rows is
// caught); rows no checkpoint by a known key covers (a chain someone else
// added, or a tail whose checkpoints were removed) must be younger than
// twice CheckpointInterval, judged at the later of the database's clock and
// this Store's; a newest checkpoint that is not final must be as young;
// and no row may be recorded after the database's clock. The report lists
// the keys with their node and first use. The error is AUDIT-UNAVAILABLE
// when the database cannot be read; problems are in the report.
func (s *Verifier) VerifyTrail(ctx context.Context, r sandgate.VerifyRange) (proof.Report, error) {
	var dbNow time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		return proof.Report{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the database's clock")
	}
	keys, err := s.keys(ctx)
	if err != nil {
		return proof.Report{}, err
	}
	endorsements, err := s.endorsements(ctx)
	if err != nil {
		return proof.Report{}, err
	}
	v := proof.NewOnlineVerifier(s.cfg.Anchors, keys, endorsements, dbNow, s.cfg.Clock(), s.cfg.CheckpointInterval)
	chains, err := s.chainIDs(ctx, r.ChainID)
	if err != nil {
		return proof.Report{}, err
	}
	partial := r.ToSeq > 0 || !r.Until.IsZero()
	for _, chain := range chains {
		cps, err := s.checkpointsOf(ctx, chain)
		if err != nil {
			return proof.Report{}, err
		}
		v.Checkpoints(chain, cps)
		if partial {
			v.Partial(chain)
		}
	}
	refs, err := s.retentionRecords(ctx)
	if err != nil {
		return proof.Report{}, err
	}
	purged, err := v.PurgeBoundaries(refs, func(chain string) ([]proof.Checkpoint, error) { return s.checkpointsOf(ctx, chain) })
	if err != nil {
		return proof.Report{}, err
	}
	// Chains are read and checked on as many goroutines as there are
	// CPUs, each on its own connection, and their findings joined in chain
	// order: the report is the one reading them in turn gives.
	forks := make([]*proof.Verifier, len(chains))
	for i, chain := range chains {
		forks[i] = v.Fork(chain)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, min(runtime.GOMAXPROCS(0), int(s.cfg.MaxConns)/2)))
	for i, chain := range chains {
		g.Go(func() error { return s.verifyChain(gctx, forks[i], chain, r, purged) })
	}
	if err := g.Wait(); err != nil {
		return proof.Report{}, err
	}
	for _, f := range forks {
		v.Join(f)
	}
	// Every row read was committed before this.
	var end time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&end); err != nil {
		return proof.Report{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the database's clock")
	}
	return v.Finish(end), nil
}

// verifyChain feeds v, a fork of the trail's verifier, the rows of chain
// within r (after the rows retention purged), read with pgx's own rows.
func (s *Verifier) verifyChain(ctx context.Context, v *proof.Verifier, chain string, r sandgate.VerifyRange, purged map[string]proof.PurgeBoundary) error {
	from, to := r.FromSeq, r.ToSeq
	if !r.Since.IsZero() || !r.Until.IsZero() {
		q := s.db.WithContext(ctx).Table("audit_events").Where("chain_id = ?", chain)
		if !r.Since.IsZero() {
			q = q.Where("recorded_at >= ?", r.Since)
		}
		if !r.Until.IsZero() {
			q = q.Where("recorded_at < ?", r.Until)
		}
		var span struct{ Lo, Hi *int64 }
		if err := q.Select("min(seq) AS lo, max(seq) AS hi").Scan(&span).Error; err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain span")
		}
		if span.Lo == nil {
			return nil
		}
		from, to = max(from, *span.Lo), *span.Hi
		if r.ToSeq > 0 {
			to = min(to, r.ToSeq)
		}
	}
	if a, ok := purged[chain]; ok && from <= a.Seq+1 {
		// Retention dropped the chain's rows up to a.Seq.
		from = a.Seq + 1
		v.StartAfterPurge(chain, a)
	} else if from > 1 {
		var prev []byte
		err := s.pool.QueryRow(ctx, `SELECT hash FROM audit_events WHERE chain_id = $1 AND seq = $2`, chain, from-1).Scan(&prev)
		if err != nil {
			prev = nil
		}
		v.Anchor(chain, from, prev)
	}
	if to <= 0 {
		to = math.MaxInt64
	}
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM audit_events WHERE chain_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq`,
		chain, from, to)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain %s", chain)
	}
	defer rows.Close()
	var er eventRow
	for rows.Next() {
		er = eventRow{}
		if err := er.scan(rows); err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain %s", chain)
		}
		v.Row(&proof.Row{ChainID: er.ChainID, Seq: er.Seq, RecordedAt: er.RecordedAt, Event: er.event(),
			PayloadJSON: er.Payload, Body: er.Body, PrevHash: er.PrevHash, Hash: er.Hash})
	}
	if err := rows.Err(); err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain %s", chain)
	}
	return nil
}

// endorsements reads the root endorsements the trail records
// (audit.key_endorsed), oldest first.
func (s *trailDB) endorsements(ctx context.Context) ([]proof.Endorsement, error) {
	rows, err := s.pool.Query(ctx, `SELECT payload FROM audit_events WHERE type = $1 ORDER BY recorded_at, chain_id, seq`,
		string(sandgate.EventAuditKeyEndorsed))
	if err != nil {
		return nil, dbErr(err, "read key endorsements")
	}
	defer rows.Close()
	var out []proof.Endorsement
	for rows.Next() {
		var p map[string]any
		if err := rows.Scan(&p); err != nil {
			return nil, dbErr(err, "read key endorsements")
		}
		if e, ok := proof.EndorsementFromEvent(sandgate.Event{Type: sandgate.EventAuditKeyEndorsed, Payload: p}); ok {
			out = append(out, e)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err, "read key endorsements")
	}
	return out, nil
}

// checkpointsOf returns chain's checkpoints in chain order.
func (s *trailDB) checkpointsOf(ctx context.Context, chain string) ([]proof.Checkpoint, error) {
	var cps []proof.Checkpoint
	err := s.eachCheckpoint(ctx, chain, func(cp proof.Checkpoint) error {
		cps = append(cps, cp)
		return nil
	})
	return cps, err
}

// chainIDs lists the chains to check: the registered ones and any that
// have rows or checkpoints.
func (s *trailDB) chainIDs(ctx context.Context, only string) ([]string, error) {
	if only != "" {
		return []string{only}, nil
	}
	var ids []string
	err := s.db.WithContext(ctx).Raw(`SELECT chain_id FROM audit_chains
		UNION SELECT DISTINCT chain_id FROM audit_checkpoints
		UNION SELECT DISTINCT chain_id FROM audit_events ORDER BY 1`).Scan(&ids).Error
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "list chains")
	}
	return ids, nil
}
