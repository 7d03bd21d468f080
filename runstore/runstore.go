// Package runstore keeps the runs the API serves, in Postgres: each run's
// state, outcome, result, output and normalised spec (sandgate.RunStore),
// in the runs table, and the idempotency keys that make a repeated
// POST /v1/runs return the run it first created.
//
// A Store works over a database handle it is given and does not own:
// serve hands it the audit trail's, so that runs and the trail share one
// connection pool and its settings (synchronous commit on). It does not
// import the audit package. With audit, it is one of the two packages that
// import gorm and pgx.
package runstore

import (
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/pgstore"
)

// Config configures a Store.
type Config struct {
	// Clock is injected for tests (default time.Now): a run's created_at
	// when the caller gives none, updated_at, and the idempotency window.
	Clock sandgate.Clock
}

// Store is the run store. It implements sandgate.RunStore and is safe for
// concurrent use.
type Store struct {
	cfg Config
	db  *gorm.DB
}

var _ sandgate.RunStore = (*Store)(nil)

// New returns a Store over db, a handle on sandgate's database (pgx
// driver) with the migrations applied. The Store does not close db: its
// owner closes it after the Store's last use. New does not reach the
// database; a Store's methods say when they cannot.
func New(db *sql.DB, cfg Config) (*Store, error) {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	gdb, err := pgstore.Gorm(db, cfg.Clock)
	if err != nil {
		return nil, fmt.Errorf("runstore: %w", err)
	}
	return &Store{cfg: cfg, db: gdb}, nil
}

// Page sizes of ListRuns.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

func storeErr(err error, what string) error {
	return sandgate.WrapError(sandgate.CodeUnavailable, err, "%s: database unavailable", what)
}
