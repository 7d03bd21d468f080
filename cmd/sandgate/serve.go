package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newServeCmd is replaced by the issue that builds it.
func newServeCmd(_ *app) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "not built yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("serve: not built yet") },
	}
}
