package audit

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
)

// Retention works on whole months: audit_events is partitioned by month of
// recorded_at (audit_events_YYYY_MM). A month is archived first (Archive:
// its rows and the checkpoints that sign them, written to files, verified
// offline and recorded as audit.archived), then dropped (Purge: only when
// the archive still matches the month, in the same transaction as the
// retention.applied event that records it). Verify starts each purged
// chain at the boundary retention.applied names.

// Archive file names inside a partition's archive directory.
const (
	ArchiveEventsFile      = "events.jsonl"
	ArchiveCheckpointsFile = "checkpoints.jsonl"
	ArchiveManifestFile    = "manifest.json"
)

// Problem kinds only archives have.
const (
	ProblemArchiveMismatch = "archive_mismatch" // a file differs from the manifest
	ProblemUncovered       = "uncovered_rows"   // rows no checkpoint in the archive signs
)

const (
	partitionPrefix  = "audit_events_"
	defaultPartition = "audit_events_default"
)

// Partition is one partition of audit_events: a UTC month, or the default
// partition that takes rows no month covers.
type Partition struct {
	Name    string           `json:"name"`
	From    time.Time        `json:"from"` // zero for the default partition
	To      time.Time        `json:"to"`
	Default bool             `json:"default,omitempty"`
	Rows    int64            `json:"rows"`
	Chains  []PartitionChain `json:"chains"`
}

// PartitionChain is one chain's run of rows in a partition: seq FirstSeq
// through LastSeq, linked before it to PrevHash.
type PartitionChain struct {
	ChainID  string `json:"chain_id"`
	Rows     int64  `json:"rows"`
	FirstSeq int64  `json:"first_seq"`
	LastSeq  int64  `json:"last_seq"`
	PrevHash string `json:"prev_hash"` // the first row's prev_hash
	LastHash string `json:"last_hash"`
}

// ArchiveManifest describes an archived partition: what Archive wrote and
// records in its audit.archived event, and what Purge holds the partition
// to.
type ArchiveManifest struct {
	Partition
	CreatedAt time.Time         `json:"created_at"`
	Files     map[string]string `json:"files"` // file name → hex SHA-256
	KeyIDs    []string          `json:"key_ids"`
}

// PurgeResult is what Purge did, or would do, to one partition.
type PurgeResult struct {
	Partition      Partition `json:"partition"`
	ArchiveEventID string    `json:"archive_event_id"`
	Location       string    `json:"location"`
	// ArchiveVerified is set when the archive was readable here and was
	// verified again before the drop.
	ArchiveVerified bool   `json:"archive_verified"`
	Dropped         bool   `json:"dropped"`
	EventID         string `json:"event_id,omitempty"` // the retention.applied event
}

// archivedPayload is the payload of audit.archived and retention.applied.
type archivedPayload struct {
	Partition      string            `json:"partition"`
	From           time.Time         `json:"from"`
	To             time.Time         `json:"to"`
	Rows           int64             `json:"rows"`
	Chains         []PartitionChain  `json:"chains"`
	Files          map[string]string `json:"files,omitempty"`
	ManifestSHA256 string            `json:"manifest_sha256,omitempty"`
	Location       string            `json:"location,omitempty"`
	ArchiveEventID string            `json:"archive_event_id,omitempty"`
}

func (p archivedPayload) asMap() map[string]any {
	data, _ := json.Marshal(p)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return m
}

func decodeArchived(payload map[string]any) (archivedPayload, error) {
	var p archivedPayload
	data, err := json.Marshal(payload)
	if err == nil {
		err = json.Unmarshal(data, &p)
	}
	return p, err
}

// partitionMonth parses a month partition's name into its bounds.
func partitionMonth(name string) (from, to time.Time, ok bool) {
	t, err := time.Parse("2006_01", strings.TrimPrefix(name, partitionPrefix))
	if err != nil || !strings.HasPrefix(name, partitionPrefix) {
		return time.Time{}, time.Time{}, false
	}
	return t, t.AddDate(0, 1, 0), true
}

// Partitions lists the partitions of audit_events, oldest month first and
// the default partition last, with their rows per chain.
func (s *Store) Partitions(ctx context.Context) ([]Partition, error) {
	var names []string
	err := s.db.WithContext(ctx).Raw(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'audit_events'::regclass`).Scan(&names).Error
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "list partitions")
	}
	var out []Partition
	for _, name := range names {
		p := Partition{Name: name, Default: name == defaultPartition}
		if !p.Default {
			var ok bool
			if p.From, p.To, ok = partitionMonth(name); !ok {
				continue // not sandgate's
			}
		}
		if err := s.partitionStats(ctx, &p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Partition) int {
		if a.Default != b.Default {
			if a.Default {
				return 1
			}
			return -1
		}
		return a.From.Compare(b.From)
	})
	return out, nil
}

// AdoptDefault moves the rows that wait in audit_events_default (their
// month had no partition when they were written) into the month
// partitions of their recorded_at, creating those, and returns how many
// it moved. Archive and Purge do it first, and writers whenever they make
// the months ahead, so retention handles those rows like any other. While
// it moves rows, writers wait.
func (s *Store) AdoptDefault(ctx context.Context) (int64, error) {
	var moved int64
	if err := s.pool.QueryRow(ctx, `SELECT audit_adopt_default()`).Scan(&moved); err != nil {
		return 0, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "move the default partition's rows into their months")
	}
	if moved > 0 {
		s.cfg.Logger.Info("audit: rows moved from audit_events_default into their month partitions", "rows", moved)
	}
	return moved, nil
}

// partitionStats fills p's rows and chains from the partition itself.
func (s *Store) partitionStats(ctx context.Context, p *Partition) error {
	table := pgx.Identifier{p.Name}.Sanitize()
	rows, err := s.pool.Query(ctx, `SELECT chain_id, count(*), min(seq), max(seq) FROM `+table+` GROUP BY chain_id ORDER BY chain_id`)
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read partition %s", p.Name)
	}
	p.Chains, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (PartitionChain, error) {
		var c PartitionChain
		err := r.Scan(&c.ChainID, &c.Rows, &c.FirstSeq, &c.LastSeq)
		return c, err
	})
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read partition %s", p.Name)
	}
	p.Rows = 0
	for i := range p.Chains {
		c := &p.Chains[i]
		p.Rows += c.Rows
		var prev, last []byte
		err := s.pool.QueryRow(ctx, `SELECT (SELECT prev_hash FROM `+table+` WHERE chain_id = $1 AND seq = $2 LIMIT 1),
			(SELECT hash FROM `+table+` WHERE chain_id = $1 AND seq = $3 LIMIT 1)`, c.ChainID, c.FirstSeq, c.LastSeq).Scan(&prev, &last)
		if err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read partition %s", p.Name)
		}
		c.PrevHash, c.LastHash = hex.EncodeToString(prev), hex.EncodeToString(last)
	}
	if p.Chains == nil {
		p.Chains = []PartitionChain{}
	}
	return nil
}

// partition returns the month partition named name, refusing the default
// partition, unknown names and months that are not over.
func (s *Store) partition(ctx context.Context, name string) (Partition, error) {
	from, to, ok := partitionMonth(name)
	if !ok {
		return Partition{}, sandgate.FieldError("partition", "%q is not a month partition (audit_events_YYYY_MM)", name)
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
		return Partition{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "find partition %s", name)
	}
	if !exists {
		return Partition{}, sandgate.Errorf(sandgate.CodeNotFound, "partition %s does not exist (already purged, or never created)", name)
	}
	if thisMonth := monthStart(s.cfg.Clock()); to.After(thisMonth) {
		return Partition{}, sandgate.Errorf(sandgate.CodeConflict, "partition %s is not over yet: only months before %s can be archived or purged", name, thisMonth.Format("2006-01"))
	}
	p := Partition{Name: name, From: from, To: to}
	return p, s.partitionStats(ctx, &p)
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// covered checks that each chain's last row in p is under a signed
// checkpoint, so that what stays after a purge is still vouched for.
func (s *Store) covered(ctx context.Context, p Partition) error {
	for _, c := range p.Chains {
		var top *int64
		if err := s.pool.QueryRow(ctx, `SELECT max(seq) FROM audit_checkpoints WHERE chain_id = $1`, c.ChainID).Scan(&top); err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read checkpoints")
		}
		if top == nil || *top < c.LastSeq {
			return sandgate.Errorf(sandgate.CodeConflict, "partition %s: chain %s up to seq %d is not yet under a signed checkpoint; archive it after the next checkpoint",
				p.Name, c.ChainID, c.LastSeq)
		}
	}
	return nil
}

// Archive writes month partition name into dir/name: its rows
// (events.jsonl, in chain order, as Export writes them), every checkpoint
// of its chains (checkpoints.jsonl) and manifest.json with the files'
// SHA-256. Each file is synced. The archive is verified offline
// (VerifyArchive) before audit.archived records it with actor. It refuses
// the current month, a month whose rows are not all under a checkpoint,
// and a directory that already holds an archive. Rows waiting in the
// default partition are first moved into their months (AdoptDefault).
func (s *Store) Archive(ctx context.Context, name, dir, actor string) (ArchiveManifest, error) {
	if s.w == nil {
		return ArchiveManifest{}, sandgate.Errorf(sandgate.CodeAuditUnavailable, "archive needs a writing store: it records audit.archived")
	}
	if _, err := s.AdoptDefault(ctx); err != nil {
		return ArchiveManifest{}, err
	}
	p, err := s.partition(ctx, name)
	if err != nil {
		return ArchiveManifest{}, err
	}
	if err := s.covered(ctx, p); err != nil {
		return ArchiveManifest{}, err
	}
	out := filepath.Join(dir, name)
	if _, err := os.Stat(filepath.Join(out, ArchiveManifestFile)); err == nil {
		return s.archivedBefore(ctx, p, out, actor)
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return ArchiveManifest{}, fmt.Errorf("archive: %w", err)
	}
	m := ArchiveManifest{Partition: p, CreatedAt: s.cfg.Clock().UTC(), Files: map[string]string{}}
	table := pgx.Identifier{p.Name}.Sanitize()
	err = writeSynced(filepath.Join(out, ArchiveEventsFile), m.Files, func(w io.Writer) error {
		rows, err := s.db.WithContext(ctx).Raw(`SELECT ` + eventColumns + ` FROM ` + table + ` ORDER BY chain_id, seq`).Rows()
		if err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read partition %s", p.Name)
		}
		defer rows.Close()
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		var n int64
		for rows.Next() {
			var r eventRow
			if err := r.scan(rows); err != nil {
				return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read partition %s", p.Name)
			}
			if err := enc.Encode(r.record()); err != nil {
				return err
			}
			n++
		}
		if err := rows.Err(); err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read partition %s", p.Name)
		}
		if n != p.Rows {
			return sandgate.Errorf(sandgate.CodeConflict, "partition %s changed while it was archived (%d rows, then %d)", p.Name, p.Rows, n)
		}
		return nil
	})
	if err != nil {
		return ArchiveManifest{}, err
	}
	keys := map[string]bool{}
	err = writeSynced(filepath.Join(out, ArchiveCheckpointsFile), m.Files, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for _, c := range p.Chains {
			if err := s.eachCheckpoint(ctx, c.ChainID, func(cp Checkpoint) error {
				keys[cp.KeyID] = true
				return enc.Encode(cp)
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return ArchiveManifest{}, err
	}
	for k := range keys {
		m.KeyIDs = append(m.KeyIDs, k)
	}
	slices.Sort(m.KeyIDs)
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return ArchiveManifest{}, err
	}
	if err := writeSynced(filepath.Join(out, ArchiveManifestFile), nil, func(w io.Writer) error {
		_, err := w.Write(append(manifest, '\n'))
		return err
	}); err != nil {
		return ArchiveManifest{}, err
	}
	if err := syncDir(out); err != nil {
		return ArchiveManifest{}, err
	}
	trusted, err := s.archiveKeys(ctx)
	if err != nil {
		return ArchiveManifest{}, err
	}
	rep, err := VerifyArchive(out, trusted...)
	if err != nil {
		return ArchiveManifest{}, err
	}
	if !rep.OK {
		return ArchiveManifest{}, sandgate.Errorf(sandgate.CodeConflict, "the archive of %s does not verify (%d problems, first: %s: %s); nothing recorded",
			p.Name, len(rep.Problems), rep.Problems[0].Kind, rep.Problems[0].Detail)
	}
	return m, s.recordArchived(ctx, m, append(manifest, '\n'), out, actor)
}

// recordArchived records audit.archived for the archive at out.
func (s *Store) recordArchived(ctx context.Context, m ArchiveManifest, manifest []byte, out, actor string) error {
	sum := sha256.Sum256(manifest)
	return s.Record(ctx, sandgate.Event{
		Type: sandgate.EventAuditArchived, Actor: actor, Outcome: "archived",
		Payload: archivedPayload{Partition: m.Name, From: m.From, To: m.To, Rows: m.Rows, Chains: m.Chains,
			Files: m.Files, ManifestSHA256: hex.EncodeToString(sum[:]), Location: out}.asMap(),
	})
}

// archivedBefore handles an archive directory that already holds a
// manifest: when it verifies and still matches the partition, it stands
// (recorded now if an earlier run stopped before recording it);
// otherwise Archive refuses to overwrite it.
func (s *Store) archivedBefore(ctx context.Context, p Partition, out, actor string) (ArchiveManifest, error) {
	manifest, err := os.ReadFile(filepath.Join(out, ArchiveManifestFile))
	if err != nil {
		return ArchiveManifest{}, fmt.Errorf("archive: %w", err)
	}
	var m ArchiveManifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		return ArchiveManifest{}, sandgate.Errorf(sandgate.CodeConflict, "%s holds a manifest that cannot be read (%v); archive to another directory", out, err)
	}
	keys, err := s.archiveKeys(ctx)
	if err != nil {
		return ArchiveManifest{}, err
	}
	rep, err := VerifyArchive(out, keys...)
	if err != nil {
		return ArchiveManifest{}, err
	}
	stale := sameAsArchived(p, archivedPayload{Rows: m.Rows, Chains: m.Chains})
	if !rep.OK || stale != nil {
		return ArchiveManifest{}, sandgate.Errorf(sandgate.CodeConflict, "%s already holds an archive of %s that does not verify or no longer matches it; archive to another directory", out, p.Name)
	}
	sum := sha256.Sum256(manifest)
	rec, last, err := s.lastArchive(ctx, p.Name)
	if err != nil {
		return ArchiveManifest{}, err
	}
	if rec != nil && last.ManifestSHA256 == hex.EncodeToString(sum[:]) {
		return m, nil
	}
	return m, s.recordArchived(ctx, m, manifest, out, actor)
}

// archiveKeys are the keys an archive's checkpoints are checked against:
// the pinned ones when there are, otherwise the keys the registry vouches
// for, and this Store's own.
func (s *Store) archiveKeys(ctx context.Context) ([]ed25519.PublicKey, error) {
	keys := s.trusted
	if len(keys) == 0 {
		reg, err := s.Keys(ctx)
		if err != nil {
			return nil, err
		}
		keys, _ = registryKeys(reg, nil)
		if s.key != nil {
			pub := s.key.Public().(ed25519.PublicKey)
			keys[KeyID(pub)] = pub
		}
	}
	out := make([]ed25519.PublicKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, k)
	}
	return out, nil
}

// writeSynced writes path (mode 0600, not overwriting) with fill, syncs
// it, and notes its SHA-256 in sums.
func writeSynced(path string, sums map[string]string, fill func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var se *sandgate.Error
		if errors.As(err, &se) {
			return err
		}
		return fmt.Errorf("archive: write %s: %w", path, err)
	}
	if sums != nil {
		sums[filepath.Base(path)] = hex.EncodeToString(h.Sum(nil))
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("archive: sync %s: %w", dir, err)
	}
	return nil
}

// VerifyArchive checks an archive directory offline with the trusted
// public keys; see VerifyArchiveWith.
func VerifyArchive(dir string, trusted ...ed25519.PublicKey) (Report, error) {
	return VerifyArchiveWith(dir, OfflineOptions{Trusted: trusted})
}

// VerifyArchiveWith checks an archive directory offline: each file's
// SHA-256 against the manifest, every row's hash and link from the
// boundary the manifest names, the rows and chains the manifest lists,
// every checkpoint's signature and key (as VerifyExportWith), and that a
// checkpoint by a known key signs each chain's last archived row.
func VerifyArchiveWith(dir string, o OfflineOptions) (Report, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ArchiveManifestFile))
	if err != nil {
		return Report{}, fmt.Errorf("read archive: %w", err)
	}
	var m ArchiveManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return Report{}, fmt.Errorf("read archive manifest: %w", err)
	}
	v := offlineVerifier(o)
	for _, file := range []string{ArchiveEventsFile, ArchiveCheckpointsFile} {
		got, err := fileSHA256(filepath.Join(dir, file))
		if err != nil {
			return Report{}, err
		}
		if want := m.Files[file]; got != want {
			v.problem("", 0, ProblemArchiveMismatch, "%s has SHA-256 %s, the manifest says %s", file, got, want)
		}
	}
	cps, err := os.Open(filepath.Join(dir, ArchiveCheckpointsFile))
	if err != nil {
		return Report{}, fmt.Errorf("read archive: %w", err)
	}
	defer cps.Close()
	if err := readCheckpoints(cps, v); err != nil {
		return Report{}, err
	}
	for _, c := range m.Chains {
		prev, err := hex.DecodeString(c.PrevHash)
		if err != nil || len(prev) != HashSize {
			v.problem(c.ChainID, c.FirstSeq, ProblemBadInput, "manifest prev_hash %q is not a hash", c.PrevHash)
			prev = nil
		}
		v.anchor(c.ChainID, c.FirstSeq, prev)
		v.chain(c.ChainID).checkTail = false
	}
	events, err := os.Open(filepath.Join(dir, ArchiveEventsFile))
	if err != nil {
		return Report{}, fmt.Errorf("read archive: %w", err)
	}
	defer events.Close()
	before := v.report.Checked
	if err := readJSONLExport(bufio.NewReaderSize(events, 1<<20), v); err != nil {
		return Report{}, err
	}
	if n := int64(v.report.Checked - before); n != m.Rows {
		v.problem("", 0, ProblemArchiveMismatch, "%s holds %d rows, the manifest says %d", ArchiveEventsFile, n, m.Rows)
	}
	rep := v.result()
	for _, c := range m.Chains {
		st := v.chains[c.ChainID]
		if st.lastSeq != c.LastSeq || hex.EncodeToString(st.lastHash) != c.LastHash {
			v.problem(c.ChainID, c.LastSeq, ProblemArchiveMismatch, "chain ends at seq %d (hash %x), the manifest says %d (%s)", st.lastSeq, st.lastHash, c.LastSeq, c.LastHash)
		}
		if seq, _ := v.covered(st); seq < c.LastSeq {
			v.problem(c.ChainID, c.LastSeq, ProblemUncovered, "no checkpoint in the archive by a known key signs seq %d or later", c.LastSeq)
		}
	}
	rep.Problems = v.report.Problems
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read archive: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read archive: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lastArchive returns the newest audit.archived event of partition name.
func (s *Store) lastArchive(ctx context.Context, name string) (*sandgate.AuditRecord, archivedPayload, error) {
	var r eventRow
	rows, err := s.db.WithContext(ctx).Raw(`SELECT `+eventColumns+` FROM audit_events
		WHERE type = ? AND payload->>'partition' = ? ORDER BY recorded_at DESC, chain_id, seq DESC LIMIT 1`,
		string(sandgate.EventAuditArchived), name).Rows()
	if err != nil {
		return nil, archivedPayload{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "find the archive of %s", name)
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, archivedPayload{}, rows.Err()
	}
	if err := r.scan(rows); err != nil {
		return nil, archivedPayload{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "find the archive of %s", name)
	}
	rec := r.record()
	p, err := decodeArchived(rec.Payload)
	if err != nil {
		return nil, archivedPayload{}, fmt.Errorf("audit.archived %s: %w", rec.ID, err)
	}
	return &rec, p, nil
}

// Purge drops, oldest first, every month partition that ends at or before
// before (and before the current month), recording each drop as
// retention.applied in the same transaction. It stops at the first month
// it must refuse and says why: one never archived, one changed since its
// archive (rows or chain heads differ), rows of its chains older than it
// still elsewhere (a purge must remove a chain's oldest rows), or rows not
// under a checkpoint. Rows waiting in the default partition are first
// moved into their months (AdoptDefault), so a month of them is purged by
// the same rules. With dryRun it checks and reports without dropping or
// moving. The database role needs to own audit_events (DROP TABLE).
func (s *Store) Purge(ctx context.Context, before time.Time, dryRun bool, actor string) ([]PurgeResult, error) {
	if s.w == nil {
		return nil, sandgate.Errorf(sandgate.CodeAuditUnavailable, "purge needs a writing store: it records retention.applied")
	}
	limit := monthStart(s.cfg.Clock())
	if before.Before(limit) {
		limit = before
	}
	if !dryRun {
		if _, err := s.AdoptDefault(ctx); err != nil {
			return nil, err
		}
	}
	parts, err := s.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	var out []PurgeResult
	var dropping []string // this run's partitions so far, and p
	for _, p := range parts {
		if p.Default || p.To.After(limit) {
			continue
		}
		dropping = append(dropping, p.Name)
		rec, archived, err := s.lastArchive(ctx, p.Name)
		if err != nil {
			return out, err
		}
		if rec == nil {
			return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s was never archived: run sandgate audit archive first", p.Name)
		}
		if err := sameAsArchived(p, archived); err != nil {
			return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s changed since it was archived (%s, event %s): %v; archive it again",
				p.Name, rec.RecordedAt.Format(time.RFC3339), rec.ID, err)
		}
		if err := s.covered(ctx, p); err != nil {
			return out, err
		}
		res := PurgeResult{Partition: p, ArchiveEventID: rec.ID, Location: archived.Location}
		if _, err := os.Stat(filepath.Join(archived.Location, ArchiveManifestFile)); err == nil {
			// The archive is reachable from here: it must still verify.
			keys, err := s.archiveKeys(ctx)
			if err != nil {
				return out, err
			}
			rep, err := VerifyArchive(archived.Location, keys...)
			if err != nil {
				return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s: its archive at %s does not verify (%v); archive it again", p.Name, archived.Location, err)
			}
			if !rep.OK {
				return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s: its archive at %s does not verify (%d problems, first: %s: %s); archive it again",
					p.Name, archived.Location, len(rep.Problems), rep.Problems[0].Kind, rep.Problems[0].Detail)
			}
			res.ArchiveVerified = true
		}
		for _, c := range p.Chains {
			var older int64
			err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE chain_id = $1 AND seq <= $2 AND tableoid <> ALL($3::regclass[])`,
				c.ChainID, c.LastSeq, dropping).Scan(&older)
			if err != nil {
				return out, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "check partition %s", p.Name)
			}
			if older > 0 {
				return out, sandgate.Errorf(sandgate.CodeConflict, "partition %s: %d rows of chain %s up to seq %d are in other partitions; purge must remove a chain's oldest rows",
					p.Name, older, c.ChainID, c.LastSeq)
			}
		}
		if dryRun {
			out = append(out, res)
			continue
		}
		ev := sandgate.Event{
			ID: s.cfg.IDs(), Type: sandgate.EventRetentionApplied, Actor: actor, Outcome: "dropped",
			Payload: archivedPayload{Partition: p.Name, From: p.From, To: p.To, Rows: p.Rows, Chains: p.Chains,
				ManifestSHA256: archived.ManifestSHA256, Location: archived.Location, ArchiveEventID: rec.ID}.asMap(),
		}
		table := pgx.Identifier{p.Name}.Sanitize()
		err = s.recordWith(ctx, ev, func(ctx context.Context, tx pgx.Tx) error {
			// Nothing may land in the month between the checks and the drop.
			if _, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
				return err
			}
			var rows int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&rows); err != nil {
				return err
			}
			if rows != p.Rows {
				return fmt.Errorf("partition %s changed during purge (%d rows, now %d)", p.Name, p.Rows, rows)
			}
			_, err := tx.Exec(ctx, `DROP TABLE `+table)
			return err
		})
		if err != nil {
			return out, err
		}
		res.Dropped, res.EventID = true, ev.ID
		out = append(out, res)
		dropping = dropping[:len(dropping)-1] // gone: no longer a relation
	}
	return out, nil
}

// sameAsArchived reports how p differs from what its archive recorded.
func sameAsArchived(p Partition, a archivedPayload) error {
	if p.Rows != a.Rows {
		return fmt.Errorf("%d rows now, %d archived", p.Rows, a.Rows)
	}
	if len(p.Chains) != len(a.Chains) {
		return fmt.Errorf("%d chains now, %d archived", len(p.Chains), len(a.Chains))
	}
	for i, c := range p.Chains {
		if c != a.Chains[i] {
			return fmt.Errorf("chain %s: seq %d–%d (%s) now, %d–%d (%s) archived", c.ChainID, c.FirstSeq, c.LastSeq, c.LastHash,
				a.Chains[i].FirstSeq, a.Chains[i].LastSeq, a.Chains[i].LastHash)
		}
	}
	return nil
}

// recordWith is Record for one event that commits together with also.
func (s *Store) recordWith(ctx context.Context, ev sandgate.Event, also func(context.Context, pgx.Tx) error) error {
	return s.await(ctx, &request{events: []canonical{s.prepare(ev)}, done: make(chan error, 1), ctx: ctx, also: also})
}

// retentionAnchors reads, from retention.applied events, where each
// purged chain now begins: the last purged seq and its hash. Only events
// that a checkpoint by a key v knows covers count: anyone with the
// application role can insert a row that claims a purge.
func (s *Store) retentionAnchors(ctx context.Context, v *verifier) (map[string]anchorPoint, error) {
	rows, err := s.db.WithContext(ctx).Raw(`SELECT chain_id, seq, payload FROM audit_events WHERE type = ?`, string(sandgate.EventRetentionApplied)).Rows()
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read retention events")
	}
	var refs []retentionRef
	for rows.Next() {
		var r retentionRef
		var raw []byte
		if err := rows.Scan(&r.chain, &r.seq, &raw); err != nil {
			rows.Close()
			return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read retention events")
		}
		if json.Unmarshal(raw, &r.p) != nil {
			continue // verify reports the row itself if it is damaged
		}
		refs = append(refs, r)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read retention events")
	}
	out := map[string]anchorPoint{}
	covered := map[string]int64{}
	for _, r := range refs {
		seq, ok := covered[r.chain]
		if !ok {
			if c := v.chains[r.chain]; c != nil {
				seq, _ = v.covered(c)
			} else {
				cps, err := s.checkpointsOf(ctx, r.chain)
				if err != nil {
					return nil, err
				}
				seq = v.knownSeq(cps)
			}
			covered[r.chain] = seq
		}
		if seq >= r.seq {
			addAnchors(out, r.p)
		}
	}
	return out, nil
}

// anchorPoint is where a purged chain's kept rows link to.
type anchorPoint struct {
	Seq  int64
	Hash []byte
}

func addAnchors(into map[string]anchorPoint, p archivedPayload) {
	for _, c := range p.Chains {
		h, err := hex.DecodeString(c.LastHash)
		if err != nil || len(h) != HashSize {
			continue
		}
		if a, ok := into[c.ChainID]; !ok || c.LastSeq > a.Seq {
			into[c.ChainID] = anchorPoint{Seq: c.LastSeq, Hash: h}
		}
	}
}
