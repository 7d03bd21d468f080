package cli

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// Which checkpoint keys a verifier trusts (docs/audit.md, "Which keys are
// trusted"): trustAnchors is the one place the anchors come from, for
// `serve` (GET /v1/audit/verify, archives), `audit verify` online and
// offline, `audit archive|purge|retention`, and `verify-receipt`. The
// decision over the trail's registrations is proof.ResolveTrust's.

// trustFlags are the anchors given on a command line. When any is given,
// they are the anchors, exactly: the configuration's are not added.
type trustFlags struct {
	publicKeys  []string // --public-key: one key a file
	trustedKeys []string // --trusted-keys: any number of keys a file
	rootKeys    []string // --root-key: cluster root public keys, files
}

// bind adds the flags to cmd.
func (f *trustFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.publicKeys, "public-key", nil, "trust this checkpoint public key file (PEM or hex); repeatable")
	fl.StringSliceVar(&f.trustedKeys, "trusted-keys", nil, "trust the checkpoint public keys in this file, every node's (PEM blocks, or one hex key a line); repeatable")
	fl.StringSliceVar(&f.rootKeys, "root-key", nil, "trust the keys this cluster root public key file endorsed (PEM or hex; default SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE); repeatable")
}

func (f trustFlags) given() bool {
	return len(f.publicKeys)+len(f.trustedKeys)+len(f.rootKeys) > 0
}

// trustAnchors returns the anchors a verifier of the trail starts from:
// with flags, exactly those; otherwise the configuration's, the keys of
// SANDGATE_TRUSTED_KEYS_FILE, the root keys of
// SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE, and the local key: the public half
// of SANDGATE_SIGNING_KEY_FILE when it can be read, for SANDGATE_NODE,
// which counts only when the trail registered it for that node. serve and
// audit verify call it alike, so the API and the CLI trust the same keys
// from the same configuration.
func trustAnchors(cfg *trailConfig, node string, f trustFlags) (proof.Anchors, error) {
	var a proof.Anchors
	if f.given() {
		var sources []string
		for _, p := range f.publicKeys {
			k, err := readPublicKey(p)
			if err != nil {
				return a, fmt.Errorf("--public-key %s: %w", p, err)
			}
			a.Pinned = append(a.Pinned, k)
			sources = append(sources, "--public-key "+p)
		}
		for _, p := range f.trustedKeys {
			ks, err := readPublicKeys(p)
			if err != nil {
				return a, fmt.Errorf("--trusted-keys %s: %w", p, err)
			}
			a.Pinned = append(a.Pinned, ks...)
			sources = append(sources, "--trusted-keys "+p)
		}
		for _, p := range f.rootKeys {
			ks, err := readPublicKeys(p)
			if err != nil {
				return a, fmt.Errorf("--root-key %s: %w", p, err)
			}
			a.Roots = append(a.Roots, ks...)
			sources = append(sources, "--root-key "+p)
		}
		a.Source = strings.Join(sources, ", ")
		return a, nil
	}
	var sources []string
	if p := cfg.TrustedKeysFile; p != "" {
		ks, err := readPublicKeys(p)
		if err != nil {
			return a, fmt.Errorf("SANDGATE_TRUSTED_KEYS_FILE %s: %w", p, err)
		}
		a.Pinned = ks
		sources = append(sources, "SANDGATE_TRUSTED_KEYS_FILE "+p)
	}
	if p := cfg.AuditRootPublicKeyFile; p != "" {
		ks, err := readPublicKeys(p)
		if err != nil {
			return a, fmt.Errorf("SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE %s: %w", p, err)
		}
		a.Roots = ks
		sources = append(sources, "SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE "+p)
	}
	a.Source = strings.Join(sources, ", ")
	if cfg.SigningKeyFile != "" {
		priv, err := proof.LoadSigningKey(cfg.SigningKeyFile, false)
		switch {
		case err == nil:
			a.Local = &proof.LocalKey{Node: node, Key: priv.Public().(ed25519.PublicKey), File: cfg.SigningKeyFile}
		case errors.Is(err, os.ErrNotExist), errors.Is(err, os.ErrPermission):
			// No local key here: an auditor's host.
		default:
			return a, fmt.Errorf("SANDGATE_SIGNING_KEY_FILE %s: %w", cfg.SigningKeyFile, err)
		}
	}
	return a, nil
}

// readPublicKey reads one Ed25519 public key (PEM or hex) from path.
func readPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return proof.ParsePublicKey(data)
}

// readPublicKeys reads the Ed25519 public keys of path (PEM blocks, or one
// hex key a line).
func readPublicKeys(path string) ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return proof.ParsePublicKeys(data)
}

// keyEndorsement reads this node's key endorsement by the cluster root
// (SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE), nil without one.
func keyEndorsement(cfg *trailConfig) (*proof.Endorsement, error) {
	if cfg.AuditKeyEndorsementFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(cfg.AuditKeyEndorsementFile)
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE: %w", err)
	}
	e, err := proof.ParseEndorsement(data)
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE %s: %w", cfg.AuditKeyEndorsementFile, err)
	}
	return &e, nil
}

// newAuditEndorseKeyCmd builds `sandgate audit endorse-key`.
func newAuditEndorseKeyCmd(a *app) *cobra.Command {
	var rootFile, keyFile, pubFile, node, out string
	cmd := &cobra.Command{
		Use:   "endorse-key --root-key-file ROOT",
		Short: "Endorse a node's checkpoint key with the cluster's root key, for verifiers that trust the root",
		Long: `Sign a node's checkpoint public key with the cluster's root key and print
the endorsement (JSON). Give it to the node as
SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE: the node records it in the trail
(audit.key_endorsed) when it registers its key, and every verifier that
trusts the root (--root-key, SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE) then
trusts the key, on any host, with no list of the nodes' keys to keep.

The root key (Ed25519, PEM) is made when the file does not exist; keep it
off the nodes, where an operator endorses each node's key (its public key
is enough: --public-key) before the node first starts with it. Its public
half, for verifiers: sandgate audit public-key --signing-key-file ROOT.
By default the key endorsed is this host's (SANDGATE_SIGNING_KEY_FILE,
made when absent) for SANDGATE_NODE.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rootFile == "" {
				return sandgate.FieldError("root-key-file", "required: the cluster's root key (made when absent)")
			}
			if node == "" {
				node = a.cfg.Node
			}
			var pub ed25519.PublicKey
			if pubFile != "" {
				k, err := readPublicKey(pubFile)
				if err != nil {
					return sandgate.FieldError("public-key", "%s: %v", pubFile, err)
				}
				pub = k
			} else {
				if keyFile == "" {
					keyFile = a.cfg.SigningKeyFile
				}
				priv, err := proof.LoadSigningKey(keyFile, true)
				if err != nil {
					return err
				}
				pub = priv.Public().(ed25519.PublicKey)
			}
			_, statErr := os.Stat(rootFile)
			root, err := proof.LoadSigningKey(rootFile, true)
			if err != nil {
				return err
			}
			if errors.Is(statErr, os.ErrNotExist) {
				fmt.Fprintf(a.stderr, "audit endorse-key: made a new root key at %s (key %s); give verifiers its public half\n",
					rootFile, proof.KeyID(root.Public().(ed25519.PublicKey)))
			}
			e := proof.Endorse(root, node, pub)
			data, err := json.MarshalIndent(e, "", "  ")
			if err != nil {
				return err
			}
			data = append(data, '\n')
			if out == "" || out == "-" {
				_, err = a.stdout.Write(data)
				return err
			}
			return os.WriteFile(out, data, 0o600)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&rootFile, "root-key-file", "", "the cluster's root key (Ed25519 PEM; made when absent)")
	fl.StringVar(&keyFile, "signing-key-file", "", "the node's checkpoint key to endorse (default SANDGATE_SIGNING_KEY_FILE)")
	fl.StringVar(&pubFile, "public-key", "", "endorse this public key file (PEM or hex) instead of a key file of this host")
	fl.StringVar(&node, "node", "", "the node the key signs as (default SANDGATE_NODE)")
	fl.StringVarP(&out, "output", "o", "", "write the endorsement to this file (mode 0600) instead of standard output")
	return cmd
}

// maxWitnessKeys bounds the witnesses an operator pins.
const maxWitnessKeys = 64

// witnessKeys reads the witnesses' verifier keys the operator pinned
// (SANDGATE_AUDIT_WITNESS_KEYS_FILE: one a line, # comments), none
// without it.
func witnessKeys(cfg *trailConfig) ([]string, error) {
	if cfg.AuditWitnessKeysFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(cfg.AuditWitnessKeysFile)
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_AUDIT_WITNESS_KEYS_FILE: %w", err)
	}
	var keys []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, err := proof.NewCosignatureVerifier(line); err != nil {
			return nil, fmt.Errorf("SANDGATE_AUDIT_WITNESS_KEYS_FILE %s line %d: %w", cfg.AuditWitnessKeysFile, i+1, err)
		}
		keys = append(keys, line)
	}
	if len(keys) > maxWitnessKeys {
		return nil, fmt.Errorf("SANDGATE_AUDIT_WITNESS_KEYS_FILE %s: %d keys, at most %d", cfg.AuditWitnessKeysFile, len(keys), maxWitnessKeys)
	}
	return keys, nil
}
