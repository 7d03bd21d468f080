package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/audit/proof"
)

// How sealed records become audit_events rows: a small fresh batch in one
// statement, a larger one by COPY, a redelivery through a staging table
// that skips rows already stored; each moves the chain's head in
// audit_heads in the same transaction.

// stageSQL creates the per-connection staging table redeliveries are
// copied into; rows leave it at commit.
const stageSQL = `CREATE TEMP TABLE IF NOT EXISTS audit_stage (
	event_id uuid, chain_id text, seq bigint, recorded_at timestamptz, event_time timestamptz, type text,
	outcome text, correlation_id text, run_id text, decision_id text, container_id text, actor text,
	team text, node text, policy_revision text, exit_code integer, payload jsonb, body bytea,
	prev_hash bytea, hash bytea) ON COMMIT DELETE ROWS`

var eventColumnNames = []string{"event_id", "chain_id", "seq", "recorded_at", "event_time", "type",
	"outcome", "correlation_id", "run_id", "decision_id", "container_id", "actor", "team", "node",
	"policy_revision", "exit_code", "payload", "body", "prev_hash", "hash"}

// recordedAtColumn is recorded_at's place in eventColumnNames.
const recordedAtColumn = 3

// moveSQL moves staged rows (of cols) into the trail, skipping those whose
// event is there already: a redelivered record is the same sealed event,
// with the same event_id. Without recorded_at in cols the database stamps
// the rows as it takes them.
func moveSQL(cols []string) string {
	list := strings.Join(cols, ", ")
	return `INSERT INTO audit_events (` + list + `)
SELECT ` + list + ` FROM audit_stage s
WHERE NOT EXISTS (SELECT FROM audit_events e WHERE e.event_id = s.event_id)
ORDER BY seq`
}

func textOrNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// insert writes recs in one transaction (one commit, synchronous). Fresh
// records, sealed on a head known to be in Postgres, cannot be there yet:
// they are copied straight into audit_events. A redelivery (spooled
// records, or a batch whose commit outcome was unknown) may be partly
// there: it is copied into a temporary staging table and moved with one
// INSERT … SELECT that skips the records already stored, so it is
// idempotent.
func (w *writer) insert(recs []*sealed, redelivery bool) error {
	return w.insertWith(recs, redelivery, nil)
}

// insertWith is insert that also runs also, when not nil, in the
// transaction after the rows.
func (w *writer) insertWith(recs []*sealed, redelivery bool, also func(context.Context, pgx.Tx) error) error {
	rows, err := w.eventRows(recs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !redelivery && also == nil && len(recs) <= smallBatch {
		return w.appendSmall(ctx, recs, rows)
	}
	conn, err := w.s.ctl.Acquire(ctx)
	if err != nil {
		return notCommitted{fmt.Errorf("insert %d audit events: %w", len(recs), err)}
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return notCommitted{fmt.Errorf("insert %d audit events: %w", len(recs), err)}
	}
	step := func() error {
		if !redelivery {
			if err := w.copyFresh(ctx, tx, recs, rows); err != nil || also == nil {
				return err
			}
			return also(ctx, tx)
		}
		if _, err := tx.Exec(ctx, stageSQL); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_stage"}, w.cols, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		if err := checkContinuity(ctx, tx); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, moveSQL(w.cols))
		if err != nil {
			return err
		}
		w.moved = tag.RowsAffected()
		_, err = tx.Exec(ctx, `INSERT INTO audit_heads AS h (chain_id, seq, hash)
			SELECT DISTINCT ON (chain_id) chain_id, seq, hash FROM audit_stage ORDER BY chain_id, seq DESC
			ON CONFLICT (chain_id) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash WHERE h.seq < EXCLUDED.seq`)
		return err
	}
	if err := step(); err != nil {
		_ = tx.Rollback(ctx)
		return notCommitted{fmt.Errorf("insert %d audit events: %w", len(recs), err)}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit %d audit events: %w", len(recs), err)
	}
	return nil
}

// copyFresh copies fresh records (rows, as eventRows made them) into
// audit_events in tx and moves the chain's head.
func (w *writer) copyFresh(ctx context.Context, tx pgx.Tx, recs []*sealed, rows [][]any) error {
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_events"}, w.cols, pgx.CopyFromRows(rows)); err != nil {
		return err
	}
	return advanceHead(ctx, tx, recs)
}

// eventRows returns recs as rows of w.cols.
func (w *writer) eventRows(recs []*sealed) ([][]any, error) {
	rows := make([][]any, len(recs))
	for i, r := range recs {
		ev := r.Event
		id, err := uuid.Parse(ev.ID)
		if err != nil {
			return nil, notCommitted{fmt.Errorf("event_id %q: %w", ev.ID, err)}
		}
		var exit, payload any
		if ev.ExitCode != nil {
			exit = int32(*ev.ExitCode)
		}
		if r.payload != nil {
			payload = []byte(r.payload)
		} else {
			// Read back from the spool: the hashed body holds the payload
			// (records an older version spooled hold it in Event as well).
			p, err := proof.PayloadOf(r.Body)
			if err != nil {
				return nil, notCommitted{fmt.Errorf("event %s: payload of its body: %w", ev.ID, err)}
			}
			if p != nil {
				payload = []byte(p)
			}
		}
		row := []any{[16]byte(id), r.ChainID, r.Seq, r.RecordedAt, ev.Time, string(ev.Type),
			textOrNil(ev.Outcome), textOrNil(ev.CorrelationID), textOrNil(ev.RunID), textOrNil(ev.DecisionID),
			textOrNil(ev.ContainerID), textOrNil(ev.Actor), textOrNil(ev.Team), textOrNil(ev.Node),
			textOrNil(ev.PolicyRevision), exit, payload, r.Body, r.PrevHash, r.Hash}
		if len(w.cols) < len(row) {
			row = slices.Delete(row, recordedAtColumn, recordedAtColumn+1)
		}
		rows[i] = row
	}
	return rows, nil
}

// smallBatch is the most records appendSmall writes with one statement;
// larger batches go through COPY in a transaction.
const smallBatch = 32

// eventCasts are the parameter types of one row in appendSmall's VALUES.
var eventCasts = []string{"uuid", "text", "bigint", "timestamptz", "timestamptz", "text", "text", "text", "text",
	"text", "text", "text", "text", "text", "text", "integer", "jsonb", "bytea", "bytea", "bytea"}

// appendSmall writes a few fresh records (a decision, typically) with one
// statement in its own implicit transaction: a single round trip, so a
// decision's commit waits for as few wake-ups of a busy machine as it can.
// The head moves in the same statement, and rows are inserted only if it
// moved from the head they were sealed on.
func (w *writer) appendSmall(ctx context.Context, recs []*sealed, rows [][]any) error {
	first, last := recs[0], recs[len(recs)-1]
	var q strings.Builder
	args := make([]any, 0, 5+len(rows)*len(w.casts))
	args = append(args, last.ChainID, last.Seq, last.Hash, first.Seq-1, first.PrevHash)
	if first.Seq == 1 {
		q.WriteString(`WITH head AS (INSERT INTO audit_heads (chain_id, seq, hash) VALUES ($1, $2, $3)
			ON CONFLICT (chain_id) DO NOTHING RETURNING $4::bigint, $5::bytea)`)
	} else {
		q.WriteString(`WITH head AS (UPDATE audit_heads SET seq = $2, hash = $3
			WHERE chain_id = $1 AND seq = $4 AND hash = $5 RETURNING 1)`)
	}
	q.WriteString(" INSERT INTO audit_events (" + strings.Join(w.cols, ", ") + ") SELECT * FROM (VALUES ")
	for i, row := range rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteByte('(')
		for j, v := range row {
			if j > 0 {
				q.WriteString(", ")
			}
			args = append(args, v)
			fmt.Fprintf(&q, "$%d::%s", len(args), w.casts[j])
		}
		q.WriteByte(')')
	}
	q.WriteString(") AS v WHERE EXISTS (SELECT FROM head)")
	tag, err := w.s.ctl.Exec(ctx, q.String(), args...)
	if err != nil {
		return fmt.Errorf("insert %d audit events: %w", len(recs), err)
	}
	if tag.RowsAffected() != int64(len(recs)) {
		return notCommitted{fmt.Errorf("chain %s at seq %d: %w", last.ChainID, first.Seq-1, errChainAdvanced)}
	}
	return nil
}

// errChainAdvanced is a fresh batch refused because its chain's head in
// Postgres is not the one it was sealed on: another process writes the
// same chain.
var errChainAdvanced = errors.New("the chain's head in Postgres moved past this writer's: another process writes the same chain ID")

// advanceHead moves the chain's head in audit_heads from the one recs were
// sealed on to their last, in recs' transaction; it refuses when the head
// is elsewhere, so two writers cannot fork a chain.
func advanceHead(ctx context.Context, tx pgx.Tx, recs []*sealed) error {
	first, last := recs[0], recs[len(recs)-1]
	if first.Seq == 1 {
		_, err := tx.Exec(ctx, `INSERT INTO audit_heads (chain_id, seq, hash) VALUES ($1, $2, $3)`, last.ChainID, last.Seq, last.Hash)
		return err
	}
	tag, err := tx.Exec(ctx, `UPDATE audit_heads SET seq = $2, hash = $3 WHERE chain_id = $1 AND seq = $4 AND hash = $5`,
		last.ChainID, last.Seq, last.Hash, first.Seq-1, first.PrevHash)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("chain %s at seq %d: %w", last.ChainID, first.Seq-1, errChainAdvanced)
	}
	return nil
}

// gapSQL finds a chain whose staged records do not follow on from its
// head in Postgres: the first staged record's predecessor was never
// stored, or was stored and then lost.
const gapSQL = `SELECT s.chain_id, s.seq, coalesce(h.seq, 0)
FROM (SELECT DISTINCT ON (chain_id) chain_id, seq FROM audit_stage ORDER BY chain_id, seq) s
LEFT JOIN audit_heads h ON h.chain_id = s.chain_id
WHERE coalesce(h.seq, 0) < s.seq - 1
LIMIT 1`

// errTrailBehind is a redelivery refused because the database's head of a
// chain is behind records this writer knows were committed before: the
// database lost commits it had acknowledged. That happens when a replica
// that had not received them was promoted (asynchronous replication), or
// when a backup was restored. Delivering would leave a gap in the chain.
var errTrailBehind = errors.New("the database lost audit events it had acknowledged")

// checkContinuity refuses a staged redelivery that would leave a gap.
func checkContinuity(ctx context.Context, tx pgx.Tx) error {
	var chain string
	var first, head int64
	err := tx.QueryRow(ctx, gapSQL).Scan(&chain, &first, &head)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("chain %s: Postgres holds it up to seq %d, the next record to deliver is seq %d (%w: a failover to a replica that was behind, or a restored backup; the events between are not in the trail)",
		chain, head, first, errTrailBehind)
}
