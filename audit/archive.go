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
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
)

// An archive is one month of the trail in a directory of its own: its rows
// (events.jsonl), the checkpoints of its chains (checkpoints.jsonl) and a
// manifest with the files' SHA-256, checked with no database by
// VerifyArchive.

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

// ArchiveManifest describes an archived partition: what Archive wrote and
// records in its audit.archived event, and what Purge holds the partition
// to.
type ArchiveManifest struct {
	Partition
	CreatedAt time.Time         `json:"created_at"`
	Files     map[string]string `json:"files"` // file name → hex SHA-256
	KeyIDs    []string          `json:"key_ids"`
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
	return s.Record(ctx, sandgate.NewAuditArchived(sandgate.Subject{Actor: actor}, time.Time{},
		archivedPayload{Partition: m.Name, From: m.From, To: m.To, Rows: m.Rows, Chains: m.Chains,
			Files: m.Files, ManifestSHA256: hex.EncodeToString(sum[:]), Location: out}.asMap()))
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
