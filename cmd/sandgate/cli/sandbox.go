package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
)

// newSandboxCmd builds `sandgate sandbox list|cleanup`, the admin view of
// the containers sandgate manages on this node's daemon.
func newSandboxCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "List and clean up the containers sandgate manages",
	}

	var out *outputFormat
	list := &cobra.Command{
		Use:   "list",
		Short: "List every container labelled sandgate.managed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ex, err := a.adminExecutor()
			if err != nil {
				return err
			}
			defer ex.Close()
			boxes, err := ex.Reaper().Sandboxes(cmd.Context())
			if err != nil {
				return err
			}
			return a.printSandboxes(boxes, out.JSON())
		},
	}
	out = bindOutput(list)

	var opts struct {
		running bool
		asJSON  bool
	}
	cleanup := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove this node's managed containers that no run owns",
		Long: "Remove this node's managed containers (label sandgate.node = SANDGATE_NODE) that no run owns.\n" +
			"This command cannot see the runs of a gateway serving on the same node, so it leaves\n" +
			"running containers alone unless --running is given; a serving gateway's reaper removes\n" +
			"running orphans itself (POST /v1/sandboxes/cleanup).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ex, err := a.adminExecutor()
			if err != nil {
				return err
			}
			defer ex.Close()
			removed, err := ex.Reaper().Cleanup(cmd.Context(), executor.CleanupOptions{IncludeRunning: opts.running})
			if perr := a.printSandboxes(removed, opts.asJSON); perr != nil && err == nil {
				err = perr
			}
			return err
		},
	}
	cleanup.Flags().BoolVar(&opts.running, "running", false, "also remove running containers (only when no gateway serves on this node)")
	cleanup.Flags().BoolVar(&opts.asJSON, "json", false, "print JSON")
	cmd.AddCommand(list, cleanup)
	return cmd
}

func (a *app) printSandboxes(boxes []sandgate.Sandbox, asJSON bool) error {
	if asJSON {
		if boxes == nil {
			boxes = []sandgate.Sandbox{}
		}
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"sandboxes": boxes})
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CONTAINER\tNAME\tSTATE\tRUN\tNODE\tCREATED\tORPHAN")
	for _, b := range boxes {
		id := b.ContainerID
		if len(id) > 12 {
			id = id[:12]
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%t\n", id, b.Name, b.State, b.RunID, b.Node, b.CreatedAt.Format(time.RFC3339), b.Orphan)
	}
	return w.Flush()
}
