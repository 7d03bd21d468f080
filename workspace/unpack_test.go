package workspace

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sandgate/sandgate"
)

// realistic is a small project tree with the modes archives carry.
var realistic = []ent{
	{name: "./", typ: tar.TypeDir},
	{name: "src/", typ: tar.TypeDir, mode: 0o700},
	{name: "src/main.py", mode: 0o600, body: "import sys\nsys.exit(3)\n"},
	{name: "src/pkg/util.py", mode: 0o640, body: "X = 1\n"},
	{name: "bin/run.sh", mode: 0o744, body: "#!/bin/sh\necho hi\n"},
	{name: "data/", typ: tar.TypeDir, mode: 0o777},
	{name: "data/empty", mode: 0o666, body: ""},
	{name: "README", mode: 0o444, body: "read me\n"},
}

var realisticTree = []string{
	"README -rw-r--r-- read me\n",
	"bin drwxr-xr-x",
	"bin/run.sh -rwxr-xr-x #!/bin/sh\necho hi\n",
	"data drwxr-xr-x",
	"data/empty -rw-r--r-- ",
	"src drwxr-xr-x",
	"src/main.py -rw-r--r-- import sys\nsys.exit(3)\n",
	"src/pkg drwxr-xr-x",
	"src/pkg/util.py -rw-r--r-- X = 1\n",
}

// TestUnpackRealisticTree unpacks the same tree from each format and
// checks contents, modes, mtimes and (as root) ownership.
func TestUnpackRealisticTree(t *testing.T) {
	owner := Owner{UID: os.Getuid(), GID: os.Getgid()}
	if os.Getuid() == 0 {
		owner = Owner{UID: 10001, GID: 10002}
	}
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			b := f.build(t, realistic...)
			dst, dir := openRoot(t)
			m, err := Unpack(t.Context(), bytes.NewReader(b), int64(len(b)), dst, owner, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if m.Files != 5 || m.Dirs != 2 || m.Entries != 8 || m.UnpackedBytes != 55 || m.Format != f.name {
				t.Errorf("manifest = %+v", m)
			}
			if diff := cmp.Diff(realisticTree, listTree(t, dir)); diff != "" {
				t.Errorf("tree (-want +got):\n%s", diff)
			}
			filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
				if p == dir {
					return nil
				}
				st := fi.Sys().(*syscall.Stat_t)
				if int(st.Uid) != owner.UID || int(st.Gid) != owner.GID {
					t.Errorf("%s owned by %d:%d; want %d:%d", p, st.Uid, st.Gid, owner.UID, owner.GID)
				}
				if fi.Mode().IsRegular() && !fi.ModTime().Equal(epoch) {
					t.Errorf("%s mtime %v; want %v", p, fi.ModTime(), epoch)
				}
				return nil
			})
			if fi, _ := os.Stat(filepath.Join(dir, "src")); !fi.ModTime().Equal(epoch) {
				t.Errorf("src mtime %v; want the entry's %v", fi.ModTime(), epoch)
			}
		})
	}
}

// TestUnpackLeavesNothingBehind makes Unpack fail after it has written
// part of a workspace, in several ways, and expects exactly what was
// there before.
func TestUnpackLeavesNothingBehind(t *testing.T) {
	outside := t.TempDir()
	cases := []struct {
		name  string
		plant func(t *testing.T, dir string)
		ents  []ent
		code  sandgate.ErrorCode
		want  string
	}{
		{
			name:  "existing file",
			plant: func(t *testing.T, dir string) { mkfile(t, filepath.Join(dir, "z/keep"), "old") },
			ents:  []ent{{name: "a/b/c", body: "new"}, {name: "a/d", body: "new"}, {name: "z/keep", body: "new"}},
			code:  sandgate.CodeConflict, want: `entry "z/keep": something already exists at this path`,
		},
		{
			name:  "planted symlink parent",
			plant: func(t *testing.T, dir string) { mksymlink(t, outside, filepath.Join(dir, "link")) },
			ents:  []ent{{name: "a/x", body: "new"}, {name: "link/evil", body: "pwned"}},
			code:  sandgate.CodeConflict, want: `entry "link/evil": its parent "link" is a symbolic link`,
		},
		{
			name: "planted symlink file",
			plant: func(t *testing.T, dir string) {
				mksymlink(t, filepath.Join(outside, "target"), filepath.Join(dir, "evil"))
			},
			ents: []ent{{name: "a/x", body: "new"}, {name: "evil", body: "pwned"}},
			code: sandgate.CodeConflict, want: `entry "evil": something already exists`,
		},
		{
			name:  "file where a directory is",
			plant: func(t *testing.T, dir string) { mkfile(t, filepath.Join(dir, "d/f"), "old") },
			ents:  []ent{{name: "a/x", body: "new"}, {name: "d", body: "new"}},
			code:  sandgate.CodeConflict, want: `entry "d": something already exists`,
		},
		{
			name:  "parent is a file",
			plant: func(t *testing.T, dir string) { mkfile(t, filepath.Join(dir, "f"), "old") },
			ents:  []ent{{name: "a/x", body: "new"}, {name: "f/x", body: "new"}},
			code:  sandgate.CodeConflict, want: `its parent "f" is not a directory`,
		},
	}
	for _, f := range formats {
		for _, c := range cases {
			t.Run(f.name+"/"+c.name, func(t *testing.T) {
				dst, dir := openRoot(t)
				c.plant(t, dir)
				before := listTree(t, dir)
				b := f.build(t, c.ents...)
				_, err := Unpack(t.Context(), bytes.NewReader(b), int64(len(b)), dst, Owner{-1, -1}, Limits{})
				wantCode(t, err, c.code, "workspace", c.want)
				if diff := cmp.Diff(before, listTree(t, dir)); diff != "" {
					t.Errorf("Unpack left changes (-before +after):\n%s", diff)
				}
				if got := listTree(t, outside); len(got) != 0 {
					t.Errorf("Unpack wrote outside: %q", got)
				}
			})
		}
	}
}

// swapReader serves first until after bytes have been read from it, then
// second: an archive whose bytes change between Unpack's check and its
// write.
type swapReader struct {
	first, second []byte
	after, read   int
}

func (s *swapReader) ReadAt(p []byte, off int64) (int, error) {
	b := s.first
	if s.read >= s.after {
		b = s.second
	}
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	s.read += n
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

type countingReaderAt struct {
	r io.ReaderAt
	n int
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += n
	return n, err
}

// TestUnpackRechecksWhileWriting serves a clean archive to Unpack's check
// and a hostile one of the same size to its write: the write refuses the
// symlink and removes what it had written.
func TestUnpackRechecksWhileWriting(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			clean := f.build(t, ent{name: "a/one", body: "1"}, ent{name: "b", body: "/etc/passwd", mode: 0o777})
			hostile := f.build(t, ent{name: "a/one", body: "1"}, ent{name: "b", typ: tar.TypeSymlink, link: "/etc/passwd"})
			if f.name != "zip" { // same size: pad the shorter tar with zero blocks, store it uncompressed
				clean, hostile = tarOf(t, ent{name: "a/one", body: "1"}, ent{name: "b", body: "/etc/passwd", mode: 0o777}),
					tarOf(t, ent{name: "a/one", body: "1"}, ent{name: "b", typ: tar.TypeSymlink, link: "/etc/passwd"})
				for len(clean) < len(hostile) {
					clean = append(clean, make([]byte, 512)...)
				}
				for len(hostile) < len(clean) {
					hostile = append(hostile, make([]byte, 512)...)
				}
				if f.name == "tar.gz" {
					clean, hostile = storedGzip(t, clean), storedGzip(t, hostile)
				}
			}
			counter := &countingReaderAt{r: bytes.NewReader(clean)}
			if _, err := Inspect(counter, int64(len(clean)), Limits{}); err != nil {
				t.Fatal(err)
			}
			r := &swapReader{first: clean, second: hostile, after: counter.n}
			dst, dir := openRoot(t)
			_, err := Unpack(t.Context(), r, int64(len(clean)), dst, Owner{-1, -1}, Limits{})
			if len(clean) != len(hostile) {
				t.Fatalf("archives of %d and %d bytes", len(clean), len(hostile))
			}
			wantRefused(t, err, `entry "b": symbolic links are refused`)
			if got := listTree(t, dir); len(got) != 0 {
				t.Errorf("Unpack left %q behind", got)
			}
		})
	}
}

// TestUnpackChecked reads an archive Inspect already accepted once: it
// unpacks as the two-pass path does, and an archive whose bytes are not
// the checked ones (a hash that differs, or a hostile archive passed off
// with a clean one's hash) is refused with nothing left behind.
func TestUnpackChecked(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			b := f.build(t, realistic...)
			m, err := Inspect(bytes.NewReader(b), int64(len(b)), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			counter := &countingReaderAt{r: bytes.NewReader(b)}
			dst, dir := openRoot(t)
			got, err := UnpackWith(t.Context(), counter, int64(len(b)), dst, Options{Owner: Owner{-1, -1}, Checked: m.SHA256})
			if err != nil || got != m {
				t.Fatalf("UnpackWith = %+v, %v; Inspect gave %+v", got, err, m)
			}
			if len(listTree(t, dir)) != len(realisticTree) {
				t.Errorf("unpacked %q", listTree(t, dir))
			}
			two := &countingReaderAt{r: bytes.NewReader(b)}
			dst2, _ := openRoot(t)
			if _, err := UnpackWith(t.Context(), two, int64(len(b)), dst2, Options{Owner: Owner{-1, -1}}); err != nil {
				t.Fatal(err)
			}
			if counter.n >= two.n {
				t.Errorf("read %d bytes with Checked, %d without: the first pass was not skipped", counter.n, two.n)
			}

			other := f.build(t, ent{name: "a/one", body: "1"})
			dst, dir = openRoot(t)
			_, err = UnpackWith(t.Context(), bytes.NewReader(other), int64(len(other)), dst, Options{Owner: Owner{-1, -1}, Checked: m.SHA256})
			wantRefused(t, err, "the archive changed while it was unpacked")
			if got := listTree(t, dir); len(got) != 0 {
				t.Errorf("left %q behind", got)
			}

			hostile := f.build(t, ent{name: "a/one", body: "1"}, ent{name: "b", typ: tar.TypeSymlink, link: "/etc/passwd"})
			dst, dir = openRoot(t)
			_, err = UnpackWith(t.Context(), bytes.NewReader(hostile), int64(len(hostile)), dst, Options{Owner: Owner{-1, -1}, Checked: m.SHA256})
			wantRefused(t, err, `entry "b": symbolic links are refused`)
			if got := listTree(t, dir); len(got) != 0 {
				t.Errorf("left %q behind", got)
			}
		})
	}
}

// TestUnpackCancelled stops at a cancelled context and leaves nothing.
func TestUnpackCancelled(t *testing.T) {
	b := tarOf(t, realistic...)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	dst, dir := openRoot(t)
	if _, err := Unpack(ctx, bytes.NewReader(b), int64(len(b)), dst, Owner{-1, -1}, Limits{}); err == nil {
		t.Fatal("no error")
	}
	if got := listTree(t, dir); len(got) != 0 {
		t.Errorf("left %q", got)
	}
}

func mkfile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mksymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// TestWriteFiles writes inline files and refuses bad ones naming the field.
func TestWriteFiles(t *testing.T) {
	mode := func(m int) *int { return &m }
	t.Run("ok", func(t *testing.T) {
		dst, dir := openRoot(t)
		m, err := WriteFiles(dst, []File{
			{Path: "main.py", Content: "print(1)\n"},
			{Path: "bin/run", Content: "IyEvYmluL3NoCg==", Encoding: "base64", Mode: mode(0o700)},
			{Path: "./cfg/a.json", Content: "{}", Encoding: "utf8", Mode: mode(0o600)},
		}, Owner{-1, -1}, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"bin drwxr-xr-x", "bin/run -rwxr-xr-x #!/bin/sh\n", "cfg drwxr-xr-x", "cfg/a.json -rw-r--r-- {}", "main.py -rw-r--r-- print(1)\n"}
		if diff := cmp.Diff(want, listTree(t, dir)); diff != "" {
			t.Errorf("tree (-want +got):\n%s", diff)
		}
		if m.Format != "files" || m.Files != 3 || m.UnpackedBytes != 21 || len(m.SHA256) != 64 {
			t.Errorf("manifest %+v", m)
		}
	})
	for _, c := range []struct {
		name  string
		files []File
		lim   Limits
		field string
		want  string
	}{
		{"dotdot", []File{{Path: "a"}, {Path: "../x"}}, Limits{}, "files[1].path", "escapes"},
		{"absolute", []File{{Path: "/etc/x"}}, Limits{}, "files[0].path", "absolute"},
		{"duplicate", []File{{Path: "a"}, {Path: "./a"}}, Limits{}, "files[1].path", "more than once"},
		{"file as parent", []File{{Path: "a"}, {Path: "a/b"}}, Limits{}, "files[1].path", `parent "a" is a file`},
		{"bad base64", []File{{Path: "a", Content: "!!", Encoding: "base64"}}, Limits{}, "files[0].content", "not valid base64"},
		{"bad encoding", []File{{Path: "a", Encoding: "hex"}}, Limits{}, "files[0].encoding", "utf8 or base64"},
		{"setuid mode", []File{{Path: "a", Mode: mode(0o4755)}}, Limits{}, "files[0].mode", "setuid"},
		{"negative mode", []File{{Path: "a", Mode: mode(-1)}}, Limits{}, "files[0].mode", "between 0 and 0777"},
		{"too many", []File{{Path: "a"}, {Path: "b"}}, Limits{MaxEntries: 1}, "files", "more than 1 files"},
		{"too large", []File{{Path: "a", Content: "123456"}, {Path: "b", Content: "123456"}}, Limits{MaxBytes: 10}, "files[1].content", "more than the workspace limit"},
		{"too large base64", []File{{Path: "a", Content: strings.Repeat("AAAA", 100), Encoding: "base64"}}, Limits{MaxBytes: 10}, "files[0].content", "more than the workspace limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst, dir := openRoot(t)
			_, err := WriteFiles(dst, c.files, Owner{-1, -1}, c.lim)
			wantCode(t, err, sandgate.CodeInvalidRequest, c.field, c.want)
			if got := listTree(t, dir); len(got) != 0 {
				t.Errorf("left %q", got)
			}
		})
	}
}

// TestReplace covers sessions' Replace: regular files are replaced,
// symlinks and directories at the path are errors, and a failure keeps
// the old content of files already replaced.
func TestReplace(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	mkfile(t, secret, "outside")
	setup := func(t *testing.T) (*os.Root, string) {
		dst, dir := openRoot(t)
		mkfile(t, filepath.Join(dir, "a.txt"), "old a")
		mkfile(t, filepath.Join(dir, "sub/b.txt"), "old b")
		mksymlink(t, secret, filepath.Join(dir, "link"))
		mksymlink(t, outside, filepath.Join(dir, "linkdir"))
		return dst, dir
	}
	t.Run("replaces regular files", func(t *testing.T) {
		dst, dir := setup(t)
		_, err := WriteFilesWith(dst, []File{{Path: "a.txt", Content: "new a"}, {Path: "sub/b.txt", Content: "new b"}, {Path: "sub/c.txt", Content: "new c"}},
			Options{Owner: Owner{-1, -1}, Replace: true})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"a.txt -rw-r--r-- new a", "link Lrwxrwxrwx", "linkdir Lrwxrwxrwx", "sub drwxr-xr-x", "sub/b.txt -rw-r--r-- new b", "sub/c.txt -rw-r--r-- new c"}
		if diff := cmp.Diff(want, listTree(t, dir)); diff != "" {
			t.Errorf("tree (-want +got):\n%s", diff)
		}
	})
	t.Run("archive replaces", func(t *testing.T) {
		dst, dir := setup(t)
		b := gzipOf(t, tarOf(t, ent{name: "a.txt", body: "tar a"}))
		if _, err := UnpackWith(t.Context(), bytes.NewReader(b), int64(len(b)), dst, Options{Owner: Owner{-1, -1}, Replace: true}); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(got) != "tar a" {
			t.Errorf("a.txt = %q", got)
		}
	})
	for _, c := range []struct {
		name, path, want string
	}{
		{"symlink at the path", "link", `entry "link": a symbolic link exists at this path`},
		{"symlink parent", "linkdir/x", `its parent "linkdir" is a symbolic link`},
		{"directory at the path", "sub", `entry "sub": a directory exists at this path`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst, dir := setup(t)
			before := listTree(t, dir)
			_, err := WriteFilesWith(dst, []File{{Path: "a.txt", Content: "new a"}, {Path: "new/x", Content: "x"}, {Path: c.path, Content: "pwned"}},
				Options{Owner: Owner{-1, -1}, Replace: true})
			wantCode(t, err, sandgate.CodeConflict, "files[2].path", c.want)
			if diff := cmp.Diff(before, listTree(t, dir)); diff != "" {
				t.Errorf("a failed replace changed the workspace (-before +after):\n%s", diff)
			}
			if got, _ := os.ReadFile(secret); string(got) != "outside" {
				t.Errorf("outside file = %q", got)
			}
		})
	}
	t.Run("without Replace an existing file is a conflict", func(t *testing.T) {
		dst, _ := setup(t)
		_, err := WriteFiles(dst, []File{{Path: "a.txt", Content: "new"}}, Owner{-1, -1}, Limits{})
		wantCode(t, err, sandgate.CodeConflict, "files[0].path", "already exists")
	})
}

func storedGzip(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
