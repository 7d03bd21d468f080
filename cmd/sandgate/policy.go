package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newPolicyCmd is replaced by the issue that builds it.
func newPolicyCmd(_ *app) *cobra.Command {
	return &cobra.Command{
		Use:   "policy",
		Short: "not built yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("policy: not built yet") },
	}
}
