package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/policies"
)

func newPolicySignCmd(a *app) *cobra.Command {
	var opts policies.SignOptions
	var keyFile string
	cmd := &cobra.Command{
		Use:   "sign [DIR] --key KEY.pem --key-id ID",
		Short: "Sign the bundle in OPA's format (.signatures.json), for sites without the opa CLI",
		Long: `Sign the bundle in DIR as 'opa sign --bundle' does: .signatures.json holds a JWT,
signed with KEY.pem (RSA, or ECDSA P-256/P-384/P-521), over the SHA-256 of every
*.rego and *.json file at the top of DIR and of its .manifest. --revision writes
the revision into .manifest first, so that the signature covers it. A gateway
with SANDGATE_POLICY_VERIFY_KEYS loads the bundle only while every file matches.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyFile == "" || opts.KeyID == "" {
				return &ExitError{Code: exitUsage, Message: "--key and --key-id are required"}
			}
			var err error
			if opts.Key, err = os.ReadFile(keyFile); err != nil {
				return err
			}
			dir := a.policyDir(args)
			sig, err := policies.Sign(dir, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "signed %s with key %s", dir, sig.KeyID)
			if sig.Revision != "" {
				fmt.Fprintf(a.stdout, ", revision %s", sig.Revision)
			}
			fmt.Fprintln(a.stdout)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&keyFile, "key", "", "PEM private key to sign with")
	f.StringVar(&opts.KeyID, "key-id", "", "the key's ID, as the gateway pins its public key")
	f.StringVar(&opts.Algorithm, "alg", "", "JWS algorithm (default: RS256 for RSA, ES256/384/512 for ECDSA)")
	f.StringVar(&opts.Revision, "revision", "", "revision to write into .manifest before signing")
	return cmd
}

func newPolicyVerifyCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "verify [DIR]",
		Short: "Verify the bundle's signature against the pinned keys (exit 2 when refused)",
		Long: `Verify the bundle in DIR as the gateway does before it loads it: its
.signatures.json must verify with a key of --policy-verify-keys
(SANDGATE_POLICY_VERIFY_KEYS) and cover every *.rego and *.json file at the top
of DIR and its .manifest, and nothing else. Prints the signer's key ID and the
signed revision; exit status 2 when the bundle would be refused.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := a.cfg.verifyKeys()
			if err != nil {
				return err
			}
			if keys == nil {
				return &ExitError{Code: exitUsage, Message: "--policy-verify-keys (SANDGATE_POLICY_VERIFY_KEYS) is required"}
			}
			dir := a.policyDir(args)
			sig, err := policies.Verify(dir, keys)
			if err != nil {
				return policyInvalid(a.stderr, err)
			}
			fmt.Fprintf(a.stdout, "ok: %s is signed by %s, revision %q\n", dir, sig.KeyID, sig.Revision)
			return nil
		},
	}
}
