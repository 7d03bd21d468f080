package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newMigrateCmd is replaced by the issue that builds it.
func newMigrateCmd(_ *app) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "not built yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("migrate: not built yet") },
	}
}
