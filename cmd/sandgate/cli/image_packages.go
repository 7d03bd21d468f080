package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newImagePackagesCmd builds `sandgate image packages REF`: the Debian
// packages an image on the gateway's node carries, through the API
// (auditor, admin).
func newImagePackagesCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "packages REF",
		Short: "List the Debian packages an image carries (name, version, architecture, source), through the gateway",
		Long: `List the Debian packages image REF (name:tag, name@sha256:…, or an image ID)
carries on the gateway's node: name, version, architecture and source
package, as 'sandgate image build' recorded them in the image. The digest is
what image.resolved records for a run of that image. An image with no list
says why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			list, err := c.ImagePackages(cmd.Context(), args[0])
			if err != nil {
				return clientError(a, err)
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			if !list.Listed {
				_, err := fmt.Fprintf(a.stdout, "%s (%s) carries no package list: %s\n", list.Ref, list.ID, list.Reason)
				return err
			}
			fmt.Fprintf(a.stdout, "%s (%s), %d packages, list %s\n", list.Ref, list.ID, len(list.Packages), list.Digest)
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tVERSION\tARCH\tSOURCE")
			for _, p := range list.Packages {
				src := p.Source
				if p.SourceVersion != p.Version {
					src += " (" + p.SourceVersion + ")"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Name, p.Version, p.Architecture, src)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
