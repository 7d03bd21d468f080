package workspace

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
)

// fuzzLimits are small, so that the fuzzer reaches the caps.
var fuzzLimits = Limits{MaxEntries: 16, MaxBytes: 4096}

// fuzzSeeds are valid and hostile archives in each format.
func fuzzSeeds(f *testing.F) {
	sets := [][]ent{
		realistic,
		{{name: "a/b/c.txt", body: "hello"}, {name: "a/", typ: tar.TypeDir}},
		{{name: "../x", body: "x"}},
		{{name: "/abs", body: "x"}},
		{{name: "l", typ: tar.TypeSymlink, link: "/etc/passwd"}},
		{{name: "a", body: "1"}, {name: "a/b", body: "2"}},
		{{name: "a", body: "1"}, {name: "a", body: "2"}},
		{{name: "p", typ: tar.TypeFifo}},
		{{name: "s", mode: 0o4755, body: "x"}},
		{{name: "big", body: strings.Repeat("z", 5000)}},
	}
	for _, s := range sets {
		for _, b := range formats {
			f.Add(b.build(f, s...))
		}
	}
	f.Add(tarOf(f, ent{name: "h", body: "x"}, ent{name: "link", typ: tar.TypeLink, link: "h"}))
	f.Add(lieTarSize(tarOf(f, ent{name: "a", body: "abc"}), 1000))
	f.Add(zipRaw(f, "a", 12, 0, 3, []byte("xyz")))
	f.Add([]byte{})
	f.Add([]byte("PK\x05\x06"))
}

// FuzzInspect: whatever the bytes, Inspect does not panic, refuses with
// an INVALID-REQUEST naming the workspace, or returns a manifest within
// the limits.
func FuzzInspect(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Inspect(bytes.NewReader(b), int64(len(b)), fuzzLimits)
		if err != nil {
			var se *sandgate.Error
			if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest || se.Field != "workspace" {
				t.Fatalf("error %v is not an INVALID-REQUEST naming the workspace", err)
			}
			return
		}
		if m.Entries > fuzzLimits.MaxEntries || m.UnpackedBytes > fuzzLimits.MaxBytes || m.Files+m.Dirs > m.Entries || m.ArchiveBytes != int64(len(b)) {
			t.Fatalf("manifest %+v outside the limits", m)
		}
	})
}

// FuzzUnpack: whatever the bytes, Unpack either errors and leaves dst
// empty, or writes only directories and regular files inside dst, no
// symlinks, with the modes it promises and sizes within the limits, and
// nothing beside dst.
func FuzzUnpack(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "ws")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dst, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		m, err := Unpack(t.Context(), bytes.NewReader(b), int64(len(b)), dst, Owner{-1, -1}, fuzzLimits)
		var files, entries int
		var size int64
		walkErr := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == dir {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			entries++
			switch mode := fi.Mode(); {
			case mode.IsDir():
				if mode.Perm() != 0o755 || mode&^(fs.ModeDir|fs.ModePerm) != 0 {
					t.Errorf("%s: directory mode %v", p, mode)
				}
			case mode.IsRegular():
				if (mode != 0o644 && mode != 0o755) || mode&^fs.ModePerm != 0 {
					t.Errorf("%s: file mode %v", p, mode)
				}
				files++
				size += fi.Size()
			default:
				t.Errorf("%s: %v is neither a directory nor a regular file", p, mode)
			}
			return nil
		})
		if walkErr != nil {
			t.Fatal(walkErr)
		}
		if err != nil {
			if entries != 0 {
				t.Fatalf("Unpack failed (%v) and left %d entries behind", err, entries)
			}
		} else if files != m.Files || size != m.UnpackedBytes || size > fuzzLimits.MaxBytes || entries > fuzzLimits.MaxEntries*MaxPathDepth {
			t.Fatalf("unpacked %d files, %d bytes, %d entries; manifest %+v", files, size, entries, m)
		}
		beside, _ := os.ReadDir(parent)
		if len(beside) != 1 {
			t.Fatalf("Unpack wrote beside the workspace: %v", beside)
		}
	})
}
