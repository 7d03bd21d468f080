package executor_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
)

// memBlobs is a blob store in memory.
type memBlobs struct {
	mu    sync.Mutex
	blobs map[string][]byte
}

func (m *memBlobs) PutBlob(_ context.Context, r io.Reader) (string, int64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", 0, err
	}
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	m.mu.Lock()
	m.blobs[h] = b
	m.mu.Unlock()
	return h, int64(len(b)), nil
}

func (m *memBlobs) WriteBlob(_ context.Context, sum string, off, n int64, w io.Writer) error {
	m.mu.Lock()
	b := m.blobs[sum]
	m.mu.Unlock()
	if n < 0 {
		n = int64(len(b)) - off
	}
	_, err := w.Write(b[off : off+n])
	return err
}

// TestWorkspaceRun runs a job with inline files and artifacts through the
// executor: the files are there as the run's user, the artifacts are
// collected (a planted symlink is not), the trail says so, and the
// workspace is gone with the run. A workspace a dead process left is
// removed by the reaper.
func TestWorkspaceRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workspaces need root")
	}
	blobs := &memBlobs{blobs: map[string][]byte{}}
	dir := t.TempDir()
	var node string
	ex, rec := newTestExecutor(t, func(c *executor.Config) {
		c.Blobs, c.WorkspaceDir = blobs, dir
		node = c.Node
	})
	j := newJob(t, func(s *sandgate.RunSpec) {
		s.Files = []sandgate.File{{Path: "in.txt", Content: "hello\n"}}
		s.Artifacts = []string{"out.txt", "leak"}
	}, "sh", "-c", "cat in.txt > out.txt; id -u >> out.txt; ln -s /etc/shadow leak; exit 4")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := execute(t, ex, j)
	if res.ExitCode == nil || *res.ExitCode != 4 || res.Artifacts == nil || len(res.Artifacts.Files) != 1 {
		t.Fatalf("result %+v, artifacts %+v", res, res.Artifacts)
	}
	got := blobs.blobs[res.Artifacts.Files[0].SHA256]
	if string(got) != "hello\n10001\n" {
		t.Errorf("out.txt = %q", got)
	}
	if res.Artifacts.SkippedCount != 1 || res.Artifacts.Skipped[0].Path != "leak" {
		t.Errorf("skipped %+v, want the symlink", res.Artifacts.Skipped)
	}
	if rec.count(sandgate.EventArtifactsCollected) != 1 {
		t.Errorf("no artifacts.collected event")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, node, "*", "*")); len(left) != 0 {
		t.Errorf("workspace left behind: %v", left)
	}

	// A dead process's workspace: an image, mounted, of a run no one owns.
	stale := filepath.Join(dir, node)
	img, mnt := filepath.Join(stale, "images", "dead-run.img"), filepath.Join(stale, "mnt", "dead-run")
	os.MkdirAll(filepath.Dir(img), 0o700)
	os.MkdirAll(mnt, 0o700)
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	if _, err := ex.Reaper().CleanupOrphans(ctx); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(stale, "*", "*")); len(left) != 0 {
		t.Errorf("the reaper left a dead run's workspace: %v", left)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if bytes.Contains(mounts, []byte(mnt)) {
		t.Errorf("the dead run's workspace is still mounted")
	}
}
