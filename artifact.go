package sandgate

import (
	"context"
	"io"
)

// Artifact is one file a run left in its workspace that its spec's
// artifacts named, stored by the SHA-256 of its bytes.
type Artifact struct {
	// Path is relative to the run's workdir, with forward slashes.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Mode is the file's permission bits.
	Mode uint32 `json:"mode"`
}

// SkippedArtifact is a path the artifacts matched that was not collected,
// or a pattern that matched nothing, and why: "symlink", "not regular
// file", "limit" (the artifact limit was reached), "count" (too many
// files), "changed" (replaced while it was read), "unreadable", "name" (a
// path sandgate refuses), "walk limit" (too many entries looked at) or "no
// match" (Path is the pattern). The workspace package defines them.
type SkippedArtifact struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// MaxArtifactFiles is the most files one run's collection keeps, and
// MaxSkippedListed the most skipped paths it lists (the rest are counted).
const (
	MaxArtifactFiles = 1000
	MaxSkippedListed = 100
)

// Artifacts is what a run's artifact collection found: the files it
// stored, in path order, their total size, and what it left out.
type Artifacts struct {
	Files []Artifact `json:"files"`
	Bytes int64      `json:"bytes"`
	// Truncated is true when the artifact limit (or MaxArtifactFiles) kept
	// a matched file out.
	Truncated bool              `json:"truncated"`
	Skipped   []SkippedArtifact `json:"skipped,omitempty"`
	// SkippedCount counts every skipped path, listed or not.
	SkippedCount int `json:"skipped_count,omitempty"`
	// Error says why collection stopped early (the blob store failed, the
	// workspace could not be read); what was stored before stays.
	Error string `json:"error,omitempty"`
}

// ArtifactSummary is what a run carries of its artifacts; the list is at
// GET /v1/runs/{id}/artifacts.
type ArtifactSummary struct {
	Count        int    `json:"count"`
	Bytes        int64  `json:"bytes"`
	Truncated    bool   `json:"truncated"`
	SkippedCount int    `json:"skipped_count"`
	Error        string `json:"error,omitempty"`
}

// Summary is the summary a run carries.
func (a Artifacts) Summary() ArtifactSummary {
	return ArtifactSummary{Count: len(a.Files), Bytes: a.Bytes, Truncated: a.Truncated, SkippedCount: a.SkippedCount, Error: a.Error}
}

// BlobStore keeps bytes by their SHA-256: the same bytes are stored once,
// however many runs leave them. The Postgres store is one; an object store
// would be another.
type BlobStore interface {
	// PutBlob stores what r yields and returns its hex SHA-256 and size.
	// It reads r to its end without holding it in memory whole.
	PutBlob(ctx context.Context, r io.Reader) (sha256 string, size int64, err error)
	// WriteBlob writes n bytes of blob sha256 from offset off to w (n < 0:
	// to its end). NOT-FOUND when there is no such blob.
	WriteBlob(ctx context.Context, sha256 string, off, n int64, w io.Writer) error
}

// ArtifactStore keeps the runs' artifacts: the list of each run's files,
// and their bytes in a BlobStore.
type ArtifactStore interface {
	BlobStore
	// SaveArtifacts records the files of runID's collection, whose blobs
	// are stored already.
	SaveArtifacts(ctx context.Context, runID string, files []Artifact) error
	// RunArtifacts lists runID's files in path order (empty when it has
	// none).
	RunArtifacts(ctx context.Context, runID string) ([]Artifact, error)
}
