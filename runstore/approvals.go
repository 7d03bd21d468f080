package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/pgstore"
)

// approvalRow is one approvals row.
type approvalRow struct {
	ID              string     `gorm:"column:id;primaryKey"`
	Status          string     `gorm:"column:status"`
	Operation       string     `gorm:"column:operation"`
	RunID           string     `gorm:"column:run_id"`
	SessionID       string     `gorm:"column:session_id"`
	CorrelationID   string     `gorm:"column:correlation_id"`
	DecisionID      string     `gorm:"column:decision_id"`
	PolicyRevision  string     `gorm:"column:policy_revision"`
	Requester       string     `gorm:"column:requester"`
	Team            string     `gorm:"column:team"`
	RequesterRoles  []byte     `gorm:"column:requester_roles"`
	RequesterSignIn []byte     `gorm:"column:requester_sign_in"`
	Reasons         []byte     `gorm:"column:reasons"`
	Node            string     `gorm:"column:node"`
	Spec            []byte     `gorm:"column:spec"`
	Limits          []byte     `gorm:"column:limits"`
	CreatedAt       time.Time  `gorm:"column:created_at"`
	ExpiresAt       time.Time  `gorm:"column:expires_at"`
	DecidedAt       *time.Time `gorm:"column:decided_at"`
	DecidedBy       string     `gorm:"column:decided_by"`
	DeciderSignIn   []byte     `gorm:"column:decider_sign_in"`
	Comment         string     `gorm:"column:comment"`
}

// TableName tells gorm the table.
func (approvalRow) TableName() string { return "approvals" }

var _ sandgate.ApprovalStore = (*Store)(nil)

func toApprovalRow(a *sandgate.Approval) (*approvalRow, error) {
	row := &approvalRow{
		ID: a.ID, Status: string(a.Status), Operation: string(a.Operation), RunID: a.RunID, SessionID: a.SessionID,
		CorrelationID: a.CorrelationID, DecisionID: a.DecisionID, PolicyRevision: a.PolicyRevision,
		Requester: a.Requester, Team: a.Team, Node: a.Node, CreatedAt: pgstore.Time(a.CreatedAt), ExpiresAt: pgstore.Time(a.ExpiresAt),
		DecidedAt: pgstore.TimePtr(a.DecidedAt), DecidedBy: a.DecidedBy, Comment: a.Comment,
	}
	roles := a.RequesterRoles
	if roles == nil {
		roles = []sandgate.Role{}
	}
	reasons := a.Reasons
	if reasons == nil {
		reasons = []sandgate.Violation{}
	}
	for _, f := range []struct {
		dst *[]byte
		v   any
	}{{&row.RequesterRoles, roles}, {&row.RequesterSignIn, a.RequesterSignIn}, {&row.Reasons, reasons}, {&row.Spec, a.Spec}} {
		raw, err := json.Marshal(f.v)
		if err != nil {
			return nil, fmt.Errorf("encode approval: %w", err)
		}
		*f.dst = raw
	}
	var err error
	if a.Limits != nil {
		if row.Limits, err = json.Marshal(a.Limits); err != nil {
			return nil, fmt.Errorf("encode approval: %w", err)
		}
	}
	if a.DeciderSignIn != nil {
		if row.DeciderSignIn, err = json.Marshal(a.DeciderSignIn); err != nil {
			return nil, fmt.Errorf("encode approval: %w", err)
		}
	}
	return row, nil
}

func (row *approvalRow) approval() (*sandgate.Approval, error) {
	a := &sandgate.Approval{
		ID: row.ID, Status: sandgate.ApprovalStatus(row.Status), Operation: sandgate.Operation(row.Operation),
		RunID: row.RunID, SessionID: row.SessionID, CorrelationID: row.CorrelationID, DecisionID: row.DecisionID,
		PolicyRevision: row.PolicyRevision, Requester: row.Requester, Team: row.Team, Node: row.Node,
		CreatedAt: row.CreatedAt.UTC(), ExpiresAt: row.ExpiresAt.UTC(), DecidedAt: utcPtr(row.DecidedAt),
		DecidedBy: row.DecidedBy, Comment: row.Comment,
	}
	for _, f := range []struct {
		data []byte
		dst  any
	}{{row.RequesterRoles, &a.RequesterRoles}, {row.RequesterSignIn, &a.RequesterSignIn}, {row.Reasons, &a.Reasons}, {row.Spec, &a.Spec}} {
		if err := json.Unmarshal(f.data, f.dst); err != nil {
			return nil, sandgate.WrapError(sandgate.CodeInternal, err, "approval %s cannot be read", row.ID)
		}
	}
	if len(row.Limits) > 0 && string(row.Limits) != "null" {
		a.Limits = &sandgate.SessionLimits{}
		if err := json.Unmarshal(row.Limits, a.Limits); err != nil {
			return nil, sandgate.WrapError(sandgate.CodeInternal, err, "approval %s cannot be read", row.ID)
		}
	}
	if len(row.DeciderSignIn) > 0 && string(row.DeciderSignIn) != "null" {
		a.DeciderSignIn = &sandgate.SignIn{}
		if err := json.Unmarshal(row.DeciderSignIn, a.DeciderSignIn); err != nil {
			return nil, sandgate.WrapError(sandgate.CodeInternal, err, "approval %s cannot be read", row.ID)
		}
	}
	return a, nil
}

// CreateApproval inserts a pending approval: CONFLICT when its ID exists.
func (s *Store) CreateApproval(ctx context.Context, a *sandgate.Approval) error {
	row, err := toApprovalRow(a)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeInvalidRequest, err, "approval cannot be stored")
	}
	err = s.db.WithContext(ctx).Create(row).Error
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return sandgate.Errorf(sandgate.CodeConflict, "approval %s already exists", a.ID)
	}
	if err != nil {
		return storeErr(err, "create approval")
	}
	return nil
}

// GetApproval returns the approval, NOT-FOUND when there is none.
func (s *Store) GetApproval(ctx context.Context, id string) (*sandgate.Approval, error) {
	var row approvalRow
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "approval %s not found", id)
	}
	if err != nil {
		return nil, storeErr(err, "get approval")
	}
	return row.approval()
}

// approvalCursor is where a page of approvals ended.
type approvalCursor struct {
	T  time.Time `json:"t"`
	ID string    `json:"id"`
}

// ListApprovals returns matching approvals newest first and the cursor
// of the next page. A bad status, cursor or limit is INVALID-REQUEST
// naming the field.
func (s *Store) ListApprovals(ctx context.Context, f sandgate.ApprovalFilter) ([]sandgate.Approval, string, error) {
	if f.Limit < 0 {
		return nil, "", sandgate.FieldError("limit", "must not be negative")
	}
	if f.Status != "" && !slices.Contains(sandgate.ApprovalStatuses, f.Status) {
		return nil, "", sandgate.FieldError("status", "unknown status %q (pending, granted, denied, expired)", f.Status)
	}
	limit := f.Limit
	if limit == 0 {
		limit = defaultLimit
	}
	limit = min(limit, maxLimit)
	q := s.db.WithContext(ctx).Model(&approvalRow{})
	if f.Team != "" {
		q = q.Where("team = ?", f.Team)
	}
	if f.Status != "" {
		q = q.Where("status = ?", string(f.Status))
	}
	if f.Cursor != "" {
		var c approvalCursor
		if err := pgstore.DecodeCursor(f.Cursor, &c); err != nil {
			return nil, "", err
		}
		q = q.Where("(created_at, id) < (?, ?)", c.T, c.ID)
	}
	var rows []approvalRow
	if err := q.Order("created_at DESC, id DESC").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, "", storeErr(err, "list approvals")
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		next = pgstore.EncodeCursor(approvalCursor{T: last.CreatedAt, ID: last.ID})
	}
	out := make([]sandgate.Approval, 0, len(rows))
	for i := range rows {
		a, err := rows[i].approval()
		if err != nil {
			return nil, "", err
		}
		out = append(out, *a)
	}
	return out, next, nil
}

// DecideApproval saves a's status, decider and comment if it is still
// pending; CONFLICT, with the status it has, when it is not.
func (s *Store) DecideApproval(ctx context.Context, a *sandgate.Approval) error {
	row, err := toApprovalRow(a)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeInvalidRequest, err, "approval cannot be stored")
	}
	res := s.db.WithContext(ctx).Model(&approvalRow{}).Where("id = ? AND status = 'pending'", a.ID).Updates(map[string]any{
		"status": row.Status, "decided_at": row.DecidedAt, "decided_by": row.DecidedBy,
		"decider_sign_in": row.DeciderSignIn, "comment": row.Comment,
	})
	if res.Error != nil {
		return storeErr(res.Error, "decide approval")
	}
	if res.RowsAffected == 1 {
		return nil
	}
	stored, err := s.GetApproval(ctx, a.ID)
	if err != nil {
		return err
	}
	return &sandgate.Error{Code: sandgate.CodeConflict, Message: fmt.Sprintf("approval %s is %s, not pending", a.ID, stored.Status),
		Details: map[string]any{"status": stored.Status, "decided_by": stored.DecidedBy}}
}

// ReopenApproval puts a decided approval back to pending.
func (s *Store) ReopenApproval(ctx context.Context, id string) error {
	err := s.db.WithContext(ctx).Exec(`UPDATE approvals SET status = 'pending', decided_at = NULL, decided_by = '',
		decider_sign_in = NULL, comment = '' WHERE id = ?`, id).Error
	if err != nil {
		return storeErr(err, "reopen approval")
	}
	return nil
}

// ExpireApprovals marks expired, at now, at most limit pending approvals
// whose time ran out, and returns them; of two nodes at once, each
// approval goes to one.
func (s *Store) ExpireApprovals(ctx context.Context, now time.Time, limit int) ([]sandgate.Approval, error) {
	var rows []approvalRow
	err := s.db.WithContext(ctx).Raw(`UPDATE approvals SET status = 'expired', decided_at = ?
		WHERE id IN (SELECT id FROM approvals WHERE status = 'pending' AND expires_at <= ? ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED)
		RETURNING *`, pgstore.Time(now), pgstore.Time(now), limit).Scan(&rows).Error
	if err != nil {
		return nil, storeErr(err, "expire approvals")
	}
	out := make([]sandgate.Approval, 0, len(rows))
	for i := range rows {
		a, err := rows[i].approval()
		if err != nil {
			return nil, err
		}
		out = append(out, *a)
	}
	return out, nil
}
