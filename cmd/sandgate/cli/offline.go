package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// The commands that check the trail's proofs with no database: `audit
// verify --offline|--archive` and `audit verify-receipt`. They use package
// proof alone, never audit (deps_test.go holds this file, trust.go and
// witness.go to it): an auditor's copy of the binary verifies what it is
// handed without a database driver in the path.

// printVerifyReport prints a verification's report as JSON, and fails
// with exit status 1 when it found a problem.
func printVerifyReport(a *app, rep proof.Report) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if !rep.OK {
		return &ExitError{Code: 1, Message: fmt.Sprintf("audit verify: %d problem(s) found", len(rep.Problems))}
	}
	return nil
}

// verifyOffline checks an export (events, and the checkpoints taken after
// them) with no database.
func verifyOffline(events, checkpoints string, opts proof.OfflineOptions) (proof.Report, error) {
	ef, err := os.Open(events)
	if err != nil {
		return proof.Report{}, err
	}
	defer ef.Close()
	var cr io.Reader
	if checkpoints != "" {
		cf, err := os.Open(checkpoints)
		if err != nil {
			return proof.Report{}, err
		}
		defer cf.Close()
		cr = cf
	}
	return proof.VerifyExportWith(ef, cr, opts)
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
			var rec proof.Receipt
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
			pinned, err := proof.PinnedVerifierKeys(rec, pins)
			if err != nil {
				return sandgate.FieldError("key", "%v", err)
			}
			rep := proof.VerifyReceipt(rec, pinned)
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
