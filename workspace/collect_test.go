package workspace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

const secretText = "TOP-SECRET-OUTSIDE-THE-WORKDIR"

// collectTree makes a workdir with files, planted symlinks to a file and
// a directory outside it, a symlink inside it, and a FIFO.
func collectTree(t *testing.T) (*os.Root, string) {
	t.Helper()
	outside := t.TempDir()
	mkfile(t, filepath.Join(outside, "secret.txt"), secretText)
	mkfile(t, filepath.Join(outside, "dir/secret.txt"), secretText)
	dst, dir := openRoot(t)
	for p, c := range map[string]string{
		"top.txt": "top", "out/a.txt": "aaaa", "out/b.bin": "bb", "out/sub/c.txt": "c",
		"logs/x.log": "log", "node_modules/m/index.js": "js",
	} {
		mkfile(t, filepath.Join(dir, p), c)
	}
	mksymlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(dir, "out/secret.txt"))
	mksymlink(t, filepath.Join(outside, "dir"), filepath.Join(dir, "out/linkdir"))
	mksymlink(t, "../top.txt", filepath.Join(dir, "out/inside.txt"))
	mksymlink(t, filepath.Join(outside, "dir"), filepath.Join(dir, "escape"))
	if err := syscall.Mkfifo(filepath.Join(dir, "out/fifo.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst, dir
}

// store is a put that keeps what it is handed.
type store map[string]string

func (s store) put(a sandgate.Artifact, r io.Reader) (string, error) {
	var buf bytes.Buffer
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(&buf, h), r); err != nil {
		return "", err
	}
	s[a.Path] = buf.String()
	return hex.EncodeToString(h.Sum(nil)), nil
}

func TestCollect(t *testing.T) {
	cases := []struct {
		name      string
		patterns  []string
		limit     int64
		want      []string // path=content
		skipped   []sandgate.SkippedArtifact
		truncated bool
	}{
		{
			name: "glob", patterns: []string{"out/*.txt"}, limit: 1 << 20,
			want:    []string{"out/a.txt=aaaa"},
			skipped: []sandgate.SkippedArtifact{{Path: "out/fifo.txt", Reason: SkipNotRegular}, {Path: "out/inside.txt", Reason: SkipSymlink}, {Path: "out/secret.txt", Reason: SkipSymlink}},
		},
		{
			name: "doublestar", patterns: []string{"**/*.txt"}, limit: 1 << 20,
			want:    []string{"out/a.txt=aaaa", "out/sub/c.txt=c", "top.txt=top"},
			skipped: []sandgate.SkippedArtifact{{Path: "out/fifo.txt", Reason: SkipNotRegular}, {Path: "out/inside.txt", Reason: SkipSymlink}, {Path: "out/secret.txt", Reason: SkipSymlink}},
		},
		{
			name: "directory", patterns: []string{"out"}, limit: 1 << 20,
			want:    []string{"out/a.txt=aaaa", "out/b.bin=bb", "out/sub/c.txt=c"},
			skipped: []sandgate.SkippedArtifact{{Path: "out/fifo.txt", Reason: SkipNotRegular}, {Path: "out/inside.txt", Reason: SkipSymlink}, {Path: "out/linkdir", Reason: SkipSymlink}, {Path: "out/secret.txt", Reason: SkipSymlink}},
		},
		{
			name: "directory glob and trailing slash", patterns: []string{"./out/sub/", "logs/**"}, limit: 1 << 20,
			want: []string{"logs/x.log=log", "out/sub/c.txt=c"},
		},
		{
			name: "symlinked directory named", patterns: []string{"escape", "escape/**", "out/linkdir/secret.txt"}, limit: 1 << 20,
			skipped: []sandgate.SkippedArtifact{{Path: "escape", Reason: SkipSymlink}, {Path: "out/linkdir/secret.txt", Reason: SkipNoMatch}},
		},
		{
			name: "everything", patterns: []string{"."}, limit: 1 << 20,
			want:    []string{"logs/x.log=log", "node_modules/m/index.js=js", "out/a.txt=aaaa", "out/b.bin=bb", "out/sub/c.txt=c", "top.txt=top"},
			skipped: []sandgate.SkippedArtifact{{Path: "escape", Reason: SkipSymlink}, {Path: "out/fifo.txt", Reason: SkipNotRegular}, {Path: "out/inside.txt", Reason: SkipSymlink}, {Path: "out/linkdir", Reason: SkipSymlink}, {Path: "out/secret.txt", Reason: SkipSymlink}},
		},
		{
			name: "no match", patterns: []string{"dist/*.whl", "top.txt"}, limit: 1 << 20,
			want:    []string{"top.txt=top"},
			skipped: []sandgate.SkippedArtifact{{Path: "dist/*.whl", Reason: SkipNoMatch}},
		},
		{
			name: "byte cap stops at the first file that does not fit", patterns: []string{"out/*.bin", "out/*.txt", "top.txt"}, limit: 5,
			want:      []string{"out/a.txt=aaaa"},
			skipped:   []sandgate.SkippedArtifact{{Path: "out/b.bin", Reason: SkipLimit}},
			truncated: true,
		},
		{
			name: "zero budget", patterns: []string{"top.txt"}, limit: 0,
			skipped: []sandgate.SkippedArtifact{{Path: "top.txt", Reason: SkipLimit}}, truncated: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, _ := collectTree(t)
			s := store{}
			done := make(chan struct{})
			var got sandgate.Artifacts
			var err error
			go func() {
				defer close(done)
				got, err = Collect(t.Context(), src, c.patterns, c.limit, s.put)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Collect blocked (on the FIFO?)")
			}
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			var bytes int64
			for _, a := range got.Files {
				paths = append(paths, a.Path+"="+s[a.Path])
				sum := sha256.Sum256([]byte(s[a.Path]))
				if a.SHA256 != hex.EncodeToString(sum[:]) || a.Size != int64(len(s[a.Path])) || a.Mode != 0o644 {
					t.Errorf("artifact %+v does not describe what was stored", a)
				}
				bytes += a.Size
			}
			if diff := cmp.Diff(c.want, paths); diff != "" {
				t.Errorf("artifacts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.skipped, got.Skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
			if got.Truncated != c.truncated || got.Bytes != bytes || got.SkippedCount != len(got.Skipped) {
				t.Errorf("truncated %v bytes %d skipped_total %d; want %v %d %d", got.Truncated, got.Bytes, got.SkippedCount, c.truncated, bytes, len(got.Skipped))
			}
			for p, content := range s {
				if strings.Contains(content, secretText) {
					t.Errorf("%s holds the outside file's content", p)
				}
			}
		})
	}
}

func TestCollectBadPattern(t *testing.T) {
	src, _ := collectTree(t)
	_, err := Collect(t.Context(), src, []string{"out/*", "../*"}, 100, store{}.put)
	wantCode(t, err, "SANDGATE-INVALID-REQUEST", "artifacts[1]", `".."`)
}

// TestCollectGrowingFile appends to a file while it is being read: the
// artifact is the size fstat gave at open, hashed over exactly the bytes
// handed to put.
func TestCollectGrowingFile(t *testing.T) {
	src, dir := openRoot(t)
	p := filepath.Join(dir, "grow.log")
	mkfile(t, p, strings.Repeat("a", 100_000))
	var handed []byte
	got, err := Collect(t.Context(), src, []string{"*.log"}, 1<<20, func(a sandgate.Artifact, r io.Reader) (string, error) {
		half := make([]byte, 50_000)
		io.ReadFull(r, half)
		f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(strings.Repeat("b", 1<<20))
		f.Close()
		rest, err := io.ReadAll(r)
		handed = append(half, rest...)
		sum := sha256.Sum256(handed)
		return hex.EncodeToString(sum[:]), err
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(handed)
	if len(handed) != 100_000 || got.Files[0].Size != 100_000 || got.Files[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("read %d bytes, artifact %+v", len(handed), got.Files[0])
	}
}

// TestCollectPutMustBeHonest refuses a put that stops early or lies about the hash.
func TestCollectPutMustBeHonest(t *testing.T) {
	src, dir := openRoot(t)
	mkfile(t, filepath.Join(dir, "a"), "content")
	for name, put := range map[string]func(sandgate.Artifact, io.Reader) (string, error){
		"short read": func(a sandgate.Artifact, r io.Reader) (string, error) { return "", nil },
		"wrong hash": func(a sandgate.Artifact, r io.Reader) (string, error) {
			io.Copy(io.Discard, r)
			return strings.Repeat("0", 64), nil
		},
		"error": func(a sandgate.Artifact, r io.Reader) (string, error) { return "", errors.New("store down") },
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Collect(t.Context(), src, []string{"a"}, 100, put); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// TestCollectBounds: at most MaxArtifacts files, at most MaxSkippedListed listed.
func TestCollectBounds(t *testing.T) {
	src, dir := openRoot(t)
	for i := range MaxArtifacts + 5 {
		mkfile(t, filepath.Join(dir, "f", strings.Repeat("x", 1+i/100)+string(rune('a'+i%26))+string(rune('a'+i/26%26))), "")
	}
	os.Mkdir(filepath.Join(dir, "a"), 0o755)
	for i := range MaxSkippedListed + 20 {
		mksymlink(t, "/etc/passwd", filepath.Join(dir, "a", string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	got, err := Collect(t.Context(), src, []string{"a", "f"}, 1<<20, store{}.put)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != MaxArtifacts || !got.Truncated || len(got.Skipped) != MaxSkippedListed || got.SkippedCount != MaxSkippedListed+21 {
		t.Errorf("%d artifacts, truncated %v, %d skipped listed of %d", len(got.Files), got.Truncated, len(got.Skipped), got.SkippedCount)
	}
}
