package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/sandgate/sandgate"
)

// Owner is who owns what is written: the run's user.
type Owner struct{ UID, GID int }

// Options change how Unpack and WriteFiles write.
type Options struct {
	// Replace lets a file replace a regular file already there (a
	// session's workspace); without it any existing path is an error.
	// A directory, symlink or anything else at a file's path is always
	// an error: nothing there is followed or overwritten.
	Replace bool
}

// fileMode is the mode a file is written with: 0755 when any execute bit
// is set, else 0644. Directories are 0755.
func fileMode(m fs.FileMode) fs.FileMode {
	if m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// writer writes checked entries under a root, and removes what it made
// when asked to undo.
type writer struct {
	root    *os.Root
	owner   Owner
	opts    Options
	created []string
	chown   bool
}

func newWriter(root *os.Root, owner Owner, opts Options) *writer {
	// Chown only does anything when the owner is not who writes; as
	// non-root it would fail for anyone else.
	chown := owner.UID != os.Geteuid() || owner.GID != os.Getegid()
	return &writer{root: root, owner: owner, opts: opts, chown: chown}
}

// mkdirs makes the directories of name (and name itself when dir),
// owned by the owner, refusing a path component that exists and is not a
// directory.
func (w *writer) mkdirs(name string) error {
	if name == "." {
		return nil
	}
	if parent := path.Dir(name); parent != "." {
		if err := w.mkdirs(parent); err != nil {
			return err
		}
	}
	err := w.root.Mkdir(name, 0o755)
	switch {
	case err == nil:
		w.created = append(w.created, name)
		return w.own(name, 0o755)
	case errors.Is(err, fs.ErrExist):
		st, err := w.root.Lstat(name)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", name)
		}
		return nil
	default:
		return err
	}
}

func (w *writer) own(name string, mode fs.FileMode) error {
	if err := w.root.Chmod(name, mode); err != nil {
		return err
	}
	if w.chown {
		return w.root.Lchown(name, w.owner.UID, w.owner.GID)
	}
	return nil
}

// file writes one file from body through copy, which counts and bounds
// its bytes.
func (w *writer) file(name string, mode fs.FileMode, mtime int64, body func(io.Writer) error) error {
	if err := w.mkdirs(path.Dir(name)); err != nil {
		return err
	}
	target := name
	replace := false
	if st, err := w.root.Lstat(name); err == nil {
		if !st.Mode().IsRegular() || !w.opts.Replace {
			return fmt.Errorf("%s exists already", name)
		}
		replace = true
		target = path.Join(path.Dir(name), fmt.Sprintf(".sandgate-%d-%s", time.Now().UnixNano(), path.Base(name)))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := w.root.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if !replace {
		w.created = append(w.created, name)
	}
	err = body(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.own(target, fileMode(mode))
	}
	if err == nil && mtime > 0 {
		t := time.Unix(mtime, 0)
		err = w.root.Chtimes(target, t, t)
	}
	if err == nil && replace {
		err = w.root.Rename(target, name)
	}
	if err != nil && replace {
		w.root.Remove(target)
	}
	return err
}

// undo removes what the writer made, deepest first.
func (w *writer) undo() {
	for i := len(w.created) - 1; i >= 0; i-- {
		w.root.Remove(w.created[i])
	}
	w.created = nil
}

// Unpack checks the archive r of size bytes again, entry by entry (an
// earlier Inspect is not trusted: the bytes could differ), and writes its
// directories and files under dst, owned by owner: files 0644, or 0755
// when the entry had an execute bit; directories 0755; modification times
// kept. Nothing that exists is followed or overwritten (see Options). On
// any error everything it made is removed. Refusals are INVALID-REQUEST on
// field "workspace" naming the entry; a failure to write is an error
// naming the path.
func Unpack(ctx context.Context, r io.ReaderAt, size int64, dst *os.Root, owner Owner, lim Limits, opts ...Options) (Manifest, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	w := newWalker("workspace", lim)
	wr := newWriter(dst, owner, o)
	h := sha256.New()
	m, err := walk(io.NewSectionReader(r, 0, size), size, w, func(e entry, raw string, body io.Reader) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.dir {
			if err := wr.mkdirs(e.name); err != nil {
				return fmt.Errorf("unpack %s: %w", e.name, err)
			}
			return nil
		}
		var copyErr error
		err := wr.file(e.name, e.mode, e.mtime, func(f io.Writer) error {
			_, copyErr = w.copy(raw, f, body)
			return copyErr
		})
		if copyErr != nil {
			return copyErr
		}
		if err != nil {
			return fmt.Errorf("unpack %s: %w", e.name, err)
		}
		return nil
	})
	if err != nil {
		wr.undo()
		return m, err
	}
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
		wr.undo()
		return m, fmt.Errorf("read workspace archive: %w", err)
	}
	m.SHA256 = hex.EncodeToString(h.Sum(nil))
	return m, nil
}

// WriteFiles writes a run's inline files under dst, owned by owner, with
// the same rules as Unpack: paths checked, parents made, nothing followed
// or overwritten, at most lim's entries and bytes, everything removed
// again on an error. Refusals name the field files[i].
func WriteFiles(dst *os.Root, files []sandgate.File, owner Owner, lim Limits, opts ...Options) (Manifest, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	w := newWalker("files", lim)
	wr := newWriter(dst, owner, o)
	for i, f := range files {
		w.field = fmt.Sprintf("files[%d]", i)
		mode := fs.FileMode(0o644)
		if f.Mode != nil {
			mode = fs.FileMode(*f.Mode) & fs.ModePerm
		}
		e, err := w.entry(f.Path, entry{mode: mode})
		if err == nil && e.name == "." {
			err = refuse(w.field, f.Path, "names the workspace itself")
		}
		if err != nil {
			wr.undo()
			return w.m, err
		}
		content := f.Bytes()
		var copyErr error
		err = wr.file(e.name, mode, 0, func(dst io.Writer) error {
			_, copyErr = w.copy(f.Path, dst, bytesReader(content))
			return copyErr
		})
		if copyErr != nil {
			wr.undo()
			return w.m, copyErr
		}
		if err != nil {
			wr.undo()
			return w.m, fmt.Errorf("write %s: %w", e.name, err)
		}
	}
	w.m.Format = "files"
	return w.m, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
