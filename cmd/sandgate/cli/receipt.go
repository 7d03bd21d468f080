package cli

import (
	"context"
	"encoding/json"
	"os"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/audit/proof"
)

// newAuditReceiptCmd builds `sandgate audit receipt RUN_ID`.
func newAuditReceiptCmd(a *app) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "receipt RUN_ID",
		Short: "Print a run's receipt: its events, their inclusion proofs, the checkpoint notes and keys",
		Long: `Read a run's events from the trail (SANDGATE_DATABASE_URL; a role with
SELECT is enough) and print its receipt as JSON: every event of the run
(request, decision with the policy revision, lifecycle, exit code,
artifacts with their hashes) with its canonical body and chain links, an
inclusion proof of each in its chain's newest checkpointed tree, the signed
checkpoint notes and the verifier keys. Check it anywhere, with no database
and no network, with sandgate audit verify-receipt.

An event newer than its chain's newest checkpoint has no proof yet: the
command then fails; retry after the checkpoint interval (10 s by default).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openTrail(cmd.Context(), a, proof.Anchors{})
			if err != nil {
				return err
			}
			defer s.Close(context.Background())
			rec, err := s.Proofs().Receipt(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			w := a.stdout
			if out != "" {
				f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			return enc.Encode(rec)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the receipt to this file (mode 0600) instead of standard output")
	return cmd
}
