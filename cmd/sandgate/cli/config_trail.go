package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/audit/proof"
)

// trailConfig is the audit trail's: its local spool, its signing and mask
// keys, the keys verify trusts, its checkpoints and its retention.
type trailConfig struct {
	SpoolDir      string // SANDGATE_SPOOL_DIR
	SpoolMaxBytes int64  // SANDGATE_SPOOL_MAX_BYTES
	AuditBacklog  int    // SANDGATE_AUDIT_MAX_BACKLOG
	// SigningKeyFile is the Ed25519 key that signs checkpoints
	// (SANDGATE_SIGNING_KEY_FILE; default checkpoint.key next to the
	// spool), generated on first start.
	SigningKeyFile string
	// MaskKeyFile hashes secrets in the trail (SANDGATE_MASK_KEY_FILE);
	// without it the key is derived from the signing key.
	MaskKeyFile string
	// TrustedKeysFile pins the checkpoint keys verify trusts, every
	// gateway's (PEM blocks, or one hex key a line), and
	// AuditRootPublicKeyFile the cluster root keys whose endorsements it
	// trusts (SANDGATE_TRUSTED_KEYS_FILE,
	// SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE); see trustAnchors.
	// AuditKeyEndorsementFile is this node's key endorsed by the root
	// (sandgate audit endorse-key; SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE),
	// which the node records in the trail.
	TrustedKeysFile         string
	AuditRootPublicKeyFile  string
	AuditKeyEndorsementFile string
	// AuditWitnessKeysFile pins the witnesses whose cosignatures the
	// gateway takes and whose alarms are a known witness's: their
	// verifier keys, one a line (SANDGATE_AUDIT_WITNESS_KEYS_FILE).
	AuditWitnessKeysFile string
	CheckpointEvery      int           // SANDGATE_CHECKPOINT_EVERY
	CheckpointAfter      time.Duration // how long the trail goes without a checkpoint
	// AuditRetention is how long the trail keeps a month
	// (SANDGATE_AUDIT_RETENTION, default audit.DefaultRetention); each
	// gateway applies it every AuditRetentionInterval
	// (SANDGATE_AUDIT_RETENTION_INTERVAL, 1h), archiving expired months
	// into AuditArchiveDir (SANDGATE_AUDIT_ARCHIVE_DIR) first when set.
	AuditRetention         audit.RetentionPeriod
	AuditRetentionInterval time.Duration
	AuditArchiveDir        string
	invalid                []string
}

func readTrailConfig(getenv func(string) string) trailConfig {
	c := trailConfig{
		SpoolMaxBytes:          256 << 20,
		AuditBacklog:           64,
		CheckpointEvery:        1000,
		CheckpointAfter:        10 * time.Second,
		AuditRetentionInterval: time.Hour,
	}
	c.AuditRetention, _ = audit.ParseRetentionPeriod(audit.DefaultRetention)
	e := envReader{getenv: getenv}
	e.str("SANDGATE_SPOOL_DIR", &c.SpoolDir)
	e.str("SANDGATE_SIGNING_KEY_FILE", &c.SigningKeyFile)
	e.str("SANDGATE_MASK_KEY_FILE", &c.MaskKeyFile)
	e.str("SANDGATE_TRUSTED_KEYS_FILE", &c.TrustedKeysFile)
	e.str("SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE", &c.AuditRootPublicKeyFile)
	e.str("SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE", &c.AuditKeyEndorsementFile)
	e.str("SANDGATE_AUDIT_WITNESS_KEYS_FILE", &c.AuditWitnessKeysFile)
	e.str("SANDGATE_AUDIT_ARCHIVE_DIR", &c.AuditArchiveDir)
	e.int64("SANDGATE_SPOOL_MAX_BYTES", &c.SpoolMaxBytes)
	e.int("SANDGATE_AUDIT_MAX_BACKLOG", &c.AuditBacklog)
	e.int("SANDGATE_CHECKPOINT_EVERY", &c.CheckpointEvery)
	e.duration("SANDGATE_AUDIT_RETENTION_INTERVAL", &c.AuditRetentionInterval, false, "1h or 24h")
	if v := getenv("SANDGATE_AUDIT_RETENTION"); v != "" {
		p, err := audit.ParseRetentionPeriod(v)
		if err != nil {
			e.invalid = append(e.invalid, "SANDGATE_AUDIT_RETENTION: "+err.Error())
		}
		c.AuditRetention = p
	}
	if c.SpoolDir == "" {
		if state := getenv("XDG_STATE_HOME"); state != "" {
			c.SpoolDir = filepath.Join(state, "sandgate", "spool")
		} else {
			c.SpoolDir = "/var/lib/sandgate/spool"
		}
	}
	if c.SigningKeyFile == "" {
		c.SigningKeyFile = filepath.Join(c.stateDir(), "checkpoint.key")
	}
	c.invalid = e.invalid
	return c
}

// stateDir is the directory the spool is in, which holds the keys
// generated on first start.
func (c *trailConfig) stateDir() string { return filepath.Dir(c.SpoolDir) }

func (c *trailConfig) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&c.SpoolDir, "spool-dir", c.SpoolDir, "durable local spool for audit events (SANDGATE_SPOOL_DIR)")
	f.StringVar(&c.SigningKeyFile, "signing-key-file", c.SigningKeyFile, "Ed25519 checkpoint signing key (SANDGATE_SIGNING_KEY_FILE)")
	f.StringVar(&c.TrustedKeysFile, "trusted-keys-file", c.TrustedKeysFile, "pin the checkpoint keys verify trusts: every gateway's public key (SANDGATE_TRUSTED_KEYS_FILE; default: the gateway's own key and its node's registered keys)")
	f.StringVar(&c.AuditRootPublicKeyFile, "audit-root-public-key-file", c.AuditRootPublicKeyFile, "cluster root public key(s) whose endorsed node keys verify trusts (SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE)")
	f.StringVar(&c.AuditWitnessKeysFile, "audit-witness-keys-file", c.AuditWitnessKeysFile, "the witnesses this gateway takes cosignatures from: verifier keys, one a line (SANDGATE_AUDIT_WITNESS_KEYS_FILE; default none)")
	f.StringVar(&c.AuditKeyEndorsementFile, "audit-key-endorsement-file", c.AuditKeyEndorsementFile, "this node's checkpoint key endorsed by the cluster root (sandgate audit endorse-key), recorded in the trail (SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE)")
	f.StringVar(&c.MaskKeyFile, "mask-key-file", c.MaskKeyFile, "key that hashes secrets in the audit trail, hex; share it between gateways (SANDGATE_MASK_KEY_FILE; default: derived from the signing key)")
}

// Validate checks the trail's bounds and paths.
func (c *trailConfig) Validate() error {
	switch {
	case len(c.invalid) > 0:
		return invalidError(c.invalid)
	case c.CheckpointEvery < 1 || c.CheckpointEvery > 1_000_000:
		return fmt.Errorf("SANDGATE_CHECKPOINT_EVERY must be between 1 and 1000000, not %d", c.CheckpointEvery)
	case c.SpoolMaxBytes < 1<<20:
		return fmt.Errorf("SANDGATE_SPOOL_MAX_BYTES must be at least 1 MiB")
	case c.AuditBacklog < 1 || c.AuditBacklog > 1_000_000:
		return fmt.Errorf("SANDGATE_AUDIT_MAX_BACKLOG must be between 1 and 1000000, not %d", c.AuditBacklog)
	case c.AuditRetentionInterval < time.Second || c.AuditRetentionInterval > 31*24*time.Hour:
		return fmt.Errorf("SANDGATE_AUDIT_RETENTION_INTERVAL must be between 1s and 744h, not %s", c.AuditRetentionInterval)
	case c.AuditArchiveDir != "" && !filepath.IsAbs(c.AuditArchiveDir):
		return fmt.Errorf("SANDGATE_AUDIT_ARCHIVE_DIR: %q is not an absolute path", c.AuditArchiveDir)
	}
	return nil
}

// maskKey loads the mask key when SANDGATE_MASK_KEY_FILE names one
// (creating it when absent); nil otherwise, which derives it from the
// signing key.
func (c *trailConfig) maskKey() ([]byte, error) {
	if c.MaskKeyFile == "" {
		return nil, nil
	}
	return proof.LoadMaskKey(c.MaskKeyFile, true)
}

// trailKeys are the trail's keys, read before anything is registered (the
// signing key made on first start): the mask key, what verify trusts
// (the same anchors as audit verify with this configuration), the node's
// key endorsement, and the witnesses the operator pinned.
type trailKeys struct {
	mask        []byte
	anchors     proof.Anchors
	endorsement *proof.Endorsement
	witnesses   []string
	// id and public are the signing key's, as the node registry shows it.
	id, public string
}

// keys reads the mask key, the signing key, and the trust settings, for
// the node named node.
func (c *trailConfig) keys(node string) (trailKeys, error) {
	var k trailKeys
	var err error
	if k.mask, err = c.maskKey(); err != nil {
		return k, fmt.Errorf("SANDGATE_MASK_KEY_FILE: %w", err)
	}
	priv, err := proof.LoadSigningKey(c.SigningKeyFile, true)
	if err != nil {
		return k, fmt.Errorf("SANDGATE_SIGNING_KEY_FILE: %w", err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	k.id, k.public = proof.KeyID(pub), hex.EncodeToString(pub)
	if k.anchors, err = trustAnchors(c, node, trustFlags{}); err != nil {
		return k, err
	}
	if k.endorsement, err = keyEndorsement(c); err != nil {
		return k, err
	}
	k.witnesses, err = witnessKeys(c)
	return k, err
}

// open opens the trail for this node: its chains (lifecycle events, and
// decisions on a chain of their own so that an admission never waits
// behind a batch of lifecycle events) and its key registration.
func (c *trailConfig) open(ctx context.Context, dsn, node string, k trailKeys, logger *slog.Logger) (*audit.Store, error) {
	store, err := audit.Open(ctx, audit.Config{
		DSN:                dsn,
		SpoolDir:           c.SpoolDir,
		SpoolMaxBytes:      c.SpoolMaxBytes,
		MaxBacklog:         c.AuditBacklog,
		SigningKeyFile:     c.SigningKeyFile,
		MaskKey:            k.mask,
		Anchors:            k.anchors,
		Endorsement:        k.endorsement,
		Witnesses:          k.witnesses,
		Node:               node,
		CheckpointEvery:    c.CheckpointEvery,
		CheckpointInterval: c.CheckpointAfter,
		DecisionChain:      true,
		Logger:             logger.With("component", "audit"),
	})
	if err != nil {
		return nil, fmt.Errorf("open audit trail: %w", err)
	}
	return store, nil
}

// retain applies the retention period to store until the returned stop
// is called: expired months are archived (with an archive directory) and
// dropped, by one gateway at a time.
func (c *trailConfig) retain(ctx context.Context, store *audit.Store) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.Retention().RetentionLoop(ctx, c.AuditRetention, c.AuditArchiveDir, c.AuditRetentionInterval)
	}()
	return func() { cancel(); <-done }
}
