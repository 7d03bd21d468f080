package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"

	"github.com/spf13/pflag"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/migrations"
)

// databaseConfig is the Postgres database the trail, the run store and
// the node registry share, and whether serve migrates it at start.
type databaseConfig struct {
	DatabaseURL string // SANDGATE_DATABASE_URL: a DSN, keyword/value or URL, one host or several
	Migrate     bool   // SANDGATE_MIGRATE
	invalid     []string
}

func readDatabaseConfig(getenv func(string) string) databaseConfig {
	c := databaseConfig{DatabaseURL: "host=/var/run/postgresql dbname=sandgate", Migrate: true}
	e := envReader{getenv: getenv}
	e.str("SANDGATE_DATABASE_URL", &c.DatabaseURL)
	e.boolean("SANDGATE_MIGRATE", &c.Migrate)
	c.invalid = e.invalid
	return c
}

func (c *databaseConfig) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "Postgres DSN (SANDGATE_DATABASE_URL)")
	// The default shown in the help is the DSN without its password.
	f.Lookup("database-url").DefValue = redactDSN(c.DatabaseURL)
	f.BoolVar(&c.Migrate, "migrate", c.Migrate, "apply database migrations at start (SANDGATE_MIGRATE)")
}

// Validate checks that the DSN parses; it never prints the DSN, which may
// hold a password.
func (c *databaseConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	if _, err := audit.ParseDSN(c.DatabaseURL); err != nil {
		return fmt.Errorf("SANDGATE_DATABASE_URL (or --database-url) does not parse as a Postgres DSN")
	}
	return nil
}

// prepare checks that the database answers and, with Migrate, applies the
// pending migrations: serve's last check before it registers anything.
func (c *databaseConfig) prepare(ctx context.Context, logger *slog.Logger) error {
	db, err := audit.OpenDB(ctx, c.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer db.Close()
	if !c.Migrate {
		return nil
	}
	n, err := migrations.Up(ctx, db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if n > 0 {
		logger.Info("applied migrations", "count", n)
	}
	return nil
}

var dsnPassword = regexp.MustCompile(`(^|\s)password\s*=\s*('(\\.|[^'])*'|\S+)`)

// redactDSN hides a DSN's password, in either form.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return dsnPassword.ReplaceAllString(dsn, "${1}password=xxxxx")
}
