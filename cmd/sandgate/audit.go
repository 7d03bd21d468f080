package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newAuditCmd is replaced by the issue that builds it.
func newAuditCmd(_ *app) *cobra.Command {
	return &cobra.Command{
		Use:   "audit",
		Short: "not built yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("audit: not built yet") },
	}
}
