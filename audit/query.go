package audit

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"gorm.io/gorm"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/pgstore"
)

// Query page sizes.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// eventRow is one audit_events row as gorm reads it.
type eventRow struct {
	EventID        string
	ChainID        string
	Seq            int64
	RecordedAt     time.Time
	EventTime      time.Time
	Type           string
	Outcome        pgtype.Text
	CorrelationID  pgtype.Text
	RunID          pgtype.Text
	DecisionID     pgtype.Text
	ContainerID    pgtype.Text
	Actor          pgtype.Text
	Team           pgtype.Text
	Node           pgtype.Text
	PolicyRevision pgtype.Text
	ExitCode       pgtype.Int4
	Payload        []byte
	Body           []byte
	PrevHash       []byte
	Hash           []byte
}

// TableName tells gorm the table.
func (eventRow) TableName() string { return "audit_events" }

const eventColumns = `event_id, chain_id, seq, recorded_at, event_time, type, outcome, correlation_id,
	run_id, decision_id, container_id, actor, team, node, policy_revision, exit_code, payload, body,
	prev_hash, hash`

// scanner is a row of database/sql's or of pgx's.
type scanner interface{ Scan(dest ...any) error }

func (r *eventRow) scan(rows scanner) error {
	return rows.Scan(&r.EventID, &r.ChainID, &r.Seq, &r.RecordedAt, &r.EventTime, &r.Type, &r.Outcome,
		&r.CorrelationID, &r.RunID, &r.DecisionID, &r.ContainerID, &r.Actor, &r.Team, &r.Node,
		&r.PolicyRevision, &r.ExitCode, &r.Payload, &r.Body, &r.PrevHash, &r.Hash)
}

// record converts the row to the auditors' form.
func (r *eventRow) record() sandgate.AuditRecord {
	ev := r.event()
	if len(r.Payload) > 0 {
		dec := json.NewDecoder(bytes.NewReader(r.Payload))
		dec.UseNumber()
		_ = dec.Decode(&ev.Payload)
	}
	return sandgate.AuditRecord{
		Event:      ev,
		ChainID:    r.ChainID,
		Seq:        r.Seq,
		RecordedAt: r.RecordedAt.UTC(),
		Body:       string(r.Body),
		PrevHash:   hex.EncodeToString(r.PrevHash),
		Hash:       hex.EncodeToString(r.Hash),
	}
}

// event is the row's event without its payload, which the verifier reads
// as text (proof.Row.PayloadJSON) and record decodes.
func (r *eventRow) event() sandgate.Event {
	ev := sandgate.Event{
		ID:             r.EventID,
		Type:           sandgate.EventType(r.Type),
		Time:           r.EventTime.UTC(),
		Outcome:        r.Outcome.String,
		CorrelationID:  r.CorrelationID.String,
		RunID:          r.RunID.String,
		DecisionID:     r.DecisionID.String,
		ContainerID:    r.ContainerID.String,
		Actor:          r.Actor.String,
		Team:           r.Team.String,
		Node:           r.Node.String,
		PolicyRevision: r.PolicyRevision.String,
	}
	if r.ExitCode.Valid {
		c := int(r.ExitCode.Int32)
		ev.ExitCode = &c
	}
	return ev
}

// eventCursor is where a page of events ended, in the trail's order
// (recorded_at, chain_id, seq).
type eventCursor struct {
	T time.Time `json:"t"`
	C string    `json:"c"`
	S int64     `json:"s"`
	// N marks a cursor of a newest-first page.
	N bool `json:"n,omitempty"`
}

// filtered applies f's filters (not its cursor or limit) to a query on
// audit_events.
func (s *Reader) filtered(ctx context.Context, f sandgate.AuditFilter) *gorm.DB {
	q := s.db.WithContext(ctx).Table("audit_events")
	eq := map[string]string{
		"correlation_id": f.CorrelationID, "run_id": f.RunID, "decision_id": f.DecisionID,
		"type": string(f.Type), "actor": f.Actor, "team": f.Team, "outcome": f.Outcome,
	}
	for _, col := range []string{"correlation_id", "run_id", "decision_id", "type", "actor", "team", "outcome"} {
		if v := eq[col]; v != "" {
			q = q.Where(col+" = ?", v)
		}
	}
	if len(f.Types) > 0 {
		types := make([]string, len(f.Types))
		for i, t := range f.Types {
			types[i] = string(t)
		}
		q = q.Where("type IN ?", types)
	}
	if !f.Since.IsZero() {
		q = q.Where("recorded_at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		q = q.Where("recorded_at < ?", f.Until)
	}
	return q
}

func checkFilter(f sandgate.AuditFilter) error {
	if f.Limit < 0 {
		return sandgate.FieldError("limit", "must not be negative")
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return sandgate.FieldError("until", "must be after since")
	}
	return nil
}

// Query returns matching events oldest first (by recorded_at, then chain
// and seq), or newest first with f.Newest, and the cursor of the next
// page, "" on the last page. Limit
// defaults to 100 and is capped at 1000. A bad cursor or filter is
// INVALID-REQUEST; a database failure AUDIT-UNAVAILABLE.
func (s *Reader) Query(ctx context.Context, f sandgate.AuditFilter) ([]sandgate.AuditRecord, string, error) {
	if err := checkFilter(f); err != nil {
		return nil, "", err
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	q := s.filtered(ctx, f)
	if f.Cursor != "" {
		var c eventCursor
		if err := pgstore.DecodeCursor(f.Cursor, &c); err != nil {
			return nil, "", err
		}
		if c.N != f.Newest {
			return nil, "", sandgate.FieldError("cursor", "is from a page in the other order; start again without it")
		}
		if f.Newest {
			q = q.Where("(recorded_at, chain_id, seq) < (?, ?, ?)", c.T, c.C, c.S)
		} else {
			q = q.Where("(recorded_at, chain_id, seq) > (?, ?, ?)", c.T, c.C, c.S)
		}
	}
	order := "recorded_at, chain_id, seq"
	if f.Newest {
		order = "recorded_at DESC, chain_id DESC, seq DESC"
	}
	rows, err := q.Select(eventColumns).Order(order).Limit(limit + 1).Rows()
	if err != nil {
		return nil, "", sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "query audit events")
	}
	defer rows.Close()
	out := make([]sandgate.AuditRecord, 0, limit)
	next := ""
	for rows.Next() {
		var r eventRow
		if err := r.scan(rows); err != nil {
			return nil, "", sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read audit events")
		}
		if len(out) == limit {
			last := out[len(out)-1]
			next = pgstore.EncodeCursor(eventCursor{T: last.RecordedAt, C: last.ChainID, S: last.Seq, N: f.Newest})
			break
		}
		out = append(out, r.record())
	}
	if err := rows.Err(); err != nil {
		return nil, "", sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read audit events")
	}
	return out, next, nil
}

// checkpointRow is one audit_checkpoints row.
type checkpointRow struct {
	ChainID       string
	Seq           int64
	HeadHash      []byte
	CreatedAt     time.Time
	Final         bool
	PrevSignature []byte
	Signature     []byte
	KeyID         string
	PublicKey     []byte
	Note          string
}

func (r *checkpointRow) checkpoint() proof.Checkpoint {
	return proof.Checkpoint{
		ChainID:       r.ChainID,
		Seq:           r.Seq,
		HeadHash:      hex.EncodeToString(r.HeadHash),
		CreatedAt:     r.CreatedAt.UTC(),
		Final:         r.Final,
		PrevSignature: hex.EncodeToString(r.PrevSignature),
		Signature:     hex.EncodeToString(r.Signature),
		KeyID:         r.KeyID,
		PublicKey:     hex.EncodeToString(r.PublicKey),
		Note:          r.Note,
	}
}

// eachCheckpoint calls fn with the checkpoints of chainID ("" for all) in
// chain order (chain_id, seq, id).
func (s *trailDB) eachCheckpoint(ctx context.Context, chainID string, fn func(proof.Checkpoint) error) error {
	q := s.db.WithContext(ctx).Table("audit_checkpoints").
		Select("chain_id, seq, head_hash, created_at, final, prev_signature, signature, key_id, public_key, coalesce(note, '')")
	if chainID != "" {
		q = q.Where("chain_id = ?", chainID)
	}
	rows, err := q.Order("chain_id, seq, id").Rows()
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read checkpoints")
	}
	defer rows.Close()
	for rows.Next() {
		var r checkpointRow
		if err := rows.Scan(&r.ChainID, &r.Seq, &r.HeadHash, &r.CreatedAt, &r.Final, &r.PrevSignature,
			&r.Signature, &r.KeyID, &r.PublicKey, &r.Note); err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read checkpoints")
		}
		if err := fn(r.checkpoint()); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read checkpoints")
	}
	return nil
}

// ExportCheckpoints streams the signed checkpoints of chainID ("" for all
// chains) to w as JSON Lines, in chain order: what VerifyExport takes next
// to an event export.
func (s *Reader) ExportCheckpoints(ctx context.Context, chainID string, w io.Writer) error {
	enc := json.NewEncoder(w)
	return s.eachCheckpoint(ctx, chainID, func(cp proof.Checkpoint) error {
		if err := enc.Encode(cp); err != nil {
			return fmt.Errorf("write checkpoints: %w", err)
		}
		return nil
	})
}
