package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newRunsCmd is replaced by the issue that builds it.
func newRunsCmd(_ *app) *cobra.Command {
	return &cobra.Command{
		Use:   "runs",
		Short: "not built yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("runs: not built yet") },
	}
}
