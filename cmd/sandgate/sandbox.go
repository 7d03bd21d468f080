package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newSandboxCmd is replaced by the issue that builds it.
func newSandboxCmd(_ *app) *cobra.Command {
	return &cobra.Command{
		Use:   "sandbox",
		Short: "not built yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("sandbox: not built yet") },
	}
}
