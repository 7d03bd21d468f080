package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/sandgate/sandgate"
)

// CheckPattern checks an artifact pattern: relative to the workdir,
// without "..", a valid glob. field names it in the error.
func CheckPattern(field, p string) error {
	clean, err := sandgate.CleanRelPath(p)
	if err != nil {
		return sandgate.FieldError(field, "%s", err)
	}
	if !doublestar.ValidatePattern(clean) {
		return sandgate.FieldError(field, "is not a valid glob: %q", p)
	}
	return nil
}

// matches reports whether rel is collected by one of patterns: matched by
// it, or under a directory it matches.
func matches(patterns []string, rel string) bool {
	for _, p := range patterns {
		if ok, _ := doublestar.Match(p, rel); ok {
			return true
		}
		for d := rel; ; {
			i := strings.LastIndexByte(d, '/')
			if i < 0 {
				break
			}
			d = d[:i]
			if ok, _ := doublestar.Match(p, d); ok {
				return true
			}
		}
	}
	return false
}

// Collect stores the files under src that patterns name (paths or
// doublestar globs, relative to src; a pattern naming a directory
// collects the files under it), in path order, through put, which
// returns the hex SHA-256 of exactly the bytes it was handed. It never
// follows a symlink (a symlink is listed as skipped, a directory symlink
// is not descended), reads only regular files, each opened through src
// without following a link and without blocking, and reads at most limit
// bytes in all: the first file that does not fit stops the collection and
// marks it truncated, as does the MaxArtifactFiles-th file. A file that
// grows while it is read is read up to the size it had when opened. What
// was stored before an error stays in the result.
func Collect(ctx context.Context, src *os.Root, patterns []string, limit int64, put func(a sandgate.Artifact, r io.Reader) (string, error)) (sandgate.Artifacts, error) {
	out := sandgate.Artifacts{Files: []sandgate.Artifact{}}
	skip := func(rel, why string) {
		out.SkippedCount++
		if len(out.Skipped) < sandgate.MaxSkippedListed {
			out.Skipped = append(out.Skipped, sandgate.SkippedArtifact{Path: rel, Reason: why})
		}
	}
	if len(patterns) == 0 {
		return out, nil
	}
	stop := errors.New("stop")
	err := fs.WalkDir(src.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			if rel == "." {
				return err
			}
			skip(rel, "unreadable")
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if rel == "." || d.IsDir() || !matches(patterns, rel) {
			return nil
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			skip(rel, "symlink")
			return nil
		case !t.IsRegular():
			skip(rel, "not_regular")
			return nil
		}
		if len(out.Files) >= sandgate.MaxArtifactFiles {
			out.Truncated = true
			skip(rel, "count")
			return stop
		}
		f, err := src.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			skip(rel, "unreadable")
			return nil
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			// Swapped for something else since it was listed.
			skip(rel, "not_regular")
			return nil
		}
		size := st.Size()
		if size > limit-out.Bytes {
			out.Truncated = true
			skip(rel, "limit")
			return stop
		}
		cr := &countingReader{r: io.LimitReader(f, size)}
		a := sandgate.Artifact{Path: rel, Mode: uint32(st.Mode().Perm())}
		sum, err := put(a, cr)
		if err != nil {
			return fmt.Errorf("store artifact %s: %w", rel, err)
		}
		a.SHA256, a.Size = sum, cr.n
		out.Files = append(out.Files, a)
		out.Bytes += cr.n
		return nil
	})
	if errors.Is(err, stop) {
		err = nil
	}
	return out, err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
