// Package migrations holds sandgate's database schema as ordered SQL
// migrations embedded in the binary, and applies them with goose.
//
// The schema has the append-only audit trail (audit_events, partitioned by
// month of recorded_at, which is the database's clock, audit_checkpoints,
// audit_chains; UPDATE, DELETE and TRUNCATE refused by ENABLE ALWAYS
// triggers on every partition), each chain's head (audit_heads, the
// single-writer guard), the registry of each node's checkpoint keys
// (audit_keys, written only through audit_register_key), where each audit
// sink stands in each chain (audit_sink_cursors), the runs the API
// serves with their idempotency keys, and the application role
// sandgate_app that may only read and append to the trail.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// provider builds a goose provider over db. A Postgres advisory lock held
// for the session keeps two gateways that start together from migrating at
// once.
func provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration in order and returns how many it
// applied. It is safe to call on an up-to-date database and from several
// processes at once.
func Up(ctx context.Context, db *sql.DB) (int, error) {
	p, err := provider(db)
	if err != nil {
		return 0, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("apply migrations: %w", err)
	}
	return len(res), nil
}

// UpTo applies the pending migrations up to and including version, for
// staged upgrades and for testing a migration against data written by the
// schema before it.
func UpTo(ctx context.Context, db *sql.DB, version int64) (int, error) {
	p, err := provider(db)
	if err != nil {
		return 0, err
	}
	res, err := p.UpTo(ctx, version)
	if err != nil {
		return len(res), fmt.Errorf("apply migrations to %d: %w", version, err)
	}
	return len(res), nil
}

// Status writes each migration's version, file and state (applied with its
// time, or pending) to w as an aligned table.
func Status(ctx context.Context, db *sql.DB, w io.Writer) error {
	p, err := provider(db)
	if err != nil {
		return err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migration status: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tFILE\tSTATE\tAPPLIED AT")
	for _, s := range st {
		applied := "-"
		if !s.AppliedAt.IsZero() {
			applied = s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, s.Source.Path, s.State, applied)
	}
	return tw.Flush()
}
