package runstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sandgate/sandgate"
)

// chunkSize is the size of a blob's chunks: what one statement writes and
// one row read holds. A range request reads the chunks it covers only.
const chunkSize = 1 << 20

var _ sandgate.ArtifactStore = (*Store)(nil)

// PutBlob stores what r yields, a chunk at a time, under its SHA-256.
// The chunks are written under an upload key while the digest is being
// computed, then renamed to it in the same transaction, or dropped when
// the same bytes are stored already: equal artifacts are kept once.
// Concurrent puts of the same bytes are serialised on the digest.
func (s *Store) PutBlob(ctx context.Context, r io.Reader) (string, int64, error) {
	upload := "upload:" + uuid.NewString()
	h := sha256.New()
	buf := make([]byte, chunkSize)
	var size int64
	var sum string
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		seq := 0
		for {
			n, rerr := io.ReadFull(r, buf)
			if n > 0 {
				h.Write(buf[:n])
				size += int64(n)
				if err := tx.Exec("INSERT INTO blob_chunks (sha256, seq, data) VALUES (?, ?, ?)", upload, seq, buf[:n]).Error; err != nil {
					return err
				}
				seq++
			}
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				break
			}
			if rerr != nil {
				return &readError{rerr}
			}
		}
		sum = hex.EncodeToString(h.Sum(nil))
		if err := tx.Exec("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", "blob:"+sum).Error; err != nil {
			return err
		}
		var exists int64
		if err := tx.Raw("SELECT count(*) FROM blobs WHERE sha256 = ?", sum).Scan(&exists).Error; err != nil {
			return err
		}
		if exists > 0 {
			return tx.Exec("DELETE FROM blob_chunks WHERE sha256 = ?", upload).Error
		}
		if err := tx.Exec("UPDATE blob_chunks SET sha256 = ? WHERE sha256 = ?", sum, upload).Error; err != nil {
			return err
		}
		return tx.Exec("INSERT INTO blobs (sha256, size, chunks) VALUES (?, ?, ?)", sum, size, seq).Error
	})
	var re *readError
	if errors.As(err, &re) {
		return "", 0, fmt.Errorf("read blob: %w", re.err)
	}
	if err != nil {
		return "", 0, storeErr(err, "store blob")
	}
	return sum, size, nil
}

// readError marks a failure of the reader, not of the database.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }

// WriteBlob writes n bytes of blob sum from off to w (n < 0: to its end),
// one chunk at a time: each chunk is read by a statement of its own, and
// the connection goes back to the pool before a byte of it is written,
// so a client that reads slowly (or never) holds no connection. NOT-FOUND
// when there is no such blob; INVALID-REQUEST when the range lies
// outside it.
func (s *Store) WriteBlob(ctx context.Context, sum string, off, n int64, w io.Writer) error {
	var meta struct {
		Size   int64
		Chunks int
	}
	res := s.db.WithContext(ctx).Raw("SELECT size, chunks FROM blobs WHERE sha256 = ?", sum).Scan(&meta)
	if res.Error != nil {
		return storeErr(res.Error, "read blob")
	}
	if res.RowsAffected == 0 {
		return sandgate.Errorf(sandgate.CodeNotFound, "blob %s not found", sum)
	}
	if n < 0 {
		n = meta.Size - off
	}
	if off < 0 || off > meta.Size || n < 0 || off+n > meta.Size {
		return sandgate.Errorf(sandgate.CodeInvalidRequest, "range %d+%d lies outside blob %s of %d bytes", off, n, sum, meta.Size)
	}
	for seq := off / chunkSize; n > 0; seq++ {
		start := seq * chunkSize
		lo := max(off-start, 0)
		hi := min(off+n-start, chunkSize)
		// Only the bytes of the range (substring counts from 1).
		var data []byte
		err := s.db.WithContext(ctx).Raw("SELECT substring(data FROM ? FOR ?) FROM blob_chunks WHERE sha256 = ? AND seq = ?",
			lo+1, hi-lo, sum, seq).Row().Scan(&data)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return storeErr(err, "read blob")
		}
		if err != nil || int64(len(data)) != hi-lo {
			return fmt.Errorf("blob %s: chunk %d is missing or short", sum, seq)
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
		off, n = off+int64(len(data)), n-int64(len(data))
	}
	return nil
}

// artifactRow is one run_artifacts row.
type artifactRow struct {
	RunID  string `gorm:"column:run_id;primaryKey"`
	Path   string `gorm:"column:path;primaryKey"`
	SHA256 string `gorm:"column:sha256"`
	Size   int64  `gorm:"column:size"`
	Mode   int64  `gorm:"column:mode"`
}

// TableName tells gorm the table.
func (artifactRow) TableName() string { return "run_artifacts" }

// SaveArtifacts records runID's files, whose blobs are stored. Saving the
// same list again (a retried save) changes nothing.
func (s *Store) SaveArtifacts(ctx context.Context, runID string, files []sandgate.Artifact) error {
	if len(files) == 0 {
		return nil
	}
	rows := make([]artifactRow, len(files))
	for i, f := range files {
		rows[i] = artifactRow{RunID: runID, Path: f.Path, SHA256: f.SHA256, Size: f.Size, Mode: int64(f.Mode)}
	}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, 200).Error
	if err != nil {
		return storeErr(err, "save artifacts")
	}
	return nil
}

// RunArtifacts lists runID's files in path order.
func (s *Store) RunArtifacts(ctx context.Context, runID string) ([]sandgate.Artifact, error) {
	var rows []artifactRow
	if err := s.db.WithContext(ctx).Where("run_id = ?", runID).Order("path").Find(&rows).Error; err != nil {
		return nil, storeErr(err, "list artifacts")
	}
	out := make([]sandgate.Artifact, len(rows))
	for i, r := range rows {
		out[i] = sandgate.Artifact{Path: r.Path, SHA256: r.SHA256, Size: r.Size, Mode: uint32(r.Mode)}
	}
	return out, nil
}
