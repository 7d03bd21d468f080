package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newImageCmd is replaced by the issue that builds it.
func newImageCmd(_ *app) *cobra.Command {
	return &cobra.Command{
		Use:   "image",
		Short: "not built yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("image: not built yet") },
	}
}
