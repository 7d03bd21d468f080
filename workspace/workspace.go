// Package workspace does sandgate's hostile-input file work: it checks and
// unpacks workspace archives (tar, tar.gz, zip) and inline files into a
// run's workdir, and collects artifacts out of it afterwards.
//
// Everything here treats its input as hostile. An archive is checked entry
// by entry (Inspect) before anything is written; Unpack checks again while
// it writes, writes only directories and regular files, never follows a
// symlink it did not make, and removes what it made when anything fails.
// Collect reads only regular files, never through a symlink, never more
// than its byte budget, with memory bounded by a fixed buffer. The rules
// and limits are written out in docs/workspaces.md ("Hostile archives").
//
// The package depends on the standard library, the root package (for
// *sandgate.Error) and doublestar (for "**" globs); it knows nothing of
// Docker or databases.
package workspace

import (
	"errors"
	"syscall"

	"github.com/sandgate/sandgate"
)

// Limits bound what an archive or a set of inline files may hold.
type Limits struct {
	// MaxEntries is the most entries (files, directories, and an archive's
	// "./" entry) accepted. Zero or less means DefaultLimits.MaxEntries.
	MaxEntries int
	// MaxBytes is the most file content accepted, counted as bytes are
	// actually read or decompressed, whatever the headers say; it bounds
	// a single file too. Callers set it from the run's workspace_mb. Zero
	// or less means DefaultLimits.MaxBytes.
	MaxBytes int64
}

// DefaultLimits are the limits used for a zero field of Limits: 10,000
// entries and 64 MiB of content.
var DefaultLimits = Limits{MaxEntries: 10_000, MaxBytes: 64 << 20}

func (l Limits) withDefaults() Limits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultLimits.MaxEntries
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	return l
}

// Manifest describes a checked or unpacked workspace: what the trail
// records in run.requested so that an auditor knows exactly what code ran.
type Manifest struct {
	// Format is "tar", "tar.gz", "zip", or "files" for inline files.
	Format string `json:"format"`
	// SHA256 is the hex SHA-256 of the archive's bytes as uploaded. For
	// inline files it is the SHA-256 of their listing, one line per file
	// in path order: "<hex sha256 of content> <octal mode> <path>\n".
	SHA256 string `json:"sha256"`
	// ArchiveBytes is the archive's size as uploaded (0 for inline files).
	ArchiveBytes int64 `json:"archive_bytes"`
	// Entries counts every entry: files, directories and a "./" entry.
	Entries int `json:"entries"`
	// Files and Dirs count the regular files and the explicit directory
	// entries (directories made only as parents are not counted).
	Files int `json:"files"`
	Dirs  int `json:"dirs"`
	// UnpackedBytes is the total content of the files.
	UnpackedBytes int64 `json:"unpacked_bytes"`
}

// Owner is who owns what Unpack and WriteFiles create. -1 leaves that id
// as the process's own, as chown(2) does. When both equal the process's
// ids, nothing is chowned (so a non-root caller may pass its own ids).
type Owner struct {
	UID, GID int
}

// Options are the choices of UnpackWith and WriteFilesWith beyond Unpack's.
type Options struct {
	Owner  Owner
	Limits Limits
	// Replace lets a regular file already at an entry's path be replaced
	// (a session's workspace): the new content is written to a temporary
	// file in the same directory, and every replacement is renamed into
	// place only once all entries are written. A directory or symlink at
	// the path is still an error. Without Replace, any existing file,
	// symlink or other non-directory at an entry's path is an error.
	Replace bool
	// Checked is the hex SHA-256 of an archive the caller has already had
	// Inspect accept (the gateway's check of an upload it keeps where only
	// sandgate can write). UnpackWith then skips its own first pass: it
	// still checks every entry as it writes it, and unless the bytes it
	// read hash to Checked it removes everything it wrote and refuses the
	// archive, so what it leaves is always an archive Inspect accepted.
	Checked string
}

// entryError is the INVALID-REQUEST error for a refused entry.
func entryError(field, name, format string, args ...any) *sandgate.Error {
	e := sandgate.FieldError(field, format, args...)
	e.Message = quoteEntry(name) + ": " + e.Message
	return e
}

// quoteEntry names an entry in a message, shortened so that a 4 KiB name
// does not make a 4 KiB error.
func quoteEntry(name string) string {
	const max = 200
	if len(name) > max {
		cut := max
		for cut > 0 && name[cut]&0xc0 == 0x80 {
			cut--
		}
		return "entry " + quote(name[:cut]) + "…"
	}
	return "entry " + quote(name)
}

// fsError classifies an error of the file system under an entry: a full
// disk or quota is TOO-LARGE (the workspace is sized by workspace_mb), an
// existing path is CONFLICT, anything else INTERNAL.
func fsError(field, name string, err error) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return err
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		e := sandgate.WrapError(sandgate.CodeTooLarge, err, "%s: the workspace is full", quoteEntry(name))
		e.Field = field
		return e
	case errors.Is(err, syscall.EEXIST):
		e := sandgate.WrapError(sandgate.CodeConflict, err, "%s: something already exists at this path", quoteEntry(name))
		e.Field = field
		return e
	}
	e := sandgate.WrapError(sandgate.CodeInternal, err, "%s: could not be written", quoteEntry(name))
	e.Field = field
	return e
}
