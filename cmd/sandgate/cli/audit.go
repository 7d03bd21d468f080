package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/audit/proof"
)

// newAuditCmd builds `sandgate audit query|export|verify|public-key`, the
// retention commands `partitions|archive|purge`, and the proofs'
// `receipt|verify-receipt|witness`. query, export and receipt read the
// trail through the gateway's API with the caller's token, or the
// database with --database-url; witness talks to a gateway and
// verify-receipt needs nothing; the others work on the trail directly
// through SANDGATE_DATABASE_URL: a read-only role is enough for all but
// archive (which appends) and purge (which needs the tables' owner).
func newAuditCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Query, export and verify the audit trail",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newAuditQueryCmd(a), newAuditExportCmd(a), newAuditVerifyCmd(a), newAuditPublicKeyCmd(a),
		newAuditRotateKeyCmd(a), newAuditPartitionsCmd(a), newAuditArchiveCmd(a), newAuditPurgeCmd(a), newAuditRetentionCmd(a),
		newAuditReceiptCmd(a), newAuditVerifyReceiptCmd(a), newAuditWitnessCmd(a), newAuditEndorseKeyCmd(a))
	return cmd
}

// auditFilterFlags are the filters query and export share.
type auditFilterFlags struct {
	correlationID, runID, decisionID, typ, actor, team, outcome, since, until string
}

func (f *auditFilterFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.correlationID, "correlation-id", "", "only events of this correlation ID")
	fl.StringVar(&f.runID, "run-id", "", "only events of this run")
	fl.StringVar(&f.decisionID, "decision-id", "", "only events of this decision")
	fl.StringVar(&f.typ, "type", "", "only events of this type (e.g. admission.denied)")
	fl.StringVar(&f.actor, "actor", "", "only events of this actor (principal)")
	fl.StringVar(&f.team, "team", "", "only events of this team")
	fl.StringVar(&f.outcome, "outcome", "", "only events with this outcome")
	fl.StringVar(&f.since, "since", "", "recorded at or after: RFC 3339 time, or a duration back from now (24h)")
	fl.StringVar(&f.until, "until", "", "recorded before: RFC 3339 time, or a duration back from now")
}

func (f *auditFilterFlags) filter(now time.Time) (sandgate.AuditFilter, error) {
	out := sandgate.AuditFilter{
		CorrelationID: f.correlationID, RunID: f.runID, DecisionID: f.decisionID,
		Type: sandgate.EventType(f.typ), Actor: f.actor, Team: f.team, Outcome: f.outcome,
	}
	var err error
	if out.Since, err = auditWhen(f.since, now); err != nil {
		return out, fmt.Errorf("--since: %w", err)
	}
	if out.Until, err = auditWhen(f.until, now); err != nil {
		return out, fmt.Errorf("--until: %w", err)
	}
	return out, nil
}

// auditWhen reads an RFC 3339 time or a duration before now.
func auditWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
	}
	return now.Add(-d), nil
}

// openTrail opens the trail read-only, trusting checkpoint keys from
// anchors (and the witnesses the operator pinned, whose cosignatures a
// receipt's notes carry).
func openTrail(ctx context.Context, a *app, anchors proof.Anchors) (*audit.Store, error) {
	witnesses, err := witnessKeys(&a.cfg.trailConfig)
	if err != nil {
		return nil, err
	}
	return audit.Open(ctx, audit.Config{
		DSN:                a.cfg.DatabaseURL,
		ReadOnly:           true,
		Anchors:            anchors,
		Witnesses:          witnesses,
		CheckpointInterval: a.cfg.CheckpointAfter,
	})
}

func newAuditQueryCmd(a *app) *cobra.Command {
	var f auditFilterFlags
	var limit int
	var cursor string
	var out *outputFormat
	cmd := &cobra.Command{
		Use:   "query",
		Short: "Print one page of matching events: a table, or -o json ({\"events\", \"next_cursor\"})",
		Long: `Print one page of the trail's events that the filters match, oldest first,
through the gateway's API (SANDGATE_URL, the token from SANDGATE_TOKEN, which
needs the auditor or admin role): one line each, or with -o json the API's
answer. --database-url reads the database directly instead (a role with
SELECT is enough).`,
		Example: `  sandgate audit query --type admission.denied --since 24h
  sandgate audit query --run-id 0193a4c2-… -o json | jq '.events[].type'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter(time.Now())
			if err != nil {
				return &ExitError{Code: exitUsage, Message: err.Error()}
			}
			filter.Limit, filter.Cursor = limit, cursor
			var page auditPage
			if direct(cmd) {
				page, err = queryDatabase(cmd.Context(), a, filter)
			} else {
				page, err = queryThroughAPI(cmd.Context(), a, filter)
			}
			if err != nil {
				return err
			}
			if page.Events == nil {
				page.Events = []sandgate.AuditRecord{}
			}
			if !out.JSON() {
				return writeEventTable(a, page)
			}
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			return enc.Encode(page)
		},
	}
	f.bind(cmd)
	cmd.Flags().IntVar(&limit, "limit", audit.DefaultLimit, "events per page (at most 1000)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "next_cursor of the previous page")
	out = bindOutput(cmd)
	return cmd
}

// queryDatabase is `audit query --database-url`.
func queryDatabase(ctx context.Context, a *app, filter sandgate.AuditFilter) (auditPage, error) {
	s, err := openTrail(ctx, a, proof.Anchors{})
	if err != nil {
		return auditPage{}, err
	}
	defer s.Close(context.Background())
	recs, next, err := s.Reader().Query(ctx, filter)
	if err != nil {
		return auditPage{}, err
	}
	page := auditPage{Events: recs}
	if next != "" {
		page.NextCursor = &next
	}
	return page, nil
}

func newAuditExportCmd(a *app) *cobra.Command {
	var f auditFilterFlags
	var format, output, chain string
	var checkpoints bool
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Stream matching events as JSONL or CSV, or the signed checkpoints with --checkpoints",
		Long: `Stream matching events, oldest first, as JSON Lines or CSV, through the
gateway's API (SANDGATE_URL and SANDGATE_TOKEN, auditor or admin; the export
is recorded as audit.exported). --database-url reads the database directly
instead. With --checkpoints (which needs --database-url), stream the signed
checkpoints (JSON Lines) instead. An unfiltered export plus the checkpoints
is what verify --offline checks.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter(time.Now())
			if err != nil {
				return &ExitError{Code: exitUsage, Message: err.Error()}
			}
			if format != string(sandgate.ExportJSONL) && format != string(sandgate.ExportCSV) {
				return &ExitError{Code: exitUsage, Message: fmt.Sprintf("--format %q: give jsonl or csv", format)}
			}
			if checkpoints && !direct(cmd) {
				return &ExitError{Code: exitUsage, Message: "--checkpoints reads every checkpoint from the database: give --database-url " +
					"(the API serves each chain's newest one: GET /v1/audit/checkpoint?chain=)"}
			}
			w, done, err := openOutput(a, output)
			if err != nil {
				return err
			}
			if !direct(cmd) {
				err = exportThroughAPI(cmd.Context(), a, filter, sandgate.ExportFormat(format), w)
			} else {
				err = exportDatabase(cmd.Context(), a, filter, sandgate.ExportFormat(format), checkpoints, chain, w)
			}
			if cerr := done(); err == nil {
				err = cerr
			}
			return err
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&format, "format", "jsonl", "jsonl or csv")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to this file (mode 0600) instead of stdout")
	cmd.Flags().BoolVar(&checkpoints, "checkpoints", false, "export the signed checkpoints instead of events (with --database-url)")
	cmd.Flags().StringVar(&chain, "chain", "", "with --checkpoints: only this chain")
	return cmd
}

// exportDatabase is `audit export --database-url`.
func exportDatabase(ctx context.Context, a *app, filter sandgate.AuditFilter, format sandgate.ExportFormat, checkpoints bool, chain string, w io.Writer) error {
	s, err := openTrail(ctx, a, proof.Anchors{})
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	if checkpoints {
		return s.Reader().ExportCheckpoints(ctx, chain, w)
	}
	return s.Reader().Export(ctx, filter, format, w)
}

func newAuditVerifyCmd(a *app) *cobra.Command {
	var offline, checkpoints, chain, archive string
	var trust trustFlags
	var fromSeq, toSeq int64
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check hash chains, checkpoint signatures and keys; exit 1 on any problem",
		Long: `Check the trail online (from the database), offline (an export and its
checkpoints), or an archived month (--archive DIR/<partition>): every hash,
every column against its hashed body, seq gaps, prev_hash links, checkpoint
signatures and their chain, the keys that signed them, and that every
chain's rows are covered by a checkpoint signed by a known key (rows that
are not, beyond twice the checkpoint interval, are unsigned_chain or
unsigned_tail; rows recorded after the database's clock are future_row).
Prints a JSON report listing every problem, every checkpoint key with its
node and first use, and the trust anchors used, and exits 1 when there is
a problem.

Which keys are trusted: with --public-key, --trusted-keys or --root-key,
exactly the keys those pin and the keys the root keys endorsed (sandgate
audit endorse-key). Without any, what the configuration says, as GET
/v1/audit/verify of a gateway with the same configuration: the keys of
SANDGATE_TRUSTED_KEYS_FILE, the keys the root keys of
SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE endorsed, and the local key (the public
half of SANDGATE_SIGNING_KEY_FILE) with the keys the registry vouches for
as its node's, when the trail registered it for SANDGATE_NODE: a single
gateway verifies on its own host with no setting. A rotation a trusted key
endorsed is trusted too. The key registry alone vouches for nothing
(anyone with the application role can register a key): with no anchor in
use the report says so (unpinned_keys).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			anchors, err := trustAnchors(&a.cfg.trailConfig, a.cfg.Node, trust)
			if err != nil {
				return err
			}
			opts := proof.OfflineOptions{Anchors: anchors, CheckpointInterval: a.cfg.CheckpointAfter}
			var rep proof.Report
			switch {
			case archive != "" && offline != "":
				return sandgate.FieldError("archive", "give --archive or --offline, not both")
			case archive != "":
				rep, err = proof.VerifyArchiveWith(archive, opts)
			case offline != "":
				rep, err = verifyOffline(offline, checkpoints, opts)
			default:
				var s *audit.Store
				if s, err = openTrail(cmd.Context(), a, anchors); err != nil {
					return err
				}
				defer s.Close(context.Background())
				rep, err = s.Verifier().VerifyTrail(cmd.Context(), sandgate.VerifyRange{ChainID: chain, FromSeq: fromSeq, ToSeq: toSeq})
			}
			if err != nil {
				return err
			}
			return printVerifyReport(a, rep)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&offline, "offline", "", "verify this export file (JSONL or CSV) instead of the database")
	fl.StringVar(&archive, "archive", "", "verify this archive directory (written by audit archive) instead of the database")
	fl.StringVar(&checkpoints, "checkpoints", "", "with --offline: the checkpoints export (JSONL), taken after the events")
	trust.bind(cmd)
	fl.StringVar(&chain, "chain", "", "online: only this chain")
	fl.Int64Var(&fromSeq, "from-seq", 0, "online: start at this seq")
	fl.Int64Var(&toSeq, "to-seq", 0, "online: stop at this seq")
	return cmd
}

func newAuditRotateKeyCmd(a *app) *cobra.Command {
	var previous string
	cmd := &cobra.Command{
		Use:   "rotate-key --previous-key-file OLD",
		Short: "Register this node's new checkpoint key as a rotation endorsed by its previous key",
		Long: `Rotate-key registers the key in SANDGATE_SIGNING_KEY_FILE (generated when
absent) as this node's (SANDGATE_NODE) new checkpoint key, endorsed by the
previous one: the previous key signs the rotation, verify checks that
signature, and the registry then vouches for the new key. The rotation is
recorded in the trail as audit.key_rotated (on a chain of its own, under
SANDGATE_SPOOL_DIR/admin) and signed by a checkpoint. Run it before serve
first starts with the new key: a key a node has already used cannot be
endorsed afterwards, and verify reports it (unendorsed_key) until
auditors pin it. Prints the registration as JSON.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if previous == "" {
				return sandgate.FieldError("previous-key-file", "required: the key this node signed with until now")
			}
			maskKey, err := a.cfg.maskKey()
			if err != nil {
				return err
			}
			s, err := audit.Open(cmd.Context(), audit.Config{
				DSN:                    a.cfg.DatabaseURL,
				SpoolDir:               filepath.Join(a.cfg.SpoolDir, "admin"),
				SpoolMaxBytes:          a.cfg.SpoolMaxBytes,
				SigningKeyFile:         a.cfg.SigningKeyFile,
				PreviousSigningKeyFile: previous,
				MaskKey:                maskKey,
				Node:                   a.cfg.Node,
				CheckpointEvery:        a.cfg.CheckpointEvery,
				CheckpointInterval:     a.cfg.CheckpointAfter,
			})
			if err != nil {
				return err
			}
			defer s.Close(context.Background())
			reg, err := s.RegisterKey(cmd.Context())
			if err != nil {
				return err
			}
			if err := writeJSON(a, reg); err != nil {
				return err
			}
			prev, err := proof.LoadSigningKey(previous, false)
			if err != nil {
				return err
			}
			switch prevID := proof.KeyID(prev.Public().(ed25519.PublicKey)); {
			case reg.Replaces == "":
				fmt.Fprintln(a.stderr, "audit rotate-key: the node had no key registered: this key is its first, nothing to endorse")
			case reg.Endorsement == "":
				fmt.Fprintln(a.stderr, "audit rotate-key: the key was registered before without an endorsement; pin it with --trusted-keys when you verify")
			case reg.Replaces != prevID:
				fmt.Fprintf(a.stderr, "audit rotate-key: the node's newest key was %s, not %s: verify will report the rotation unendorsed; pin the key\n", reg.Replaces, prevID)
			}
			return s.Close(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&previous, "previous-key-file", "", "the node's previous checkpoint signing key (PEM), which endorses the new one")
	return cmd
}

func newAuditPublicKeyCmd(a *app) *cobra.Command {
	var keyFile string
	var asHex bool
	cmd := &cobra.Command{
		Use:   "public-key",
		Short: "Print the checkpoint signing key's public half (PEM, or hex) for auditors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			priv, err := proof.LoadSigningKey(keyFile, false)
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("no signing key at %s: serve creates it on first start (or pass --signing-key-file)", keyFile)
			}
			if err != nil {
				return err
			}
			pub := priv.Public().(ed25519.PublicKey)
			if asHex {
				_, err = fmt.Fprintln(a.stdout, hex.EncodeToString(pub))
				return err
			}
			_, err = io.WriteString(a.stdout, strings.TrimRight(string(proof.EncodePublicKey(pub)), "\n")+"\n")
			return err
		},
	}
	cmd.Flags().StringVar(&keyFile, "signing-key-file", a.cfg.SigningKeyFile, "the signing key (SANDGATE_SIGNING_KEY_FILE)")
	cmd.Flags().BoolVar(&asHex, "hex", false, "print 64 hex digits instead of PEM")
	return cmd
}
