package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/pgstore"
)

// IdempotencyWindow is how long an Idempotency-Key keeps returning the
// run it first created, per principal.
const IdempotencyWindow = 24 * time.Hour

// runRow is one runs row.
type runRow struct {
	ID             string     `gorm:"column:id;primaryKey"`
	CorrelationID  string     `gorm:"column:correlation_id"`
	DecisionID     string     `gorm:"column:decision_id"`
	PolicyRevision string     `gorm:"column:policy_revision"`
	Principal      string     `gorm:"column:principal"`
	Team           string     `gorm:"column:team"`
	Node           string     `gorm:"column:node"`
	State          string     `gorm:"column:state"`
	Outcome        string     `gorm:"column:outcome"`
	ExitCode       *int       `gorm:"column:exit_code"`
	OOMKilled      bool       `gorm:"column:oom_killed"`
	Error          []byte     `gorm:"column:error"`
	ContainerID    string     `gorm:"column:container_id"`
	SessionID      string     `gorm:"column:session_id"`
	TaskID         string     `gorm:"column:task_id"`
	CreatedAt      time.Time  `gorm:"column:created_at"`
	StartedAt      *time.Time `gorm:"column:started_at"`
	FinishedAt     *time.Time `gorm:"column:finished_at"`
	ClaimedAt      *time.Time `gorm:"column:claimed_at"`
	UpdatedAt      time.Time  `gorm:"column:updated_at"`
	DurationMS     int64      `gorm:"column:duration_ms"`
	Stdout         []byte     `gorm:"column:stdout"`
	Stderr         []byte     `gorm:"column:stderr"`
	StdoutData     []byte     `gorm:"column:stdout_data"`
	StderrData     []byte     `gorm:"column:stderr_data"`
	Spec           []byte     `gorm:"column:spec"`
	Warnings       []byte     `gorm:"column:warnings"`
	Artifacts      []byte     `gorm:"column:artifacts"`
	Usage          []byte     `gorm:"column:usage"`
	Egress         []byte     `gorm:"column:egress"`
	IdempotencyKey *string    `gorm:"column:idempotency_key"`
}

// runColumnsWithoutOutput selects a run with its output's sizes and
// digests but not its data.
const runColumnsWithoutOutput = "id, correlation_id, decision_id, policy_revision, principal, team, node, state, outcome, " +
	"exit_code, oom_killed, error, container_id, session_id, task_id, created_at, started_at, finished_at, claimed_at, " +
	"updated_at, duration_ms, stdout - 'data' AS stdout, stderr - 'data' AS stderr, spec, warnings, artifacts, usage, egress, idempotency_key"

// TableName tells gorm the table.
func (runRow) TableName() string { return "runs" }

func toRow(r *sandgate.Run) (*runRow, error) {
	row := &runRow{
		ID: r.ID, CorrelationID: r.CorrelationID, DecisionID: r.DecisionID, PolicyRevision: r.PolicyRevision,
		Principal: r.Principal, Team: r.Team, Node: r.Node, State: string(r.State), Outcome: string(r.Outcome),
		ExitCode: r.ExitCode, OOMKilled: r.OOMKilled, ContainerID: r.ContainerID,
		SessionID: r.Spec.SessionID, TaskID: r.Spec.TaskID, CreatedAt: pgstore.Time(r.CreatedAt),
		StartedAt: pgstore.TimePtr(r.StartedAt), FinishedAt: pgstore.TimePtr(r.FinishedAt), DurationMS: r.DurationMS,
	}
	if r.IdempotencyKey != "" {
		k := r.IdempotencyKey
		row.IdempotencyKey = &k
	}
	var err error
	if r.Error != nil {
		if row.Error, err = json.Marshal(r.Error); err != nil {
			return nil, fmt.Errorf("encode run error: %w", err)
		}
	}
	if row.Stdout, row.StdoutData, err = splitOutput(r.Stdout); err != nil {
		return nil, fmt.Errorf("encode stdout: %w", err)
	}
	if row.Stderr, row.StderrData, err = splitOutput(r.Stderr); err != nil {
		return nil, fmt.Errorf("encode stderr: %w", err)
	}
	if row.Spec, err = json.Marshal(r.Spec); err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	w := r.Warnings
	if w == nil {
		w = []string{}
	}
	if row.Warnings, err = json.Marshal(w); err != nil {
		return nil, fmt.Errorf("encode warnings: %w", err)
	}
	if r.Artifacts != nil {
		if row.Artifacts, err = json.Marshal(r.Artifacts); err != nil {
			return nil, fmt.Errorf("encode artifacts: %w", err)
		}
	}
	if r.Usage != nil {
		if row.Usage, err = json.Marshal(r.Usage); err != nil {
			return nil, fmt.Errorf("encode usage: %w", err)
		}
	}
	if r.Egress != nil {
		if row.Egress, err = json.Marshal(r.Egress); err != nil {
			return nil, fmt.Errorf("encode egress: %w", err)
		}
	}
	return row, nil
}

// splitOutput is an output stream as a row keeps it: its encoding, size,
// truncation and digest as JSON, and its bytes as they are (nil when
// nothing was captured).
func splitOutput(o sandgate.Output) (meta, data []byte, err error) {
	raw, err := o.Content()
	if err != nil {
		return nil, nil, err
	}
	m := o
	m.Data, m.Raw = "", nil
	if len(raw) > 0 {
		data = raw
		m.Encoding = sandgate.OutputEncoding(raw)
	}
	meta, err = json.Marshal(m)
	return meta, data, err
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func (row *runRow) run() (*sandgate.Run, error) {
	r := &sandgate.Run{
		ID: row.ID, CorrelationID: row.CorrelationID, DecisionID: row.DecisionID, PolicyRevision: row.PolicyRevision,
		Principal: row.Principal, Team: row.Team, Node: row.Node, State: sandgate.State(row.State),
		Outcome: sandgate.Outcome(row.Outcome), ExitCode: row.ExitCode, OOMKilled: row.OOMKilled,
		ContainerID: row.ContainerID, CreatedAt: row.CreatedAt.UTC(), StartedAt: utcPtr(row.StartedAt),
		FinishedAt: utcPtr(row.FinishedAt), DurationMS: row.DurationMS, Warnings: []string{},
	}
	if row.IdempotencyKey != nil {
		r.IdempotencyKey = *row.IdempotencyKey
	}
	for _, f := range []struct {
		data []byte
		dst  any
	}{{row.Stdout, &r.Stdout}, {row.Stderr, &r.Stderr}, {row.Spec, &r.Spec}, {row.Warnings, &r.Warnings}} {
		if len(f.data) == 0 {
			continue
		}
		if err := json.Unmarshal(f.data, f.dst); err != nil {
			return nil, fmt.Errorf("decode run %s: %w", row.ID, err)
		}
	}
	// Rows written before output had columns of its own hold the data in
	// the JSON; the others hold it as bytes.
	if len(row.StdoutData) > 0 {
		r.Stdout.Raw = row.StdoutData
	}
	if len(row.StderrData) > 0 {
		r.Stderr.Raw = row.StderrData
	}
	if len(row.Usage) > 0 && string(row.Usage) != "null" {
		r.Usage = &sandgate.Usage{}
		if err := json.Unmarshal(row.Usage, r.Usage); err != nil {
			return nil, fmt.Errorf("decode run %s: %w", row.ID, err)
		}
	}
	if len(row.Egress) > 0 && string(row.Egress) != "null" {
		r.Egress = &sandgate.EgressSummary{}
		if err := json.Unmarshal(row.Egress, r.Egress); err != nil {
			return nil, fmt.Errorf("decode run %s: %w", row.ID, err)
		}
	}
	if len(row.Artifacts) > 0 && string(row.Artifacts) != "null" {
		r.Artifacts = &sandgate.ArtifactSummary{}
		if err := json.Unmarshal(row.Artifacts, r.Artifacts); err != nil {
			return nil, fmt.Errorf("decode run %s: %w", row.ID, err)
		}
	}
	if len(row.Error) > 0 && string(row.Error) != "null" {
		r.Error = &sandgate.ErrorInfo{}
		if err := json.Unmarshal(row.Error, r.Error); err != nil {
			return nil, fmt.Errorf("decode run %s: %w", row.ID, err)
		}
	}
	return r, nil
}

// CreateRun inserts run (State defaults to pending, CreatedAt to now).
// Whether an Idempotency-Key names an earlier run was decided before,
// once, by ClaimIdempotencyKey; the run keeps its key for the record.
// Errors: INVALID-REQUEST (no ID or principal), CONFLICT (the ID exists),
// UNAVAILABLE (database).
func (s *Store) CreateRun(ctx context.Context, run *sandgate.Run) error {
	if run.ID == "" {
		return sandgate.FieldError("id", "is required")
	}
	if run.Principal == "" {
		return sandgate.FieldError("principal", "is required")
	}
	if run.State == "" {
		run.State = sandgate.StatePending
	}
	if run.CreatedAt.IsZero() {
		run.CreatedAt = s.cfg.Clock()
	}
	run.CreatedAt = pgstore.Time(run.CreatedAt)
	row, err := toRow(run)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeInvalidRequest, err, "run cannot be stored")
	}
	row.UpdatedAt = pgstore.Time(s.cfg.Clock())
	err = s.db.WithContext(ctx).Create(row).Error
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "runs_pkey" {
		return sandgate.Errorf(sandgate.CodeConflict, "run %s already exists", run.ID)
	}
	return storeErr(err, "create run")
}

// UpdateRun saves the run's node, state, outcome and result fields (exit
// code, OOM, error, container, timings, output, warnings, usage). It returns
// NOT-FOUND when there is no such run.
func (s *Store) UpdateRun(ctx context.Context, run *sandgate.Run) error {
	row, err := toRow(run)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeInvalidRequest, err, "run cannot be stored")
	}
	res := s.db.WithContext(ctx).Model(&runRow{}).Where("id = ?", run.ID).Updates(map[string]any{
		"node": row.Node, "state": row.State, "outcome": row.Outcome, "exit_code": row.ExitCode,
		"oom_killed": row.OOMKilled, "error": row.Error, "container_id": row.ContainerID,
		"started_at": row.StartedAt, "finished_at": row.FinishedAt, "duration_ms": row.DurationMS,
		"stdout": row.Stdout, "stderr": row.Stderr, "stdout_data": row.StdoutData, "stderr_data": row.StderrData,
		"warnings": row.Warnings, "artifacts": row.Artifacts, "usage": row.Usage,
		"egress": row.Egress, "updated_at": pgstore.Time(s.cfg.Clock()),
	})
	if res.Error != nil {
		return storeErr(res.Error, "update run")
	}
	if res.RowsAffected == 0 {
		return sandgate.Errorf(sandgate.CodeNotFound, "run %s not found", run.ID)
	}
	return nil
}

// GetRun returns the run, NOT-FOUND when there is none.
func (s *Store) GetRun(ctx context.Context, id string) (*sandgate.Run, error) {
	var row runRow
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "run %s not found", id)
	}
	if err != nil {
		return nil, storeErr(err, "get run")
	}
	r, err := row.run()
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeInternal, err, "run %s cannot be read", id)
	}
	return r, nil
}

// runCursor is where a page of runs ended: newest first by (created_at, id).
type runCursor struct {
	T  time.Time `json:"t"`
	ID string    `json:"id"`
}

var (
	validStates   = map[sandgate.State]bool{sandgate.StatePending: true, sandgate.StateCreating: true, sandgate.StateRunning: true, sandgate.StateFinished: true}
	validOutcomes = map[sandgate.Outcome]bool{sandgate.OutcomeSucceeded: true, sandgate.OutcomeFailed: true, sandgate.OutcomeOOMKilled: true,
		sandgate.OutcomeTimedOut: true, sandgate.OutcomeCancelled: true, sandgate.OutcomeError: true, sandgate.OutcomeLost: true}
)

// ListRuns returns matching runs newest first and the cursor of the next
// page ("" on the last). Limit defaults to 100, capped at 1000. A bad
// cursor, state, outcome or limit is INVALID-REQUEST naming the field.
func (s *Store) ListRuns(ctx context.Context, f sandgate.RunFilter) ([]sandgate.Run, string, error) {
	if f.Limit < 0 {
		return nil, "", sandgate.FieldError("limit", "must not be negative")
	}
	if f.State != "" && !validStates[f.State] {
		return nil, "", sandgate.FieldError("state", "unknown state %q", f.State)
	}
	if f.Outcome != "" && !validOutcomes[f.Outcome] {
		return nil, "", sandgate.FieldError("outcome", "unknown outcome %q", f.Outcome)
	}
	limit := f.Limit
	if limit == 0 {
		limit = defaultLimit
	}
	limit = min(limit, maxLimit)
	q := s.db.WithContext(ctx).Model(&runRow{})
	for col, v := range map[string]string{"team": f.Team, "node": f.Node, "state": string(f.State), "outcome": string(f.Outcome),
		"session_id": f.SessionID, "task_id": f.TaskID} {
		if v != "" {
			q = q.Where(col+" = ?", v)
		}
	}
	if !f.Since.IsZero() {
		q = q.Where("created_at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		q = q.Where("created_at < ?", f.Until)
	}
	if f.Cursor != "" {
		var c runCursor
		if err := pgstore.DecodeCursor(f.Cursor, &c); err != nil {
			return nil, "", err
		}
		q = q.Where("(created_at, id) < (?, ?)", c.T, c.ID)
	}
	if !f.WithOutput {
		// The output's data stays in the database; sizes and digests come.
		q = q.Select(runColumnsWithoutOutput)
	}
	var rows []runRow
	if err := q.Order("created_at DESC, id DESC").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, "", storeErr(err, "list runs")
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		next = pgstore.EncodeCursor(runCursor{T: last.CreatedAt, ID: last.ID})
	}
	out := make([]sandgate.Run, 0, len(rows))
	for i := range rows {
		r, err := rows[i].run()
		if err != nil {
			return nil, "", sandgate.WrapError(sandgate.CodeInternal, err, "runs cannot be read")
		}
		out = append(out, *r)
	}
	return out, next, nil
}
