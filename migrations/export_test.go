package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
)

// FS returns the embedded migrations.
func FS() fs.FS { return files }

// Pending reports whether db lacks any migration.
func Pending(ctx context.Context, db *sql.DB) (bool, error) {
	p, err := provider(db)
	if err != nil {
		return false, err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return false, fmt.Errorf("migration status: %w", err)
	}
	return pending, nil
}
