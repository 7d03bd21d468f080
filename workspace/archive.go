package workspace

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate"
)

// Limits bound what one archive, or one set of inline files, may hold.
type Limits struct {
	// MaxEntries is the most entries (files and directories).
	MaxEntries int
	// MaxBytes is the most bytes the files hold once unpacked, counted as
	// they are read.
	MaxBytes int64
}

// DefaultLimits are 10,000 entries and 4 GiB; callers set MaxBytes to the
// room the workspace has.
var DefaultLimits = Limits{MaxEntries: 10000, MaxBytes: 4 << 30}

// The bounds of one entry's name.
const (
	MaxNameBytes = 4096
	MaxDepth     = 64
)

// The archive formats.
const (
	FormatTar   = "tar"
	FormatTarGz = "tar.gz"
	FormatZip   = "zip"
)

// Manifest is what an archive (or a set of files) holds.
type Manifest struct {
	Format string
	// SHA256 is the hex digest of the archive as sent.
	SHA256        string
	ArchiveBytes  int64
	Entries       int
	Files         int
	Dirs          int
	UnpackedBytes int64
}

// entry is one checked entry of an archive.
type entry struct {
	name  string // clean, relative, slash-separated; "." for the root
	dir   bool
	mode  fs.FileMode
	mtime int64 // Unix seconds; 0 when unknown
}

// refuse is the error for entry name: INVALID-REQUEST on field.
func refuse(field, name, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if name != "" {
		msg = fmt.Sprintf("entry %s: %s", strconv.Quote(shorten(name)), msg)
	}
	return &sandgate.Error{Code: sandgate.CodeInvalidRequest, Field: field, Message: msg}
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// cleanName checks an entry's name and returns it cleaned: relative,
// without "..", NUL or backslash, at most MaxNameBytes and MaxDepth.
// "." is the workspace itself.
func cleanName(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("has an empty name")
	case len(name) > MaxNameBytes:
		return "", fmt.Errorf("has a name over %d bytes", MaxNameBytes)
	case strings.IndexByte(name, 0) >= 0:
		return "", errors.New("has a NUL in its name")
	case strings.IndexByte(name, '\\') >= 0:
		return "", errors.New(`has a '\' in its name: paths use '/'`)
	case strings.HasPrefix(name, "/"):
		return "", errors.New("is an absolute path: it would land outside the workspace")
	case len(name) >= 2 && name[1] == ':':
		return "", errors.New("names a drive: it would land outside the workspace")
	}
	parts := strings.Split(strings.TrimSuffix(name, "/"), "/")
	for _, p := range parts {
		if p == ".." {
			return "", errors.New("has a '..' component: it would land outside the workspace")
		}
	}
	if len(parts) > MaxDepth {
		return "", fmt.Errorf("is deeper than %d directories", MaxDepth)
	}
	return path.Clean(name), nil
}

// tree keeps the paths seen so far, to refuse duplicates and files used
// as directories.
type tree struct {
	files map[string]bool
	dirs  map[string]bool // explicit or implied by a deeper entry
	expl  map[string]bool // explicit directory entries
}

func newTree() *tree {
	return &tree{files: map[string]bool{}, dirs: map[string]bool{".": true}, expl: map[string]bool{}}
}

// add records e, refusing a path seen before or one under a file.
func (t *tree) add(e entry) error {
	if e.name == "." {
		if !e.dir {
			return errors.New("is a file where the workspace itself is")
		}
		return nil
	}
	if t.files[e.name] || t.expl[e.name] {
		return errors.New("is a duplicate of an earlier entry")
	}
	if !e.dir && t.dirs[e.name] {
		return errors.New("is a file where an earlier entry is a directory")
	}
	for d := path.Dir(e.name); d != "."; d = path.Dir(d) {
		if t.files[d] {
			return fmt.Errorf("lies under %s, which is a file", strconv.Quote(d))
		}
	}
	if e.dir {
		t.expl[e.name] = true
		t.dirs[e.name] = true
	} else {
		t.files[e.name] = true
	}
	for d := path.Dir(e.name); d != "."; d = path.Dir(d) {
		t.dirs[d] = true
	}
	return nil
}

// checkMode refuses special permission bits.
func checkMode(m fs.FileMode) error {
	if m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		return errors.New("has a setuid, setgid or sticky bit")
	}
	return nil
}

// walker hands every checked entry of an archive, with the reader of a
// file's bytes, to visit, counting entries and bytes against the limits.
type walker struct {
	field string
	lim   Limits
	tree  *tree
	m     Manifest
	buf   []byte
}

func newWalker(field string, lim Limits) *walker {
	if lim.MaxEntries <= 0 {
		lim.MaxEntries = DefaultLimits.MaxEntries
	}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultLimits.MaxBytes
	}
	return &walker{field: field, lim: lim, tree: newTree(), buf: make([]byte, 32<<10)}
}

// entry checks one entry before its bytes are read.
func (w *walker) entry(raw string, e entry) (entry, error) {
	name, err := cleanName(raw)
	if err != nil {
		return e, refuse(w.field, raw, "%v", err)
	}
	e.name = name
	if err := checkMode(e.mode); err != nil {
		return e, refuse(w.field, raw, "%v", err)
	}
	if err := w.tree.add(e); err != nil {
		return e, refuse(w.field, raw, "%v", err)
	}
	w.m.Entries++
	if w.m.Entries > w.lim.MaxEntries {
		return e, refuse(w.field, raw, "is one entry too many: at most %d are allowed", w.lim.MaxEntries)
	}
	if e.dir {
		w.m.Dirs++
	} else {
		w.m.Files++
	}
	return e, nil
}

// copy copies a file's bytes from r to dst (nil: discard), refusing what
// would take the total past the limit.
func (w *walker) copy(raw string, dst io.Writer, r io.Reader) (int64, error) {
	room := w.lim.MaxBytes - w.m.UnpackedBytes
	if dst == nil {
		dst = io.Discard
	}
	n, err := io.CopyBuffer(onlyWriter{dst}, io.LimitReader(r, room+1), w.buf)
	w.m.UnpackedBytes += n
	if err != nil {
		var we *writeError
		if errors.As(err, &we) {
			return n, we.err
		}
		return n, refuse(w.field, raw, "cannot be read: %v", err)
	}
	if n > room {
		return n, refuse(w.field, raw, "takes the archive past %d bytes unpacked", w.lim.MaxBytes)
	}
	return n, nil
}

// onlyWriter hides ReaderFrom, so that CopyBuffer uses the buffer; its
// errors are marked as the destination's.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil {
		return n, &writeError{err}
	}
	return n, nil
}

type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// visitor receives each checked entry; body is nil for directories and
// must be read through the walker's copy.
type visitor func(e entry, raw string, body io.Reader) error

// walk reads the archive r of size bytes, detecting its format, and hands
// each entry to visit. It refuses what Limits and the entry rules refuse.
func walk(r io.ReaderAt, size int64, w *walker, visit visitor) (Manifest, error) {
	head := make([]byte, 512)
	n, _ := r.ReadAt(head, 0)
	head = head[:n]
	w.m.ArchiveBytes = size
	switch {
	case size == 0:
		return w.m, refuse(w.field, "", "is empty: send a tar, tar.gz or zip archive")
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		w.m.Format = FormatTarGz
		gz, err := gzip.NewReader(io.NewSectionReader(r, 0, size))
		if err != nil {
			return w.m, refuse(w.field, "", "is not a valid gzip stream: %v", err)
		}
		gz.Multistream(false)
		if err := walkTar(tar.NewReader(gz), w, visit); err != nil {
			return w.m, err
		}
		// The tar's end must be the gzip stream's end: a checksum error
		// shows only once the stream is read to its end.
		if _, err := io.Copy(io.Discard, io.LimitReader(gz, 1<<20)); err != nil {
			return w.m, refuse(w.field, "", "is not a valid gzip stream: %v", err)
		}
	case bytes.HasPrefix(head, []byte("PK\x03\x04")) || bytes.HasPrefix(head, []byte("PK\x05\x06")):
		w.m.Format = FormatZip
		if err := walkZip(r, size, w, visit); err != nil {
			return w.m, err
		}
	case len(head) >= 262 && string(head[257:262]) == "ustar" || isZeroBlock(head):
		w.m.Format = FormatTar
		if err := walkTar(tar.NewReader(io.NewSectionReader(r, 0, size)), w, visit); err != nil {
			return w.m, err
		}
	default:
		return w.m, refuse(w.field, "", "is not a tar, tar.gz or zip archive")
	}
	return w.m, nil
}

func isZeroBlock(b []byte) bool {
	if len(b) < 512 {
		return false
	}
	for _, c := range b[:512] {
		if c != 0 {
			return false
		}
	}
	return true
}

func walkTar(tr *tar.Reader, w *walker, visit visitor) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return refuse(w.field, "", "is not a valid tar archive: %v", err)
		}
		e := entry{mode: h.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), mtime: h.ModTime.Unix()}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
		case tar.TypeDir:
			e.dir = true
		case tar.TypeXGlobalHeader:
			continue
		case tar.TypeSymlink, tar.TypeLink:
			return refuse(w.field, h.Name, "is a link (to %s): archives may hold only files and directories", strconv.Quote(shorten(h.Linkname)))
		case tar.TypeChar, tar.TypeBlock:
			return refuse(w.field, h.Name, "is a device node: archives may hold only files and directories")
		case tar.TypeFifo:
			return refuse(w.field, h.Name, "is a FIFO: archives may hold only files and directories")
		default:
			return refuse(w.field, h.Name, "is of tar type %q: archives may hold only files and directories", string(rune(h.Typeflag)))
		}
		e, err = w.entry(h.Name, e)
		if err != nil {
			return err
		}
		var body io.Reader
		if !e.dir {
			body = tr
		}
		if err := visit(e, h.Name, body); err != nil {
			return err
		}
	}
}

func walkZip(r io.ReaderAt, size int64, w *walker, visit visitor) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return refuse(w.field, "", "is not a valid zip archive: %v", err)
	}
	if len(zr.File) > w.lim.MaxEntries {
		return refuse(w.field, "", "has %d entries: at most %d are allowed", len(zr.File), w.lim.MaxEntries)
	}
	for _, f := range zr.File {
		mode := f.Mode()
		e := entry{mode: mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), mtime: f.Modified.Unix()}
		switch {
		case mode&fs.ModeSymlink != 0:
			return refuse(w.field, f.Name, "is a link: archives may hold only files and directories")
		case mode.IsDir() || strings.HasSuffix(f.Name, "/"):
			e.dir = true
		case mode&fs.ModeType != 0:
			return refuse(w.field, f.Name, "is not a regular file or directory")
		}
		if f.Flags&0x1 != 0 {
			return refuse(w.field, f.Name, "is encrypted")
		}
		if f.Method != zip.Store && f.Method != zip.Deflate {
			return refuse(w.field, f.Name, "uses compression method %d: only stored and deflated entries are read", f.Method)
		}
		e, err = w.entry(f.Name, e)
		if err != nil {
			return err
		}
		if e.dir {
			if err := visit(e, f.Name, nil); err != nil {
				return err
			}
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return refuse(w.field, f.Name, "cannot be read: %v", err)
		}
		err = visit(e, f.Name, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Inspect checks every entry of the archive r of size bytes, reading
// every file's bytes (and the archive's, for its digest), and returns
// what it holds; nothing is written. Refusals are INVALID-REQUEST on field
// "workspace", naming the entry.
func Inspect(r io.ReaderAt, size int64, lim Limits) (Manifest, error) {
	w := newWalker("workspace", lim)
	m, err := walk(r, size, w, func(e entry, raw string, body io.Reader) error {
		if body == nil {
			return nil
		}
		_, err := w.copy(raw, nil, body)
		return err
	})
	if err != nil {
		return m, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
		return m, fmt.Errorf("read workspace archive: %w", err)
	}
	m.SHA256 = hex.EncodeToString(h.Sum(nil))
	return m, nil
}
