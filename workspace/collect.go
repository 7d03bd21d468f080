package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/sandgate/sandgate"
)

// The reasons a path is skipped.
const (
	SkipSymlink    = "symlink"          // never read, never descended
	SkipNotRegular = "not regular file" // FIFO, socket, device
	SkipLimit      = "limit"            // would cross the byte budget; collection stops
	SkipCount      = "count"            // past MaxArtifacts; collection stops
	SkipChanged    = "changed"          // replaced between its check and its opening
	SkipUnreadable = "unreadable"       // could not be opened or read
	SkipName       = "name"             // a name CheckRelPath refuses (control characters, not UTF-8, too deep)
	SkipWalk       = "walk limit"       // past MaxCollectVisits; collection stops
	SkipNoMatch    = "no match"         // a pattern that matched nothing (Path is the pattern)
)

// The bounds of one collection.
const (
	MaxArtifacts     = sandgate.MaxArtifactFiles
	MaxSkippedListed = sandgate.MaxSkippedListed
	// MaxCollectVisits bounds the directory entries looked at, matched or not.
	MaxCollectVisits = 100_000
)

// Collect walks src, the workdir, and hands each regular file a pattern
// matches to put, in path order (component by component, as fs.WalkDir).
// A pattern is a relative slash path or doublestar glob (CheckPattern);
// one that names a directory collects every file under it.
//
// Collect never follows a symlink: a matching symlink is listed as skipped
// and neither read nor descended; each directory is opened by name in its
// already opened parent and checked to be the directory its Lstat saw; a
// file is opened the same way, non-blocking (a FIFO swapped in cannot
// stall it), and skipped unless it is the regular file Lstat saw.
//
// limit is the budget of bytes over all artifacts. A file whose size does
// not fit what remains stops collection, listed as skipped with reason
// "limit" and Truncated set; so does a file past MaxArtifacts. A file is
// read up to the size fstat gave when it was opened: one that grows while
// it is read yields only those bytes, one that shrinks yields fewer. put
// must read r to its end and return the hex SHA-256 of what it read;
// Collect checks that against its own hash of exactly the bytes it handed
// over. put's Artifact has the size put will read at most, and no hash.
// Memory is bounded by put's buffer, whatever the files' sizes.
//
// Errors: INVALID-REQUEST for a bad pattern, what put returned, the
// context's error; files that cannot be read are skipped, not errors.
func Collect(ctx context.Context, src *os.Root, patterns []string, limit int64, put func(a sandgate.Artifact, r io.Reader) (sha256hex string, err error)) (sandgate.Artifacts, error) {
	c := &collector{ctx: ctx, put: put, remaining: max(limit, 0)}
	covered := false
	for i, p := range patterns {
		if err := CheckPattern(fmt.Sprintf("artifacts[%d]", i), p); err != nil {
			return sandgate.Artifacts{}, err
		}
		p = cleanPattern(p)
		if p == "." {
			covered = true
		}
		c.patterns = append(c.patterns, pattern{glob: p, parts: strings.Split(p, "/"), matched: p == "."})
	}
	if len(c.patterns) == 0 {
		return sandgate.Artifacts{Files: []sandgate.Artifact{}}, nil
	}
	if err := c.walk(src, ".", 0, covered); err != nil {
		return c.out, err
	}
	if !c.out.Truncated {
		for _, p := range c.patterns {
			if !p.matched {
				c.skip(p.glob, SkipNoMatch)
			}
		}
	}
	if c.out.Files == nil {
		c.out.Files = []sandgate.Artifact{}
	}
	return c.out, nil
}

type pattern struct {
	glob    string
	parts   []string
	matched bool
}

type collector struct {
	ctx       context.Context
	put       func(sandgate.Artifact, io.Reader) (string, error)
	patterns  []pattern
	remaining int64
	visits    int
	out       sandgate.Artifacts
	h         hash.Hash
}

// errStop ends a walk that has recorded why it stopped.
var errStop = errors.New("collection stopped")

func (c *collector) walk(d *os.Root, rel string, depth int, covered bool) error {
	err := c.walkDir(d, rel, depth, covered)
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

func (c *collector) walkDir(d *os.Root, rel string, depth int, covered bool) error {
	names, err := c.list(d, rel)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		p := name
		if rel != "." {
			p = rel + "/" + name
		}
		fi, err := d.Lstat(name)
		if err != nil {
			continue // gone since it was listed
		}
		match := c.match(p) || covered
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if match {
				c.skip(p, SkipSymlink)
			}
		case fi.IsDir():
			if !match && !c.mayMatchUnder(p) {
				continue
			}
			if depth+1 >= MaxPathDepth {
				if match {
					c.skip(p, SkipName)
				}
				continue
			}
			sub, err := d.OpenRoot(name)
			if err != nil {
				if match {
					c.skip(p, SkipUnreadable)
				}
				continue
			}
			if st, err := sub.Stat("."); err != nil || !os.SameFile(fi, st) {
				sub.Close()
				if match {
					c.skip(p, SkipChanged)
				}
				continue
			}
			err = c.walkDir(sub, p, depth+1, match)
			sub.Close()
			if err != nil {
				return err
			}
		case !match:
		case !fi.Mode().IsRegular():
			c.skip(p, SkipNotRegular)
		default:
			if err := c.take(d, name, p, fi); err != nil {
				return err
			}
		}
	}
	return nil
}

// list returns a directory's names, sorted, counting them against
// MaxCollectVisits.
func (c *collector) list(d *os.Root, rel string) ([]string, error) {
	f, err := d.Open(".")
	if err != nil {
		return nil, nil // unreadable directories hold nothing collectable
	}
	defer f.Close()
	var names []string
	for {
		batch, err := f.Readdirnames(256)
		c.visits += len(batch)
		if c.visits > MaxCollectVisits {
			c.out.Truncated = true
			c.skip(rel, SkipWalk)
			return nil, errStop
		}
		names = append(names, batch...)
		if err != nil || len(batch) == 0 {
			break
		}
	}
	slices.Sort(names)
	return names, nil
}

func (c *collector) match(p string) bool {
	hit := false
	for i := range c.patterns {
		if doublestar.MatchUnvalidated(c.patterns[i].glob, p) {
			c.patterns[i].matched = true
			hit = true
		}
	}
	return hit
}

// mayMatchUnder reports whether some pattern could match a path under
// the directory p, so that directories no pattern reaches are not walked.
func (c *collector) mayMatchUnder(p string) bool {
	dir := strings.Split(p, "/")
	for _, pat := range c.patterns {
		if strings.Contains(pat.glob, "{") {
			return true // alternatives may hold "/": walk
		}
		if prefixMayMatch(pat.parts, dir) {
			return true
		}
	}
	return false
}

func prefixMayMatch(parts, dir []string) bool {
	for i, d := range dir {
		if i >= len(parts) {
			return false
		}
		if parts[i] == "**" {
			return true
		}
		if !doublestar.MatchUnvalidated(parts[i], d) {
			return false
		}
	}
	return len(parts) > len(dir)
}

func (c *collector) skip(p, reason string) {
	c.out.SkippedCount++
	if len(c.out.Skipped) < MaxSkippedListed {
		c.out.Skipped = append(c.out.Skipped, sandgate.SkippedArtifact{Path: p, Reason: reason})
	}
}

func (c *collector) stop(p, reason string) error {
	c.out.Truncated = true
	c.skip(p, reason)
	return errStop
}

// take collects the regular file name of d (p under the workdir).
func (c *collector) take(d *os.Root, name, p string, fi fs.FileInfo) error {
	if _, msg := cleanRel(p); msg != "" {
		c.skip(p, SkipName)
		return nil
	}
	if len(c.out.Files) >= MaxArtifacts {
		return c.stop(p, SkipCount)
	}
	if fi.Size() > c.remaining {
		return c.stop(p, SkipLimit)
	}
	f, err := d.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		c.skip(p, SkipUnreadable)
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		c.skip(p, SkipUnreadable)
		return nil
	case !st.Mode().IsRegular() || !os.SameFile(fi, st):
		c.skip(p, SkipChanged)
		return nil
	case st.Size() > c.remaining:
		return c.stop(p, SkipLimit)
	}
	if c.h == nil {
		c.h = sha256.New()
	}
	c.h.Reset()
	r := &hashReader{ctx: c.ctx, r: io.LimitReader(f, st.Size()), h: c.h}
	a := sandgate.Artifact{Path: p, Size: st.Size(), Mode: uint32(st.Mode().Perm())}
	sum, err := c.put(a, r)
	if r.err != nil {
		if cerr := c.ctx.Err(); cerr != nil {
			return cerr
		}
		c.skip(p, SkipUnreadable)
		return nil
	}
	if err != nil {
		return fmt.Errorf("store artifact %q: %w", p, err)
	}
	if n, _ := r.r.Read(make([]byte, 1)); n > 0 {
		return sandgate.Errorf(sandgate.CodeInternal, "store artifact %q: the store did not read it to its end", p)
	}
	a.Size = r.n
	a.SHA256 = hex.EncodeToString(c.h.Sum(nil))
	if !strings.EqualFold(sum, a.SHA256) {
		return sandgate.Errorf(sandgate.CodeInternal, "store artifact %q: the store's hash %q is not that of the bytes handed to it", p, sum)
	}
	c.remaining -= r.n
	c.out.Bytes += r.n
	c.out.Files = append(c.out.Files, a)
	return nil
}

// hashReader hashes and counts what is read through it and keeps the
// first read error. It has no WriteTo, so a copy from it goes through the
// copier's fixed buffer.
type hashReader struct {
	ctx context.Context
	r   io.Reader
	h   hash.Hash
	n   int64
	err error
}

func (h *hashReader) Read(p []byte) (int, error) {
	if err := h.ctx.Err(); err != nil {
		h.err = err
		return 0, err
	}
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	if err != nil && err != io.EOF && h.err == nil {
		h.err = err
	}
	return n, err
}
