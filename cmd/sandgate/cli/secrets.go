package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/runstore"
	"github.com/sandgate/sandgate/secrets"
)

// newSecretsCmd builds `sandgate secrets set|list|rm` (through the
// gateway's API, security and admin), `re-encrypt` (on the database,
// with the key file) and `new-key`.
func newSecretsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Set, list and remove the secrets runs use through the egress proxy",
		Long: `Secrets are values a run uses without holding them: its sandbox holds a
placeholder, and the egress proxy writes the value into the run's requests to
the destinations the policy's data names for it (docs/secrets.md). Values are
written only: no command, answer or log shows one again.`,
	}
	cmd.AddCommand(newSecretsSetCmd(a), newSecretsListCmd(a), newSecretsRmCmd(a), newSecretsReEncryptCmd(a), newSecretsNewKeyCmd(a))
	return cmd
}

func newSecretsSetCmd(a *app) *cobra.Command {
	var fromFile string
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "Set a secret's value, read from standard input (one trailing newline dropped) or --from-file",
		Long: `Set stores the value as the secret's next version. The value is read from
standard input or a file, never from the command line, where other users of the
host could read it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			value, err := readSecretValue(a.stdin, fromFile)
			if err != nil {
				return err
			}
			c, err := a.newClient()
			if err != nil {
				return err
			}
			info, err := c.PutSecret(cmd.Context(), args[0], value)
			if err != nil {
				return clientError(a, err)
			}
			_, err = fmt.Fprintf(a.stdout, "secret %s is at version %d (%s)\n", info.Name, info.Version, info.ValueHash)
			return err
		},
	}
	set.Flags().StringVar(&fromFile, "from-file", "", "read the value from this file instead of standard input")
	return set
}

// readSecretValue reads a value from path, or r when path is empty, and
// drops one trailing newline (what echo and editors add).
func readSecretValue(r io.Reader, path string) (string, error) {
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, sandgate.MaxSecretValueBytes+2))
	if err != nil {
		return "", err
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", errors.New("no value: give it on standard input or with --from-file")
	}
	return v, nil
}

func newSecretsListCmd(a *app) *cobra.Command {
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the secrets: name, version, who set it when, never a value",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			list, err := c.Secrets(cmd.Context())
			if err != nil {
				return clientError(a, err)
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tVERSION\tSET BY\tSET AT\tKEY\tVALUE HASH")
			for _, s := range list.Secrets {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", s.Name, s.Version, s.SetBy, s.SetAt.Format(time.RFC3339), s.KeyID, s.ValueHash)
			}
			return w.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return list
}

func newSecretsRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a secret's value; runs admitted with it that have not started fail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			if err := c.DeleteSecret(cmd.Context(), args[0]); err != nil {
				return clientError(a, err)
			}
			_, err = fmt.Fprintf(a.stdout, "removed secret %s\n", args[0])
			return err
		},
	}
}

func newSecretsReEncryptCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "re-encrypt",
		Short: "Wrap every secret's data key under the first key of SANDGATE_SECRETS_KEY_FILE",
		Long: `After a new key is put first in SANDGATE_SECRETS_KEY_FILE (gateways seal new
versions with it as soon as they read the file again, and open older ones with
the keys after it), re-encrypt wraps every stored secret's data key under it,
on the database directly. The older keys can then leave the file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, err := a.cfg.secretsConfig.keyring()
			if err != nil {
				return err
			}
			if keys == nil {
				return errors.New("SANDGATE_SECRETS_KEY_FILE is not set")
			}
			db, err := audit.OpenDB(cmd.Context(), a.cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer db.Close()
			store, err := runstore.New(db, runstore.Config{})
			if err != nil {
				return err
			}
			n, err := secrets.ReEncrypt(cmd.Context(), keys, store)
			if err != nil {
				return fmt.Errorf("re-encrypt (%d rewrapped before): %w", n, err)
			}
			_, err = fmt.Fprintf(a.stdout, "%d secret(s) rewrapped under key %s\n", n, keys.Primary())
			return err
		},
	}
}

func newSecretsNewKeyCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "new-key ID",
		Short: "Print a new key-encryption key's line for SANDGATE_SECRETS_KEY_FILE",
		Long: `Prints "ID HEX", a new random key of 32 bytes. Put it first in the key file
(mode 0600) to seal with it; keep the older lines until re-encrypt has run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			line, err := secrets.NewKeyLine(args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.stdout, line)
			return err
		},
	}
}
