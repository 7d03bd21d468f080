package cli

import (
	"context"
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// newAuditReceiptCmd builds `sandgate audit receipt RUN_ID`.
func newAuditReceiptCmd(a *app) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "receipt RUN_ID",
		Short: "Print a run's receipt: its events, their inclusion proofs, the checkpoint notes and keys",
		Long: `Print a run's receipt as JSON, from the gateway's API (GET
/v1/runs/{id}/receipt with SANDGATE_URL and SANDGATE_TOKEN: a submitter of the
run's team, an auditor or an admin), or with --database-url from the trail
directly (a role with SELECT is enough): every event of the run (request,
decision with the policy revision, lifecycle, exit code, artifacts with
their hashes) with its canonical body and chain links, an inclusion proof
of each in its chain's newest checkpointed tree, the signed checkpoint
notes and the verifier keys. Check it anywhere, with no database and no
network, with sandgate audit verify-receipt.

An event newer than its chain's newest checkpoint has no proof yet: the
command then fails; retry after the checkpoint interval (10 s by default).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var rec sandgate.Receipt
			var err error
			if direct(cmd) {
				rec, err = receiptDatabase(cmd.Context(), a, args[0])
			} else {
				rec, err = receiptThroughAPI(cmd.Context(), a, args[0])
			}
			if err != nil {
				return err
			}
			w, done, err := openOutput(a, out)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			err = enc.Encode(rec)
			if cerr := done(); err == nil {
				err = cerr
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the receipt to this file (mode 0600) instead of standard output")
	return cmd
}

// receiptDatabase is `audit receipt --database-url`.
func receiptDatabase(ctx context.Context, a *app, runID string) (sandgate.Receipt, error) {
	s, err := openTrail(ctx, a, proof.Anchors{})
	if err != nil {
		return sandgate.Receipt{}, err
	}
	defer s.Close(context.Background())
	return s.Proofs().Receipt(ctx, runID)
}
