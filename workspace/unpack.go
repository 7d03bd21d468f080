package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"time"

	"github.com/sandgate/sandgate"
)

// Unpack checks the archive in r as Inspect does and writes its
// directories and regular files under dst, owned by owner. It is
// UnpackWith without Replace.
func Unpack(ctx context.Context, r io.ReaderAt, size int64, dst *os.Root, owner Owner, lim Limits) (Manifest, error) {
	return UnpackWith(ctx, r, size, dst, Options{Owner: owner, Limits: lim})
}

// UnpackWith checks the whole archive first (nothing is written for an
// archive Inspect refuses), then reads it again and checks every entry
// again as it writes it: the bytes behind r are never trusted to be those
// checked. With opt.Checked the first pass is skipped and the bytes read
// must hash to it. It writes only directories (mode 0755) and regular files (0755
// when the entry has any execute bit, else 0644), each made new with
// O_CREATE|O_EXCL in a parent directory it has verified is a real
// directory, so no symlink already under dst is ever followed. On any
// error everything it made is removed. Errors are *sandgate.Error:
// INVALID-REQUEST for a refused archive, CONFLICT for a path that exists
// already under dst, TOO-LARGE for a full file system, INTERNAL otherwise.
func UnpackWith(ctx context.Context, r io.ReaderAt, size int64, dst *os.Root, opt Options) (Manifest, error) {
	var checked Manifest
	if opt.Checked == "" {
		var err error
		if checked, err = scan(ctx, r, size, opt.Limits, discard{}); err != nil {
			return Manifest{}, err
		}
	}
	w := newWriter(dst, opt)
	defer w.close()
	m, err := scan(ctx, r, size, opt.Limits, w)
	if err == nil && (opt.Checked == "" && m != checked || opt.Checked != "" && m.SHA256 != opt.Checked) {
		err = sandgate.FieldError(field, "the archive changed while it was unpacked")
	}
	if err == nil {
		err = w.commit()
	}
	if err != nil {
		return Manifest{}, w.abort(err)
	}
	return m, nil
}

// writer is the sink that writes checked entries under a root. It holds
// each directory it uses open (pinned): a file is created by its base name
// in its pinned parent, so no path it writes is resolved through a
// component that could have been swapped for a symlink.
type writer struct {
	top     *os.Root
	opt     Options
	chown   bool
	pinned  map[string]*os.Root // open directories by clean path
	made    map[string]bool     // directories this writer created
	created []madeEntry         // what to remove on failure, in order
	renames []madeEntry         // Replace: temporary files to rename at commit
	times   []dirTime           // explicit directories' mtimes, set at commit

	cur  *os.Root // the open file's parent
	open *os.File
	name string // the open file's name in cur
}

type madeEntry struct {
	dir, name string // parent's clean path and base name
	final     string // for a rename: the name it takes
	raw       string // the entry, for errors
	field     string
}

type dirTime struct {
	path string
	t    time.Time
}

// maxPinned bounds the directories a writer holds open at once.
const maxPinned = 64

func newWriter(top *os.Root, opt Options) *writer {
	o := opt.Owner
	self := (o.UID == -1 || o.UID == os.Getuid()) && (o.GID == -1 || o.GID == os.Getgid())
	return &writer{top: top, opt: opt, chown: !self, pinned: map[string]*os.Root{}, made: map[string]bool{}}
}

// dirMode and fileMode are the modes everything written gets.
const dirMode fs.FileMode = 0o755

func fileMode(perm fs.FileMode) fs.FileMode {
	if perm&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// openDir returns the pinned directory p, making it (and its parents)
// when create is set. A component that is a symlink or not a directory,
// or that changes between its check and its opening, is an error.
func (w *writer) openDir(p string, create bool, e *entry) (*os.Root, error) {
	if p == "." {
		return w.top, nil
	}
	if d, ok := w.pinned[p]; ok {
		return d, nil
	}
	parent, err := w.openDir(path.Dir(p), create, e)
	if err != nil {
		return nil, err
	}
	base := path.Base(p)
	fi, err := parent.Lstat(base)
	made := false
	if errors.Is(err, fs.ErrNotExist) && create {
		if err := parent.Mkdir(base, 0o700); err != nil {
			return nil, fsError(e.field, e.raw, err)
		}
		w.created = append(w.created, madeEntry{dir: path.Dir(p), name: base})
		w.made[p] = true
		made = true
		fi, err = parent.Lstat(base)
	}
	if err != nil {
		return nil, fsError(e.field, e.raw, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, conflict(e, "its parent %s is a symbolic link", quote(p))
	}
	if !fi.IsDir() {
		return nil, conflict(e, "its parent %s is not a directory", quote(p))
	}
	d, err := parent.OpenRoot(base)
	if err != nil {
		return nil, fsError(e.field, e.raw, err)
	}
	if st, err := d.Stat("."); err != nil || !os.SameFile(fi, st) {
		d.Close()
		return nil, conflict(e, "its parent %s changed while it was written", quote(p))
	}
	if made {
		if err := w.own(d, "."); err != nil {
			d.Close()
			return nil, fsError(e.field, e.raw, err)
		}
		if err := d.Chmod(".", dirMode); err != nil {
			d.Close()
			return nil, fsError(e.field, e.raw, err)
		}
	}
	if len(w.pinned) >= maxPinned {
		w.unpin()
	}
	w.pinned[p] = d
	return d, nil
}

func (w *writer) own(d *os.Root, name string) error {
	if !w.chown {
		return nil
	}
	return d.Lchown(name, w.opt.Owner.UID, w.opt.Owner.GID)
}

func (w *writer) unpin() {
	for p, d := range w.pinned {
		d.Close()
		delete(w.pinned, p)
	}
}

func conflict(e *entry, format string, args ...any) error {
	err := sandgate.Errorf(sandgate.CodeConflict, format, args...)
	err.Message = quoteEntry(e.raw) + ": " + err.Message
	err.Field = e.field
	return err
}

func (w *writer) dir(e *entry) error {
	if _, err := w.openDir(e.path, true, e); err != nil {
		return err
	}
	if w.made[e.path] {
		w.times = append(w.times, dirTime{e.path, e.mtime})
	}
	return nil
}

func (w *writer) file(e *entry) (io.Writer, error) {
	dir, base := path.Dir(e.path), path.Base(e.path)
	parent, err := w.openDir(dir, true, e)
	if err != nil {
		return nil, err
	}
	name := base
	if w.opt.Replace {
		fi, err := parent.Lstat(base)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fsError(e.field, e.raw, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return nil, conflict(e, "a symbolic link exists at this path")
		case fi.IsDir():
			return nil, conflict(e, "a directory exists at this path")
		case !fi.Mode().IsRegular():
			return nil, conflict(e, "a special file exists at this path")
		}
		name = tempName()
	}
	f, err := parent.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fsError(e.field, e.raw, err)
	}
	w.created = append(w.created, madeEntry{dir: dir, name: name})
	if w.chown {
		if err := f.Chown(w.opt.Owner.UID, w.opt.Owner.GID); err != nil {
			f.Close()
			return nil, fsError(e.field, e.raw, err)
		}
	}
	if w.opt.Replace {
		w.renames = append(w.renames, madeEntry{dir: dir, name: name, final: base, raw: e.raw, field: e.field})
	}
	w.cur, w.open, w.name = parent, f, name
	return f, nil
}

func (w *writer) fileDone(e *entry) error {
	f := w.open
	w.open = nil
	err := f.Chmod(fileMode(e.perm))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && !e.mtime.IsZero() { // inline files keep the time they were written
		err = w.cur.Chtimes(w.name, e.mtime, e.mtime)
	}
	if err != nil {
		return fsError(e.field, e.raw, err)
	}
	return nil
}

// commit renames Replace's temporary files into place and sets the
// explicit directories' mtimes (last, since writing in a directory
// changes its mtime).
func (w *writer) commit() error {
	for i, r := range w.renames {
		e := &entry{field: r.field, raw: r.raw}
		d, err := w.openDir(r.dir, false, e)
		if err != nil {
			return err
		}
		_, statErr := d.Lstat(r.final)
		if err := d.Rename(r.name, r.final); err != nil {
			return fsError(r.field, r.raw, err)
		}
		if errors.Is(statErr, fs.ErrNotExist) {
			w.created = append(w.created, madeEntry{dir: r.dir, name: r.final})
		}
		w.renames[i].name = ""
	}
	for i := len(w.times) - 1; i >= 0; i-- {
		t := w.times[i]
		d, err := w.openDir(t.path, false, &entry{field: field, raw: t.path})
		if err != nil {
			return err
		}
		if err := d.Chtimes(".", t.t, t.t); err != nil {
			return fsError(field, t.path, err)
		}
	}
	return nil
}

// abort removes, newest first, everything the writer made, and returns
// err, or an INTERNAL error carrying both when something could not be
// removed.
func (w *writer) abort(err error) error {
	if w.open != nil {
		w.open.Close()
		w.open = nil
	}
	var left []error
	for i := len(w.created) - 1; i >= 0; i-- {
		c := w.created[i]
		d, derr := w.openDir(c.dir, false, &entry{field: field, raw: c.dir})
		if errors.Is(derr, fs.ErrNotExist) {
			continue
		}
		if derr == nil {
			derr = d.RemoveAll(c.name)
		}
		if derr != nil {
			left = append(left, derr)
		}
	}
	if len(left) > 0 {
		return sandgate.WrapError(sandgate.CodeInternal, errors.Join(append([]error{err}, left...)...),
			"the workspace could not be cleaned up after a failed write: %s", sandgate.ErrorMessageOf(err))
	}
	return err
}

func (w *writer) close() {
	w.unpin()
}

// tempName is a name for Replace's temporary files that no entry collides with.
func tempName() string {
	var b [12]byte
	rand.Read(b[:])
	return ".sandgate-tmp-" + hex.EncodeToString(b[:])
}
