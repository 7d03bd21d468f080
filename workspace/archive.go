package workspace

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"math"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
)

// field is the request field archive errors name.
const field = "workspace"

// The archive formats Inspect recognises, by their first bytes.
const (
	FormatTar   = "tar"
	FormatTarGz = "tar.gz"
	FormatZip   = "zip"
	FormatFiles = "files"
)

// Inspect checks every entry of the workspace archive in r (size bytes:
// tar, tar.gz or zip, told apart by their first bytes) against the rules
// of docs/workspaces.md and lim, and returns its manifest. It writes
// nothing. A refused archive is an INVALID-REQUEST *sandgate.Error with
// Field "workspace" whose message names the entry at fault.
func Inspect(r io.ReaderAt, size int64, lim Limits) (Manifest, error) {
	return scan(context.Background(), r, size, lim, discard{})
}

// entry is one archive entry or inline file, its name already checked.
type entry struct {
	field string // the request field errors name
	raw   string // the name as given
	path  string // the clean relative path, "." for the root
	dir   bool
	size  int64 // declared content size
	perm  fs.FileMode
	mtime time.Time
	body  io.Reader // a file's content
}

// entrySource yields the entries of one archive format. next returns
// io.EOF after the last entry; finish checks what follows it.
type entrySource interface {
	next() (*entry, error)
	finish() error
}

// sink receives checked entries: Inspect discards them, Unpack writes.
type sink interface {
	dir(e *entry) error
	file(e *entry) (io.Writer, error)
	fileDone(e *entry) error
}

type discard struct{}

func (discard) dir(*entry) error               { return nil }
func (discard) file(*entry) (io.Writer, error) { return io.Discard, nil }
func (discard) fileDone(*entry) error          { return nil }

// copyBufSize is the one buffer a scan copies content through.
const copyBufSize = 32 << 10

// scan is Inspect and Unpack's one pass over an archive: every rule is
// checked here, entry by entry, before the sink sees the entry.
func scan(ctx context.Context, r io.ReaderAt, size int64, lim Limits, s sink) (Manifest, error) {
	lim = lim.withDefaults()
	if size < 0 {
		return Manifest{}, sandgate.FieldError(field, "archive size is negative")
	}
	sum, err := hashArchive(ctx, r, size)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{SHA256: sum, ArchiveBytes: size}
	src, format, err := openArchive(r, size, lim)
	if err != nil {
		return Manifest{}, err
	}
	m.Format = format
	seen := newPathSet()
	buf := make([]byte, copyBufSize)
	for {
		if err := ctx.Err(); err != nil {
			return Manifest{}, err
		}
		e, err := src.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Manifest{}, err
		}
		m.Entries++
		if m.Entries > lim.MaxEntries {
			return Manifest{}, entryError(field, e.raw, "the archive has more than %d entries", lim.MaxEntries)
		}
		if msg := seen.add(e.path, e.dir); msg != "" {
			return Manifest{}, entryError(field, e.raw, "%s", msg)
		}
		if e.path == "." {
			continue // "./": the workspace itself
		}
		if e.dir {
			m.Dirs++
			if err := s.dir(e); err != nil {
				return Manifest{}, err
			}
			continue
		}
		m.Files++
		n, err := copyEntry(ctx, s, e, lim.MaxBytes-m.UnpackedBytes, lim.MaxBytes, buf)
		if c, ok := e.body.(io.Closer); ok {
			c.Close() // a zip entry's decompressor goes back to its pool
		}
		if err != nil {
			return Manifest{}, err
		}
		m.UnpackedBytes += n
	}
	if err := src.finish(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// copyEntry hands a file's content to the sink, reading at most budget+1
// bytes whatever its header said, and returns how many it read.
func copyEntry(ctx context.Context, s sink, e *entry, budget, max int64, buf []byte) (int64, error) {
	if e.size > max {
		return 0, entryError(e.field, e.raw, "the file is larger than the workspace limit of %d bytes", max)
	}
	if e.size > budget {
		return 0, entryError(e.field, e.raw, "the archive unpacks to more than %d bytes", max)
	}
	w, err := s.file(e)
	if err != nil {
		return 0, err
	}
	var n int64
	body := io.LimitReader(e.body, budget+1)
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, rerr := body.Read(buf)
		n += int64(k)
		if n > budget {
			if n > max {
				return n, entryError(e.field, e.raw, "the file is larger than the workspace limit of %d bytes", max)
			}
			return n, entryError(e.field, e.raw, "the archive unpacks to more than %d bytes", max)
		}
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, fsError(e.field, e.raw, werr)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return n, readError(at(e.raw), rerr)
		}
	}
	if n != e.size {
		return n, entryError(e.field, e.raw, "the archive is corrupt: the content is %d bytes, its header says %d", n, e.size)
	}
	return n, s.fileDone(e)
}

// hashArchive returns the hex SHA-256 of the archive's bytes.
func hashArchive(ctx context.Context, r io.ReaderAt, size int64) (string, error) {
	h := sha256.New()
	buf := make([]byte, copyBufSize)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		k := int(min(int64(len(buf)), size-off))
		n, err := r.ReadAt(buf[:k], off)
		h.Write(buf[:n])
		off += int64(n)
		if n < k {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", sandgate.WrapError(sandgate.CodeInvalidRequest, err, "the archive could not be read")
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// errStreamCap ends a decompressed tar stream that grew past its bound.
var errStreamCap = errors.New("decompressed stream past its bound")

// streamCap bounds a tar stream's bytes, headers and padding included:
// the content limit plus 8 KiB per entry plus 1 MiB.
func streamCap(lim Limits) int64 {
	return lim.MaxBytes + int64(lim.MaxEntries+2)*8192 + 1<<20
}

// readError is the error for an entry whose content could not be read.
// where says where in the archive ("at entry \"x\"", "after entry ...").
func readError(where string, err error) error {
	if errors.Is(err, errStreamCap) {
		e := sandgate.WrapError(sandgate.CodeInvalidRequest, err, "the archive's stream is larger than its limits allow%s", where)
		e.Field = field
		return e
	}
	return corrupt(where, err)
}

func corrupt(where string, err error) error {
	e := sandgate.WrapError(sandgate.CodeInvalidRequest, err, "the archive is corrupt%s: %s", where, cause(err))
	e.Field = field
	return e
}

// cause is a short client-facing reason: the library's own error text.
func cause(err error) string {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "it ends too early"
	case errors.Is(err, gzip.ErrChecksum), errors.Is(err, zip.ErrChecksum):
		return "checksum mismatch"
	case errors.Is(err, gzip.ErrHeader):
		return "invalid gzip header or data after the gzip stream"
	}
	return err.Error()
}

// at and after name the entry where an archive-wide problem showed.
func at(name string) string { return " at " + quoteEntry(name) }

func after(name string) string {
	if name == "" {
		return " in its first header"
	}
	return " after " + quoteEntry(name)
}

func quote(s string) string { return strconv.Quote(s) }

// openArchive tells the format by its first bytes and opens its entries.
func openArchive(r io.ReaderAt, size int64, lim Limits) (entrySource, string, error) {
	head := make([]byte, 512)
	n, err := r.ReadAt(head, 0)
	if n < len(head) && err != nil && err != io.EOF {
		return nil, "", sandgate.WrapError(sandgate.CodeInvalidRequest, err, "the archive could not be read")
	}
	head = head[:min(n, int(max(size, 0)))]
	switch {
	case len(head) == 0:
		return nil, "", sandgate.FieldError(field, "the archive is empty")
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		src, err := openTarGz(r, size, lim)
		return src, FormatTarGz, err
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		src, err := openZip(r, size, lim)
		return src, FormatZip, err
	case isTarBlock(head):
		return newTarEntries(io.NewSectionReader(r, 0, size), nil, lim), FormatTar, nil
	}
	return nil, "", sandgate.FieldError(field, "unsupported archive format%s: send tar, tar.gz or zip", knownFormat(head))
}

// isTarBlock reports whether b starts with a ustar header (POSIX or GNU)
// or a zero block (an empty tar).
func isTarBlock(b []byte) bool {
	if len(b) < 512 {
		return false
	}
	return string(b[257:262]) == "ustar" || bytes.Equal(b[:512], make([]byte, 512))
}

func knownFormat(head []byte) string {
	for _, f := range []struct{ magic, name string }{
		{"BZh", "bzip2"}, {"\xfd7zXZ\x00", "xz"}, {"\x28\xb5\x2f\xfd", "zstd"},
		{"7z\xbc\xaf\x27\x1c", "7z"}, {"Rar!\x1a\x07", "rar"}, {"\x1f\x9d", "compress"},
	} {
		if bytes.HasPrefix(head, []byte(f.magic)) {
			return " (" + f.name + ")"
		}
	}
	return ""
}

// countReader counts the bytes of a decompressed stream and fails past cap.
type countReader struct {
	r   io.Reader
	n   int64
	cap int64
}

func (c *countReader) Read(p []byte) (int, error) {
	if c.n >= c.cap {
		return 0, errStreamCap
	}
	if int64(len(p)) > c.cap-c.n {
		p = p[:c.cap-c.n]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// tarEntries reads a tar stream, plain or from inside a gzip stream.
type tarEntries struct {
	stream io.Reader
	tr     *tar.Reader
	gz     *gzip.Reader
	max    int64
	last   string
}

func newTarEntries(r io.Reader, gz *gzip.Reader, lim Limits) *tarEntries {
	c := &countReader{r: r, cap: streamCap(lim)}
	return &tarEntries{stream: c, tr: tar.NewReader(c), gz: gz, max: lim.MaxBytes}
}

func openTarGz(r io.ReaderAt, size int64, lim Limits) (entrySource, error) {
	gz, err := gzip.NewReader(bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 64<<10))
	if err != nil {
		return nil, corrupt("", err)
	}
	c := &countReader{r: gz, cap: streamCap(lim)}
	br := bufio.NewReaderSize(c, 4096)
	head, err := br.Peek(512)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, readError("", err)
	}
	if !isTarBlock(head) {
		return nil, sandgate.FieldError(field, "unsupported archive format: the gzip stream does not hold a tar archive")
	}
	return &tarEntries{stream: br, tr: tar.NewReader(br), gz: gz, max: lim.MaxBytes}, nil
}

func (t *tarEntries) next() (*entry, error) {
	h, err := t.tr.Next()
	if errors.Is(err, tar.ErrInsecurePath) && h != nil {
		err = nil // with GODEBUG=tarinsecurepath=0; the checks below judge the name
	}
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		return nil, readError(after(t.last), err)
	}
	t.last = h.Name
	e := &entry{field: field, raw: h.Name, size: h.Size, mtime: clampTime(h.ModTime), body: t.tr}
	switch h.Typeflag {
	case tar.TypeReg, '\x00':
	case tar.TypeDir:
		e.dir = true
	case tar.TypeSymlink:
		return nil, entryError(field, h.Name, "symbolic links are refused (to %s)", quote(shorten(h.Linkname)))
	case tar.TypeLink:
		return nil, entryError(field, h.Name, "hard links are refused (to %s)", quote(shorten(h.Linkname)))
	case tar.TypeChar, tar.TypeBlock:
		return nil, entryError(field, h.Name, "device nodes are refused")
	case tar.TypeFifo:
		return nil, entryError(field, h.Name, "FIFOs are refused")
	case tar.TypeGNUSparse:
		return nil, entryError(field, h.Name, "sparse files are refused")
	default:
		return nil, entryError(field, h.Name, "entry type %s is not supported: only files and directories are", quote(string(h.Typeflag)))
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return nil, entryError(field, h.Name, "sparse files are refused")
		}
	}
	if err := checkName(e); err != nil {
		return nil, err
	}
	if h.Mode&0o7000 != 0 {
		return nil, entryError(field, h.Name, "setuid, setgid and sticky bits are refused")
	}
	e.perm = fs.FileMode(h.Mode & 0o777)
	if e.dir && h.Size != 0 {
		return nil, entryError(field, h.Name, "a directory entry has content")
	}
	return e, nil
}

// finish accepts only zero bytes (record padding) after the end of the
// tar archive, and, for tar.gz, reads the gzip stream to its end so that
// its checksum is verified and nothing but further gzip members follows.
func (t *tarEntries) finish() error {
	buf := make([]byte, copyBufSize)
	for {
		n, err := t.stream.Read(buf)
		for _, b := range buf[:n] {
			if b != 0 {
				return sandgate.FieldError(field, "the archive has data after its end")
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return readError(" after its last entry", err)
		}
	}
}

func checkName(e *entry) error {
	if len(e.raw) > MaxPathBytes {
		return entryError(e.field, e.raw, "path is longer than %d bytes", MaxPathBytes)
	}
	p, msg := cleanRel(e.raw)
	if msg != "" {
		return entryError(e.field, e.raw, "%s", msg)
	}
	e.path = p
	return nil
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// clampTime keeps an entry's mtime when it lies in [1970, 2100) and
// replaces anything else (zero, negative, far future) by the Unix epoch.
func clampTime(t time.Time) time.Time {
	if t.Before(time.Unix(0, 0)) || !t.Before(maxTime) {
		return time.Unix(0, 0).UTC()
	}
	return t
}

var maxTime = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

// zipEntries reads a zip archive's central directory.
type zipEntries struct {
	files []*zip.File
	i     int
}

// zip's general-purpose flags for encryption: traditional, strong, and an
// encrypted central directory.
const zipEncrypted = 0x1 | 0x40 | 0x2000

func openZip(r io.ReaderAt, size int64, lim Limits) (entrySource, error) {
	records, err := zipEnd(r, size)
	if err != nil {
		return nil, err
	}
	if records > uint64(lim.MaxEntries) {
		return nil, sandgate.FieldError(field, "the archive has more than %d entries (its directory lists %d)", lim.MaxEntries, records)
	}
	zr, err := zip.NewReader(r, size)
	if errors.Is(err, zip.ErrInsecurePath) && zr != nil {
		err = nil // with GODEBUG=zipinsecurepath=0; each name is judged below
	}
	if err != nil {
		return nil, corrupt("", err)
	}
	return &zipEntries{files: zr.File}, nil
}

// zipEnd finds the end of central directory record as archive/zip does
// (the last signature whose comment fits) and refuses bytes after the
// record and its comment. It returns the number of records the directory
// claims (from the zip64 record when there is one).
func zipEnd(r io.ReaderAt, size int64) (uint64, error) {
	const endLen, maxComment = 22, 65535
	tail := min(size, endLen+maxComment)
	b := make([]byte, tail)
	if _, err := r.ReadAt(b, size-tail); err != nil && err != io.EOF {
		return 0, corrupt("", err)
	}
	at := -1
	for i := len(b) - endLen; i >= 0; i-- {
		if string(b[i:i+4]) == "PK\x05\x06" && i+endLen+int(binary.LittleEndian.Uint16(b[i+20:])) <= len(b) {
			at = i
			break
		}
	}
	if at < 0 {
		return 0, corrupt("", zip.ErrFormat)
	}
	if at+endLen+int(binary.LittleEndian.Uint16(b[at+20:])) != len(b) {
		return 0, sandgate.FieldError(field, "the archive has data after its end")
	}
	records := uint64(binary.LittleEndian.Uint16(b[at+10:]))
	if records != 0xffff {
		return records, nil
	}
	// zip64: a locator just before the record points at the zip64 record.
	locAt := size - tail + int64(at) - 20
	if locAt < 0 {
		return 0, corrupt("", zip.ErrFormat)
	}
	loc := make([]byte, 20)
	if _, err := r.ReadAt(loc, locAt); err != nil || string(loc[:4]) != "PK\x06\x07" {
		return records, nil // not zip64 after all: 65535 records
	}
	off := binary.LittleEndian.Uint64(loc[8:])
	rec := make([]byte, 56)
	if off > uint64(size) || off > math.MaxInt64-56 {
		return 0, corrupt("", zip.ErrFormat)
	}
	if _, err := r.ReadAt(rec, int64(off)); err != nil || string(rec[:4]) != "PK\x06\x06" {
		return 0, corrupt("", zip.ErrFormat)
	}
	return binary.LittleEndian.Uint64(rec[32:]), nil
}

func (z *zipEntries) next() (*entry, error) {
	if z.i >= len(z.files) {
		return nil, io.EOF
	}
	f := z.files[z.i]
	z.i++
	e := &entry{field: field, raw: f.Name, mtime: clampTime(f.Modified)}
	mode := f.Mode()
	switch {
	case mode&fs.ModeSymlink != 0:
		return nil, entryError(field, f.Name, "symbolic links are refused")
	case mode&fs.ModeDevice != 0, mode&fs.ModeCharDevice != 0:
		return nil, entryError(field, f.Name, "device nodes are refused")
	case mode&fs.ModeNamedPipe != 0:
		return nil, entryError(field, f.Name, "FIFOs are refused")
	case mode&fs.ModeSocket != 0:
		return nil, entryError(field, f.Name, "sockets are refused")
	case mode&fs.ModeIrregular != 0:
		return nil, entryError(field, f.Name, "entry type is not supported: only files and directories are")
	}
	e.dir = mode.IsDir()
	if err := checkName(e); err != nil {
		return nil, err
	}
	if mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		return nil, entryError(field, f.Name, "setuid, setgid and sticky bits are refused")
	}
	if f.Flags&zipEncrypted != 0 {
		return nil, entryError(field, f.Name, "encrypted entries are refused")
	}
	if f.Method != zip.Store && f.Method != zip.Deflate {
		return nil, entryError(field, f.Name, "compression method %d is not supported: only stored and deflated entries are", f.Method)
	}
	if f.UncompressedSize64 > math.MaxInt64 {
		return nil, entryError(field, f.Name, "the file is larger than the workspace limit")
	}
	e.size = int64(f.UncompressedSize64)
	e.perm = mode.Perm()
	if e.dir {
		if e.size != 0 {
			return nil, entryError(field, f.Name, "a directory entry has content")
		}
		return e, nil
	}
	body, err := f.Open()
	if err != nil {
		return nil, corrupt(at(f.Name), err)
	}
	e.body = body
	return e, nil
}

func (z *zipEntries) finish() error { return nil }

// pathSet finds duplicate paths, and paths that are a file in one entry
// and a directory (or a parent directory) in another.
type pathSet map[string]uint8

const (
	seenFile uint8 = iota + 1
	seenDir
	seenParent // a directory only as some entry's parent
)

func newPathSet() pathSet { return pathSet{} }

// add records p and returns why it clashes with an earlier entry, or "".
func (s pathSet) add(p string, dir bool) string {
	switch k := s[p]; {
	case k == seenFile || k == seenDir:
		return "the path appears more than once"
	case k == seenParent && !dir:
		return "the path is a file here but a directory of an earlier entry"
	}
	if dir {
		s[p] = seenDir
	} else {
		s[p] = seenFile
	}
	for a := path.Dir(p); a != "." && p != "."; a = path.Dir(a) {
		switch s[a] {
		case seenFile:
			return "its parent " + quote(a) + " is a file in the archive"
		case seenDir, seenParent:
			return ""
		}
		s[a] = seenParent
	}
	return ""
}
