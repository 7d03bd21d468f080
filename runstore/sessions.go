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

// sessionRow is one sessions row: the columns sessions are found by, and
// the session itself as a document.
type sessionRow struct {
	ID           string     `gorm:"column:id;primaryKey"`
	Team         string     `gorm:"column:team"`
	Node         string     `gorm:"column:node"`
	State        string     `gorm:"column:state"`
	CreatedAt    time.Time  `gorm:"column:created_at"`
	LastActiveAt time.Time  `gorm:"column:last_active_at"`
	EndedAt      *time.Time `gorm:"column:ended_at"`
	UpdatedAt    time.Time  `gorm:"column:updated_at"`
	Document     []byte     `gorm:"column:document"`
}

// TableName tells gorm the table.
func (sessionRow) TableName() string { return "sessions" }

var _ sandgate.SessionStore = (*Store)(nil)

func (s *Store) sessionRow(ss *sandgate.Session) (*sessionRow, error) {
	doc, err := json.Marshal(ss)
	if err != nil {
		return nil, fmt.Errorf("encode session: %w", err)
	}
	return &sessionRow{
		ID: ss.ID, Team: ss.Team, Node: ss.Node, State: string(ss.State),
		CreatedAt: pgstore.Time(ss.CreatedAt), LastActiveAt: pgstore.Time(ss.LastActiveAt), EndedAt: pgstore.TimePtr(ss.EndedAt),
		UpdatedAt: pgstore.Time(s.cfg.Clock()), Document: doc,
	}, nil
}

// CreateSession inserts a new session: CONFLICT when its ID exists.
func (s *Store) CreateSession(ctx context.Context, ss *sandgate.Session) error {
	row, err := s.sessionRow(ss)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeInvalidRequest, err, "session cannot be stored")
	}
	err = s.db.WithContext(ctx).Create(row).Error
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return sandgate.Errorf(sandgate.CodeConflict, "session %s already exists", ss.ID)
	}
	if err != nil {
		return storeErr(err, "create session")
	}
	return nil
}

// UpdateSession saves the session: NOT-FOUND when there is none.
func (s *Store) UpdateSession(ctx context.Context, ss *sandgate.Session) error {
	row, err := s.sessionRow(ss)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeInvalidRequest, err, "session cannot be stored")
	}
	res := s.db.WithContext(ctx).Model(&sessionRow{}).Where("id = ?", ss.ID).Updates(map[string]any{
		"node": row.Node, "state": row.State, "last_active_at": row.LastActiveAt, "ended_at": row.EndedAt,
		"updated_at": row.UpdatedAt, "document": row.Document,
	})
	if res.Error != nil {
		return storeErr(res.Error, "update session")
	}
	if res.RowsAffected == 0 {
		return sandgate.Errorf(sandgate.CodeNotFound, "session %s not found", ss.ID)
	}
	return nil
}

// GetSession returns the session, NOT-FOUND when there is none.
func (s *Store) GetSession(ctx context.Context, id string) (*sandgate.Session, error) {
	var row sessionRow
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "session %s not found", id)
	}
	if err != nil {
		return nil, storeErr(err, "get session")
	}
	return row.session()
}

func (row *sessionRow) session() (*sandgate.Session, error) {
	var ss sandgate.Session
	if err := json.Unmarshal(row.Document, &ss); err != nil {
		return nil, sandgate.WrapError(sandgate.CodeInternal, err, "session %s cannot be read", row.ID)
	}
	return &ss, nil
}

// ListSessions returns matching sessions newest first, at most f.Limit
// (default 100, at most 1000).
func (s *Store) ListSessions(ctx context.Context, f sandgate.SessionFilter) ([]sandgate.Session, error) {
	if f.Limit < 0 {
		return nil, sandgate.FieldError("limit", "must not be negative")
	}
	if f.State != "" && f.State != sandgate.SessionOpen && f.State != sandgate.SessionEnded {
		return nil, sandgate.FieldError("state", "unknown state %q", f.State)
	}
	limit := f.Limit
	if limit == 0 {
		limit = defaultLimit
	}
	limit = min(limit, maxLimit)
	q := s.db.WithContext(ctx).Model(&sessionRow{})
	if f.Team != "" {
		q = q.Where("team = ?", f.Team)
	}
	if f.Node != "" {
		q = q.Where("node = ?", f.Node)
	}
	if f.State != "" {
		q = q.Where("state = ?", string(f.State))
	}
	var rows []sessionRow
	if err := q.Order("created_at DESC, id DESC").Limit(limit).Find(&rows).Error; err != nil {
		return nil, storeErr(err, "list sessions")
	}
	out := make([]sandgate.Session, 0, len(rows))
	for i := range rows {
		ss, err := rows[i].session()
		if err != nil {
			return nil, err
		}
		out = append(out, *ss)
	}
	return out, nil
}
