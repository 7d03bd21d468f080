package workspace

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/sandgatetest"
)

// ent describes one archive entry for the builders below.
type ent struct {
	name string
	typ  byte // tar type flag: '0' file (default), '5' dir, '2' symlink, '1' hard link, '3' char, '4' block, '6' fifo; 's' socket (zip only)
	mode int64
	body string
	link string
}

var epoch = sandgatetest.TarEpoch

// tarOf builds a tar archive of ents.
func tarOf(t testing.TB, ents ...ent) []byte {
	t.Helper()
	entries := make([]sandgatetest.TarEntry, len(ents))
	for i, e := range ents {
		entries[i] = sandgatetest.TarEntry{Name: e.name, Type: e.typ, Mode: e.mode, Body: e.body, Link: e.link}
	}
	return sandgatetest.Tar(t, entries...)
}

func gzipOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipOf builds a zip archive of ents; Unix modes are recorded.
func zipOf(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range ents {
		fh := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: epoch}
		perm := fs.FileMode(e.mode & 0o777)
		if perm == 0 {
			perm = 0o644
		}
		var mode fs.FileMode
		switch e.typ {
		case 0, tar.TypeReg:
		case tar.TypeDir:
			mode = fs.ModeDir
			fh.Method = zip.Store
			if !strings.HasSuffix(fh.Name, "/") {
				fh.Name += "/"
			}
		case tar.TypeSymlink:
			mode = fs.ModeSymlink
			e.body = e.link
		case tar.TypeChar:
			mode = fs.ModeDevice | fs.ModeCharDevice
		case tar.TypeBlock:
			mode = fs.ModeDevice
		case tar.TypeFifo:
			mode = fs.ModeNamedPipe
		case 's':
			mode = fs.ModeSocket
		default:
			t.Fatalf("zip has no entry type %q", e.typ)
		}
		if e.mode&0o4000 != 0 {
			mode |= fs.ModeSetuid
		}
		if e.mode&0o2000 != 0 {
			mode |= fs.ModeSetgid
		}
		if e.mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		fh.SetMode(mode | perm)
		w, err := zw.CreateHeader(fh)
		if err != nil {
			t.Fatalf("zip header %q: %v", e.name, err)
		}
		if _, err := io.WriteString(w, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// wantRefused fails unless err is an INVALID-REQUEST naming the workspace
// whose message holds want.
func wantRefused(t testing.TB, err error, want string) {
	t.Helper()
	wantCode(t, err, sandgate.CodeInvalidRequest, "workspace", want)
}

func wantCode(t testing.TB, err error, code sandgate.ErrorCode, fieldName, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %s %q", code, want)
	}
	var se *sandgate.Error
	if !errors.As(err, &se) {
		t.Fatalf("error %v is not a *sandgate.Error", err)
	}
	if se.Code != code || se.Field != fieldName || !strings.Contains(se.Message, want) {
		t.Fatalf("error = %s (field %q, message %q); want %s, field %q, message with %q", se.Code, se.Field, se.Message, code, fieldName, want)
	}
}

// openRoot makes a fresh directory under a fresh parent and opens it.
// The parent lets a test check that nothing was written beside dst.
func openRoot(t testing.TB) (*os.Root, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

// listTree lists everything under dir (not following symlinks) as
// "path mode size" lines, sorted.
func listTree(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := filepath.ToSlash(rel) + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			line += " " + string(b)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
