package cli

import (
	"bytes"
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
	var keyFiles, keys, rootKeys []string
	cmd := &cobra.Command{
		Use:   "verify-receipt FILE",
		Short: "Check a run receipt offline; exit 1 on any problem",
		Long: `Check a receipt with nothing but the file: every body is canonical JSON of
the run and hashes, with its prev_hash, chain and seq, to its event hash
(SHA-256(prev_hash ‖ len(chain) ‖ chain ‖ seq ‖ body)); every event hash is
a leaf of its chain's tree by its RFC 6962 inclusion proof to the root of
the checkpoint note; every note is its chain's, signed by a trusted key;
and the run's admission decision and its end are among the events proven.
The report lists exactly the events proven ("proves"), the decision and
the end, and says in words what is proven and what is not: a receipt does
not prove that the trail holds no other event of the run.

Which keys are trusted, as audit verify: --key (a note verifier key
"name+hash+key", or an Ed25519 public key as PEM or hex, or a file holding
one; repeatable), --key-file, and --root-key (the cluster's root: a key it
endorsed, the endorsement carried in the receipt, for its node's chains);
without any, the configuration's (SANDGATE_TRUSTED_KEYS_FILE,
SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE, and the local key for its node's
chains). The receipt's own keys vouch for nothing: with no anchor the
report says so (unpinned_keys). Prints a JSON report and exits 1 when there
is a problem.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := readReceipt(args[0])
			if err != nil {
				return err
			}
			opts, err := receiptTrust(a, keys, keyFiles, rootKeys)
			if err != nil {
				return err
			}
			rep := proof.VerifyReceipt(rec, opts)
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
	cmd.Flags().StringSliceVar(&rootKeys, "root-key", nil, "trust the keys this cluster root public key file endorsed (PEM or hex); repeatable")
	return cmd
}

// readReceipt reads a receipt file, refusing one larger than a receipt
// holds or with fields a receipt has not.
func readReceipt(path string) (proof.Receipt, error) {
	var rec proof.Receipt
	f, err := os.Open(path)
	if err != nil {
		return rec, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, proof.MaxReceiptBytes+1))
	if err != nil {
		return rec, err
	}
	if len(data) > proof.MaxReceiptBytes {
		return rec, sandgate.Errorf(sandgate.CodeTooLarge, "%s is larger than a receipt holds (%d bytes)", path, proof.MaxReceiptBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, sandgate.FieldError("receipt", "%s is not a receipt: %v", path, err)
	}
	return rec, nil
}

// receiptTrust is what a receipt's notes are trusted from: the keys and
// root keys given, or without any the configuration's anchors.
func receiptTrust(a *app, keys, keyFiles, rootKeys []string) (proof.ReceiptOptions, error) {
	var o proof.ReceiptOptions
	if len(keys)+len(keyFiles)+len(rootKeys) == 0 {
		anchors, err := trustAnchors(&a.cfg.trailConfig, a.cfg.Node, trustFlags{})
		o.Anchors = anchors
		return o, err
	}
	var pins [][]byte
	var sources []string
	for _, k := range keys {
		if b, err := os.ReadFile(k); err == nil {
			pins = append(pins, b)
		} else {
			pins = append(pins, []byte(k))
		}
		sources = append(sources, "--key")
	}
	for _, f := range keyFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return o, err
		}
		pins = append(pins, b)
		sources = append(sources, "--key-file "+f)
	}
	for _, p := range pins {
		vkey, pub, err := proof.ParsePinnedKey(p)
		if err != nil {
			return o, sandgate.FieldError("key", "%v", err)
		}
		if vkey != "" {
			o.VerifierKeys = append(o.VerifierKeys, vkey)
		} else {
			o.Anchors.Pinned = append(o.Anchors.Pinned, pub)
		}
	}
	for _, f := range rootKeys {
		ks, err := readPublicKeys(f)
		if err != nil {
			return o, sandgate.FieldError("root-key", "%s: %v", f, err)
		}
		o.Anchors.Roots = append(o.Anchors.Roots, ks...)
		sources = append(sources, "--root-key "+f)
	}
	o.Anchors.Source = strings.Join(sources, ", ")
	return o, nil
}
