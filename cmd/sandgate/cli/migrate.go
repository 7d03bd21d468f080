package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/migrations"
)

// newMigrateCmd builds `sandgate migrate up|status`, which work directly
// against SANDGATE_DATABASE_URL. Run them as the tables' owner; serve can
// then run as the sandgate_app role with SANDGATE_MIGRATE=false.
func newMigrateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply or show the database migrations",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := audit.OpenDB(cmd.Context(), a.cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer db.Close()
			n, err := migrations.Up(cmd.Context(), db)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "applied %d migration(s)\n", n)
			return err
		},
	}, &cobra.Command{
		Use:   "status",
		Short: "List the migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := audit.OpenDB(cmd.Context(), a.cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer db.Close()
			return migrations.Status(cmd.Context(), db, a.stdout)
		},
	})
	return cmd
}
