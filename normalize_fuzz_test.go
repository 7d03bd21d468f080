package sandgate_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
)

// fuzzTree builds a small directory tree with the symlink tricks a mount
// request can play, and returns its root (itself free of symlinks).
//
//	root/work/proj/         a real directory
//	root/work-evil/         a sibling whose name extends "work"
//	root/work/up -> ..      a link back to root
//	root/work/out -> /etc   a link leaving the tree
//	root/work/loop -> loop  a link to itself
//	root/work/rel -> proj   a relative link
//	root/work/dangling -> missing
func fuzzTree(t testing.TB) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"work/proj", "work-evil"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		"work/up": "..", "work/out": "/etc", "work/loop": "loop", "work/rel": "proj", "work/dangling": "missing",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// withinReference is pathWithin spelled differently, by filepath.Rel, for
// clean absolute paths.
func withinReference(p, root string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// FuzzResolveHostPath checks the mount path resolver on paths under a tree
// full of symlink tricks. Whatever the spelling, a resolved path is clean,
// absolute, free of symlinks and NUL, and a fixed point; relative paths
// and NUL bytes are refused; and whether the result lies within the mount
// root is decided by where it really is, not by how it was spelled.
func FuzzResolveHostPath(f *testing.F) {
	for _, seed := range []string{
		"work/proj", "work/proj/", "work//proj", "//work/proj", "work/./proj",
		"work/proj/..", "work/../work/proj", "work/proj/../../..", "../../../../etc/passwd",
		"work/up/work/proj", "work/up/..", "work/out", "work/out/passwd", "work/out/../root",
		"work/loop", "work/rel", "work/rel/", "work/dangling", "work-evil", "work-evil/../work",
		"work/proj\x00/etc", "\x00", "", ".", "/", "///", "work/proj/...", "work/proj/.. /x",
	} {
		f.Add(seed)
	}
	root := fuzzTree(f)
	mountRoot := filepath.Join(root, "work")
	f.Fuzz(func(t *testing.T, rel string) {
		for _, p := range []string{root + "/" + rel, rel} {
			got, err := sandgate.ResolveHostPath(p)
			if strings.IndexByte(p, 0) >= 0 && err == nil {
				t.Fatalf("ResolveHostPath(%q) accepted a NUL byte: %q", p, got)
			}
			if !filepath.IsAbs(p) && err == nil {
				t.Fatalf("ResolveHostPath(%q) accepted a relative path: %q", p, got)
			}
			if err != nil {
				continue
			}
			if !filepath.IsAbs(got) || filepath.Clean(got) != got || strings.IndexByte(got, 0) >= 0 {
				t.Fatalf("ResolveHostPath(%q) = %q: not clean and absolute", p, got)
			}
			if real, err := filepath.EvalSymlinks(got); err != nil || real != got {
				t.Fatalf("ResolveHostPath(%q) = %q, which still resolves to %q (%v)", p, got, real, err)
			}
			if again, err := sandgate.ResolveHostPath(got); err != nil || again != got {
				t.Fatalf("ResolveHostPath(%q) = %q, but resolving that gives %q, %v", p, got, again, err)
			}
			for _, r := range []string{mountRoot, root, "/etc", "/"} {
				if in, want := pathWithin(got, r), withinReference(got, r); in != want {
					t.Fatalf("pathWithin(%q, %q) = %t, want %t", got, r, in, want)
				}
			}
			// Only the real tree can be within the mount root: a path that
			// escaped through ".." or a link is judged by where it landed.
			if pathWithin(got, mountRoot) && !strings.HasPrefix(got+"/", mountRoot+"/") {
				t.Fatalf("%q judged within %q", got, mountRoot)
			}
			if strings.HasPrefix(got, root+"/work-evil") && pathWithin(got, mountRoot) {
				t.Fatalf("%q (a sibling with a longer name) judged within %q", got, mountRoot)
			}
		}
	})
}

// FuzzPathWithin compares pathWithin with a reference built on filepath.Rel
// for any two absolute paths, whatever their spelling.
func FuzzPathWithin(f *testing.F) {
	for _, seed := range [][2]string{
		{"/srv/work", "/srv/work"}, {"/srv/work/a", "/srv/work"}, {"/srv/work-evil", "/srv/work"},
		{"/srv/work/", "/srv/work"}, {"/srv//work/a", "/srv/work/"}, {"/srv/work/../etc", "/srv/work"},
		{"/srv", "/srv/work"}, {"/", "/"}, {"/etc", "/"}, {"/srv/work/..", "/srv/work"},
		{"/srv/work/a\x00", "/srv/work"}, {"/srv/workx/../work/b", "/srv/work"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, p, root string) {
		if !filepath.IsAbs(p) || !filepath.IsAbs(root) {
			return
		}
		got := pathWithin(p, root)
		want := withinReference(filepath.Clean(p), filepath.Clean(root))
		if got != want {
			t.Fatalf("pathWithin(%q, %q) = %t, want %t", p, root, got, want)
		}
		if got && !pathWithin(filepath.Clean(p), filepath.Clean(root)) {
			t.Fatalf("pathWithin(%q, %q) depends on spelling", p, root)
		}
	})
}

// pathWithin reports whether the clean absolute path p is root or lies below
// it, comparing whole path components ("/srv/work-evil" is not within
// "/srv/work").
func pathWithin(p, root string) bool {
	p, root = filepath.Clean(p), filepath.Clean(root)
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+"/")
}
