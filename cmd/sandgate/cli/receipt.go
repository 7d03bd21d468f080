package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
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
	s, err := openTrail(ctx, a, nil)
	if err != nil {
		return sandgate.Receipt{}, err
	}
	defer s.Close(context.Background())
	return s.Receipt(ctx, runID)
}

// newAuditVerifyReceiptCmd builds `sandgate audit verify-receipt FILE`.
func newAuditVerifyReceiptCmd(a *app) *cobra.Command {
	var keyFiles, keys []string
	cmd := &cobra.Command{
		Use:   "verify-receipt FILE",
		Short: "Check a run receipt offline; exit 1 on any problem",
		Long: `Check a receipt with nothing but the file: every body is canonical JSON of
the run and hashes, with its prev_hash, chain and seq, to its event hash
(SHA-256(prev_hash ‖ len(chain) ‖ chain ‖ seq ‖ body)); every event hash is
a leaf of its chain's tree by its RFC 6962 inclusion proof to the root of
the checkpoint note; every note is signed by a key the receipt names. Pin
the gateway's key with --key (a note verifier key "name+hash+key", or an
Ed25519 public key as PEM or hex, or a file holding one; repeatable): the
receipt's own keys are then ignored. Prints a JSON report and exits 1 when
there is a problem.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			var rec audit.Receipt
			dec := json.NewDecoder(strings.NewReader(string(data)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rec); err != nil {
				return sandgate.FieldError("receipt", "%s is not a receipt: %v", args[0], err)
			}
			var pins [][]byte
			for _, k := range keys {
				if b, err := os.ReadFile(k); err == nil {
					pins = append(pins, b)
				} else {
					pins = append(pins, []byte(k))
				}
			}
			for _, f := range keyFiles {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				pins = append(pins, b)
			}
			pinned, err := audit.PinnedVerifierKeys(rec, pins)
			if err != nil {
				return sandgate.FieldError("key", "%v", err)
			}
			rep := audit.VerifyReceipt(rec, pinned)
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				return err
			}
			if !rep.OK {
				var lines []string
				for _, p := range rep.Problems {
					where := ""
					if p.EventID != "" {
						where = fmt.Sprintf(" (event %s, chain %s seq %d)", p.EventID, p.ChainID, p.Seq)
					}
					lines = append(lines, fmt.Sprintf("  %s%s: %s", p.Kind, where, p.Detail))
				}
				return &ExitError{Code: 1, Message: fmt.Sprintf("audit verify-receipt: %d problem(s):\n%s", len(rep.Problems), strings.Join(lines, "\n"))}
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&keys, "key", nil, "pin this gateway key: a note verifier key, an Ed25519 public key (PEM or hex), or a file holding one; repeatable")
	cmd.Flags().StringSliceVar(&keyFiles, "key-file", nil, "pin the key in this file; repeatable")
	return cmd
}
