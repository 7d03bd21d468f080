package cli

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/audit/proof"
)

// Retention commands: `sandgate audit partitions|archive|purge`. archive
// and purge record what they do in the trail, so they open a writing
// store with a chain of their own (persisted under SANDGATE_SPOOL_DIR/admin)
// signed with SANDGATE_SIGNING_KEY_FILE.

// openAdminTrail opens a writing store for an operator's command, trusting
// the public keys in keyFiles, or without any what the configuration says
// (trustAnchors).
func openAdminTrail(ctx context.Context, a *app, keyFiles []string) (*audit.Store, error) {
	anchors, err := trustAnchors(&a.cfg.trailConfig, a.cfg.Node, trustFlags{publicKeys: keyFiles})
	if err != nil {
		return nil, err
	}
	maskKey, err := a.cfg.maskKey()
	if err != nil {
		return nil, err
	}
	return audit.Open(ctx, audit.Config{
		DSN:                a.cfg.DatabaseURL,
		SpoolDir:           filepath.Join(a.cfg.SpoolDir, "admin"),
		SpoolMaxBytes:      a.cfg.SpoolMaxBytes,
		SigningKeyFile:     a.cfg.SigningKeyFile,
		MaskKey:            maskKey,
		Node:               a.cfg.Node,
		Anchors:            anchors,
		CheckpointEvery:    a.cfg.CheckpointEvery,
		CheckpointInterval: a.cfg.CheckpointAfter,
	})
}

// operator names who runs the command: the sudo user when there is one.
func operator() string {
	if u := os.Getenv("SUDO_USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "unknown"
}

// parseMonthBound reads --before: a month (2026-10), a day (2026-10-01)
// or an RFC 3339 time.
func parseMonthBound(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01", "2006-01-02", time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, sandgate.FieldError("before", "%q is not a month (2006-01), a day (2006-01-02) or an RFC 3339 time", s)
}

func newAuditPartitionsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "partitions",
		Short: "List the audit trail's month partitions with their rows per chain (JSON)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := openTrail(cmd.Context(), a, proof.Anchors{})
			if err != nil {
				return err
			}
			defer s.Close(context.Background())
			parts, err := s.Retention().Partitions(cmd.Context())
			if err != nil {
				return err
			}
			return writeJSON(a, parts)
		},
	}
}

func newAuditArchiveCmd(a *app) *cobra.Command {
	var dir, before, actor string
	var partitions, keyFiles []string
	cmd := &cobra.Command{
		Use:   "archive (--partition NAME ... | --before MONTH) --dir DIR",
		Short: "Write month partitions and their checkpoints to DIR, verify them, record audit.archived",
		Long: `Archive writes each month partition to DIR/<partition>/: events.jsonl (its
rows), checkpoints.jsonl (every checkpoint of its chains) and manifest.json
(the files' SHA-256, rows and chain boundaries). The files are synced and
verified offline before an audit.archived event records the archive.
Only months that are over can be archived, and only once each of their
chains is under a signed checkpoint. Archiving again into the same DIR
finds the archive standing and records nothing new. Rows waiting in the
default partition are first moved into their months.

Checkpoints are checked against the --public-key files when given (this
node's key is trusted too), otherwise against the keys the trail's key
registry vouches for.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return sandgate.FieldError("dir", "required: where the archive is written")
			}
			if (len(partitions) == 0) == (before == "") {
				return sandgate.FieldError("partition", "give --partition (repeatable) or --before, not both")
			}
			s, err := openAdminTrail(cmd.Context(), a, keyFiles)
			if err != nil {
				return err
			}
			defer s.Close(context.Background())
			if before != "" {
				bound, err := parseMonthBound(before)
				if err != nil {
					return err
				}
				parts, err := s.Retention().Partitions(cmd.Context())
				if err != nil {
					return err
				}
				for _, p := range parts {
					if !p.Default && !p.To.After(bound) && !p.To.After(time.Now()) {
						partitions = append(partitions, p.Name)
					}
				}
			}
			var done []proof.ArchiveManifest
			for _, name := range partitions {
				m, err := s.Retention().Archive(cmd.Context(), name, dir, actor)
				if err != nil {
					_ = writeJSON(a, done)
					return err
				}
				done = append(done, m)
			}
			if err := writeJSON(a, done); err != nil {
				return err
			}
			return s.Close(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", "", "directory to write the archives into (one subdirectory per partition)")
	fl.StringSliceVar(&partitions, "partition", nil, "a month partition (audit_events_YYYY_MM); repeatable")
	fl.StringVar(&before, "before", "", "archive every month partition that ends by this month (2026-10), day or time")
	fl.StringVar(&actor, "actor", operator(), "who archives, as recorded in audit.archived")
	fl.StringSliceVar(&keyFiles, "public-key", nil, "the gateways' checkpoint public keys (PEM or hex; default: the key registry's); repeatable")
	return cmd
}

func newAuditPurgeCmd(a *app) *cobra.Command {
	var before, actor string
	var dryRun bool
	var keyFiles []string
	cmd := &cobra.Command{
		Use:   "purge --before MONTH [--dry-run]",
		Short: "Drop archived month partitions, oldest first, each recorded as retention.applied",
		Long: `Purge drops every month partition that ends by --before (never the current
month), oldest first. Each drop and its retention.applied event are one
transaction. It stops at the first month it must refuse and says why:
never archived, changed since its archive, an archive that no longer
verifies where it can be read, older rows of its chains still elsewhere,
or rows not under a signed checkpoint. Rows waiting in the default
partition are first moved into their months, and purged by the same
rules. Verify then starts each purged chain at the boundary
retention.applied records.

The database role must own audit_events (run it with the migrating role's
SANDGATE_DATABASE_URL). --dry-run checks and reports without dropping.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if before == "" {
				return sandgate.FieldError("before", "required: purge months that end by this month (2026-10), day or time")
			}
			bound, err := parseMonthBound(before)
			if err != nil {
				return err
			}
			s, err := openAdminTrail(cmd.Context(), a, keyFiles)
			if err != nil {
				return err
			}
			defer s.Close(context.Background())
			res, err := s.Retention().Purge(cmd.Context(), bound, dryRun, actor)
			if werr := writeJSON(a, res); err == nil {
				err = werr
			}
			if err != nil {
				return err
			}
			if len(res) == 0 {
				fmt.Fprintln(a.stderr, "audit purge: no month partition ends by", bound.Format(time.RFC3339))
			}
			return s.Close(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&before, "before", "", "purge month partitions that end by this month (2026-10), day or time")
	fl.BoolVar(&dryRun, "dry-run", false, "check and report, drop nothing")
	fl.StringVar(&actor, "actor", operator(), "who purges, as recorded in retention.applied")
	fl.StringSliceVar(&keyFiles, "public-key", nil, "the gateways' checkpoint public keys, to re-verify archives (default: the configuration's, as audit verify); repeatable")
	return cmd
}

func newAuditRetentionCmd(a *app) *cobra.Command {
	var period, dir, actor string
	var dryRun bool
	var keyFiles []string
	cmd := &cobra.Command{
		Use:   "retention [--period 13mo] [--archive-dir DIR] [--dry-run]",
		Short: "Apply the retention period: archive and drop the months it has expired, each recorded as retention.applied",
		Long: `Retention applies the retention period (SANDGATE_AUDIT_RETENTION, default
` + audit.DefaultRetention + `; --period overrides it): every month partition that ends
before now minus the period is dropped, oldest first, as purge drops it
(retention.applied in the same transaction). With an archive directory
(SANDGATE_AUDIT_ARCHIVE_DIR or --archive-dir), an expired month not yet
archived, or changed since, is archived there first (audit.archived);
without one, only months archived before are dropped, and the first that
was not stops it. A period of "forever" drops nothing. Gateways apply
the same every SANDGATE_AUDIT_RETENTION_INTERVAL (1h), one at a time.

The database role must own audit_events. --dry-run archives and drops
nothing: it reports what would be dropped of the months as they are
archived now, stopping at the first expired month never archived.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := a.cfg.AuditRetention
			if period != "" {
				var err error
				if p, err = audit.ParseRetentionPeriod(period); err != nil {
					return sandgate.FieldError("period", "%v", err)
				}
			}
			if dir == "" {
				dir = a.cfg.AuditArchiveDir
			}
			s, err := openAdminTrail(cmd.Context(), a, keyFiles)
			if err != nil {
				return err
			}
			defer s.Close(context.Background())
			res, err := s.Retention().ApplyRetention(cmd.Context(), p, dir, dryRun, actor)
			if werr := writeJSON(a, res); err == nil {
				err = werr
			}
			if err != nil {
				return err
			}
			if res.Busy {
				fmt.Fprintln(a.stderr, "audit retention: another process is applying retention; nothing done")
			}
			return s.Close(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&period, "period", "", "retention period: months (13mo), days (400d) or forever (default: SANDGATE_AUDIT_RETENTION, "+audit.DefaultRetention+")")
	fl.StringVar(&dir, "archive-dir", "", "archive expired months here before dropping them (default: SANDGATE_AUDIT_ARCHIVE_DIR)")
	fl.BoolVar(&dryRun, "dry-run", false, "report what would be dropped, change nothing")
	fl.StringVar(&actor, "actor", operator(), "who applies retention, as recorded in audit.archived and retention.applied")
	fl.StringSliceVar(&keyFiles, "public-key", nil, "the gateways' checkpoint public keys, to verify archives (default: the configuration's, as audit verify); repeatable")
	return cmd
}
