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
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// Archive writes a month of the trail into a directory of its own
// (proof.ArchiveManifest says what it holds), checked with no database by
// proof.VerifyArchive.

// Archive writes month partition name into dir/name: its rows
// (events.jsonl, in chain order, as Export writes them), every checkpoint
// of its chains (checkpoints.jsonl) and manifest.json with the files'
// SHA-256. Each file is synced. The archive is verified offline
// (VerifyArchive) before audit.archived records it with actor. It refuses
// the current month, a month whose rows are not all under a checkpoint,
// and a directory that already holds an archive. Rows waiting in the
// default partition are first moved into their months (AdoptDefault).
func (s *Retention) Archive(ctx context.Context, name, dir, actor string) (proof.ArchiveManifest, error) {
	if s.writer.w == nil {
		return proof.ArchiveManifest{}, sandgate.Errorf(sandgate.CodeAuditUnavailable, "archive needs a writing store: it records audit.archived")
	}
	if _, err := s.AdoptDefault(ctx); err != nil {
		return proof.ArchiveManifest{}, err
	}
	p, err := s.partition(ctx, name)
	if err != nil {
		return proof.ArchiveManifest{}, err
	}
	if err := s.covered(ctx, p); err != nil {
		return proof.ArchiveManifest{}, err
	}
	out := filepath.Join(dir, name)
	if _, err := os.Stat(filepath.Join(out, proof.ArchiveManifestFile)); err == nil {
		return s.archivedBefore(ctx, p, out, actor)
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return proof.ArchiveManifest{}, fmt.Errorf("archive: %w", err)
	}
	m := proof.ArchiveManifest{Partition: p, CreatedAt: s.cfg.Clock().UTC(), Files: map[string]string{}}
	table := pgx.Identifier{p.Name}.Sanitize()
	err = writeSynced(filepath.Join(out, proof.ArchiveEventsFile), m.Files, func(w io.Writer) error {
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
		return proof.ArchiveManifest{}, err
	}
	keys := map[string]bool{}
	err = writeSynced(filepath.Join(out, proof.ArchiveCheckpointsFile), m.Files, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for _, c := range p.Chains {
			if err := s.eachCheckpoint(ctx, c.ChainID, func(cp proof.Checkpoint) error {
				keys[cp.KeyID] = true
				return enc.Encode(cp)
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return proof.ArchiveManifest{}, err
	}
	for k := range keys {
		m.KeyIDs = append(m.KeyIDs, k)
	}
	slices.Sort(m.KeyIDs)
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return proof.ArchiveManifest{}, err
	}
	if err := writeSynced(filepath.Join(out, proof.ArchiveManifestFile), nil, func(w io.Writer) error {
		_, err := w.Write(append(manifest, '\n'))
		return err
	}); err != nil {
		return proof.ArchiveManifest{}, err
	}
	if err := syncDir(out); err != nil {
		return proof.ArchiveManifest{}, err
	}
	trusted, err := s.archiveKeys(ctx)
	if err != nil {
		return proof.ArchiveManifest{}, err
	}
	rep, err := proof.VerifyArchive(out, trusted...)
	if err != nil {
		return proof.ArchiveManifest{}, err
	}
	if !rep.OK {
		return proof.ArchiveManifest{}, sandgate.Errorf(sandgate.CodeConflict, "the archive of %s does not verify (%d problems, first: %s: %s); nothing recorded",
			p.Name, len(rep.Problems), rep.Problems[0].Kind, rep.Problems[0].Detail)
	}
	return m, s.recordArchived(ctx, m, append(manifest, '\n'), out, actor)
}

// recordArchived records audit.archived for the archive at out.
func (s *Retention) recordArchived(ctx context.Context, m proof.ArchiveManifest, manifest []byte, out, actor string) error {
	sum := sha256.Sum256(manifest)
	return s.writer.Record(ctx, sandgate.NewAuditArchived(sandgate.Subject{Actor: actor}, time.Time{},
		proof.ArchivedPayload{Partition: m.Name, From: m.From, To: m.To, Rows: m.Rows, Chains: m.Chains,
			Files: m.Files, ManifestSHA256: hex.EncodeToString(sum[:]), Location: out}.AsMap()))
}

// archivedBefore handles an archive directory that already holds a
// manifest: when it verifies and still matches the partition, it stands
// (recorded now if an earlier run stopped before recording it);
// otherwise Archive refuses to overwrite it.
func (s *Retention) archivedBefore(ctx context.Context, p proof.Partition, out, actor string) (proof.ArchiveManifest, error) {
	manifest, err := os.ReadFile(filepath.Join(out, proof.ArchiveManifestFile))
	if err != nil {
		return proof.ArchiveManifest{}, fmt.Errorf("archive: %w", err)
	}
	var m proof.ArchiveManifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		return proof.ArchiveManifest{}, sandgate.Errorf(sandgate.CodeConflict, "%s holds a manifest that cannot be read (%v); archive to another directory", out, err)
	}
	keys, err := s.archiveKeys(ctx)
	if err != nil {
		return proof.ArchiveManifest{}, err
	}
	rep, err := proof.VerifyArchive(out, keys...)
	if err != nil {
		return proof.ArchiveManifest{}, err
	}
	stale := sameAsArchived(p, proof.ArchivedPayload{Rows: m.Rows, Chains: m.Chains})
	if !rep.OK || stale != nil {
		return proof.ArchiveManifest{}, sandgate.Errorf(sandgate.CodeConflict, "%s already holds an archive of %s that does not verify or no longer matches it; archive to another directory", out, p.Name)
	}
	sum := sha256.Sum256(manifest)
	rec, last, err := s.lastArchive(ctx, p.Name)
	if err != nil {
		return proof.ArchiveManifest{}, err
	}
	if rec != nil && last.ManifestSHA256 == hex.EncodeToString(sum[:]) {
		return m, nil
	}
	return m, s.recordArchived(ctx, m, manifest, out, actor)
}

// archiveKeys are the keys an archive's checkpoints are checked against
// when it is written and before its month is dropped: those the Store's
// anchors make trusted (proof.ResolveTrust over the registry and the
// trail's endorsements) and those the registry vouches for. That check is
// of the archive's files against the trail (whole, every row covered by
// a checkpoint); auditors judge its keys with their own anchors (audit
// verify --archive).
func (s *Retention) archiveKeys(ctx context.Context) ([]ed25519.PublicKey, error) {
	reg, err := s.keys(ctx)
	if err != nil {
		return nil, err
	}
	ends, err := s.endorsements(ctx)
	if err != nil {
		return nil, err
	}
	keys := proof.RegistryKnown(reg)
	maps.Copy(keys, proof.ResolveTrust(s.cfg.Anchors, reg, ends).Keys())
	return slices.Collect(maps.Values(keys)), nil
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
