package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newVolumeCmd builds `sandgate volume list|rm`: the teams' cache volumes,
// through the gateway's admin API.
func newVolumeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "List and remove the teams' cache volumes (admin)",
	}
	var out *outputFormat
	list := &cobra.Command{
		Use:   "list",
		Short: "List every team's cache volumes with their size and use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			vols, err := c.Volumes(cmd.Context())
			if err != nil {
				return clientError(a, err)
			}
			if out.JSON() {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(vols)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TEAM\tNAME\tSIZE MB\tUSED MB\tDOCKER VOLUME")
			for _, v := range vols.Volumes {
				used := "-"
				if v.UsedBytes >= 0 {
					used = fmt.Sprintf("%.1f", float64(v.UsedBytes)/(1<<20))
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", v.Team, v.Name, v.SizeMB, used, v.DockerVolume)
			}
			return w.Flush()
		},
	}
	out = bindOutput(list)
	rm := &cobra.Command{
		Use:   "rm TEAM NAME",
		Short: "Remove a team's cache volume and what it holds; the team's next run that names it starts empty",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			if err := c.RemoveVolume(cmd.Context(), args[0], args[1]); err != nil {
				return clientError(a, err)
			}
			fmt.Fprintf(a.stdout, "removed cache volume %s of team %s\n", args[1], args[0])
			return nil
		},
	}
	cmd.AddCommand(list, rm)
	return cmd
}
