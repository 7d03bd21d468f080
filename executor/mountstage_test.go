package executor

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate"
)

// requireRoot fails the test under CI=true, where make test runs as root,
// and skips it elsewhere: pinning mounts needs mount(2).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("mount staging needs root (CI=true runs as root)")
	}
	t.Skip("mount staging needs root")
}

// swapTree is a mount root with a team directory holding the admitted
// directory "proj" (marker "inside") and, outside the root, a directory
// that stands for the rest of the host (marker "ESCAPED").
type swapTree struct {
	proj, real, outside string
}

func newSwapTree(t *testing.T) swapTree {
	t.Helper()
	base := t.TempDir()
	team := filepath.Join(base, "root", "payments")
	tr := swapTree{proj: filepath.Join(team, "proj"), real: filepath.Join(team, "proj.real"), outside: filepath.Join(base, "host")}
	for _, d := range []string{tr.proj, tr.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tr.proj, "marker"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tr.outside, "marker"), []byte("ESCAPED"), 0o644); err != nil {
		t.Fatal(err)
	}
	return tr
}

// swap replaces the admitted directory with a symlink to the outside and
// back, over and over, until stop is closed: what a run with the team
// directory mounted read-write can do.
func (tr swapTree) swap(stop <-chan struct{}, wg *sync.WaitGroup, swaps *atomic.Int64) {
	defer wg.Done()
	for {
		select {
		case <-stop:
			_ = os.Remove(tr.proj)
			_ = os.Rename(tr.real, tr.proj)
			return
		default:
		}
		if os.Rename(tr.proj, tr.real) == nil {
			_ = os.Symlink(tr.outside, tr.proj)
			runtime.Gosched()
			_ = os.Remove(tr.proj)
			_ = os.Rename(tr.real, tr.proj)
			swaps.Add(1)
		}
		runtime.Gosched()
	}
}

// TestStageNeverFollowsASwappedPath stages the admitted directory while
// another goroutine swaps it for a symlink to the rest of the host, many
// thousands of times: every stage either holds the admitted directory or
// is refused with SBX-003; none ever shows what the symlink points to.
func TestStageNeverFollowsASwappedPath(t *testing.T) {
	requireRoot(t)
	tr := newSwapTree(t)
	// Not under t.TempDir: /tmp is world-writable, which the stage root's
	// checks refuse.
	s := newStager(Config{MountStageDir: filepath.Join("/run/sandgate-test", filepath.Base(t.TempDir()))}, nil, calls{}, nil)
	t.Cleanup(func() {
		unmount(s.root)
		os.RemoveAll(s.root)
	})
	if err := s.init(); err != nil {
		t.Fatalf("init: %v", err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var swaps atomic.Int64
	wg.Add(1)
	go tr.swap(stop, &wg, &swaps)

	const iterations = 3000
	var pinned, refused int
	for i := range iterations {
		runID := "run-" + strconv.Itoa(i)
		staged, err := s.stage("node", runID, []sandgate.Mount{{Resolved: tr.proj, Target: "/w", ReadOnly: true}})
		if err != nil {
			if sandgate.ErrorCodeOf(err) != sandgate.CodeMountError {
				close(stop)
				wg.Wait()
				t.Fatalf("iteration %d: error %v, want SBX-003", i, err)
			}
			refused++
			continue
		}
		got, rerr := os.ReadFile(filepath.Join(staged[0].Staged, "marker"))
		s.unstage("node", runID)
		if rerr != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("iteration %d: read the staged marker: %v", i, rerr)
		}
		if string(got) != "inside" {
			close(stop)
			wg.Wait()
			t.Fatalf("iteration %d: the stage shows %q: a swapped path was followed", i, got)
		}
		pinned++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d iterations: %d pinned the admitted directory, %d refused, %d swaps", iterations, pinned, refused, swaps.Load())
	if pinned == 0 || refused == 0 {
		t.Errorf("the race was not exercised: %d pinned, %d refused", pinned, refused)
	}
	if left, _ := os.ReadDir(filepath.Join(s.root, "node")); len(left) != 0 {
		t.Errorf("%d stages left behind", len(left))
	}
}

// TestOpenNoFollow refuses every spelling of a symlink on the path.
func TestOpenNoFollow(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "d")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link": dir, "filelink": filepath.Join(dir, "file")} {
		if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{dir, true},
		{filepath.Join(dir, "sub"), true},
		{filepath.Join(dir, "file"), true},
		{filepath.Join(base, "link"), false},
		{filepath.Join(base, "link", "sub"), false},
		{filepath.Join(base, "filelink"), false},
		{filepath.Join(dir, "missing"), false},
		{dir + "/../d", false},
		{"relative", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			fd, err := openNoFollow(tc.path)
			if err == nil {
				unix.Close(fd)
			}
			if (err == nil) != tc.ok {
				t.Errorf("openNoFollow(%q) error = %v, want ok=%v", tc.path, err, tc.ok)
			}
		})
	}
}

// TestStageCloseLeavesHostAsFound: a gateway that stops leaves no mount
// of its stage behind (its tests ran many gateways, each leaving the
// stage root bound onto itself), unless a run is still staged, whose
// container the next start adopts.
func TestStageCloseLeavesHostAsFound(t *testing.T) {
	requireRoot(t)
	parent := "/run/sandgate-test"
	_, statErr := os.Stat(parent)
	root := filepath.Join(parent, "close-"+filepath.Base(t.TempDir()))
	s := newStager(Config{MountStageDir: root}, nil, calls{}, nil)
	t.Cleanup(func() {
		unmount(s.root)
		os.RemoveAll(s.root)
		if errors.Is(statErr, os.ErrNotExist) {
			os.Remove(parent)
		}
	})
	if err := s.init(); err != nil {
		t.Fatalf("init: %v", err)
	}
	if !isMountPoint(root) {
		t.Fatalf("%s is not a mount point after init", root)
	}
	src := t.TempDir()
	if _, err := s.stage("node", "run-1", []sandgate.Mount{{Resolved: src, Target: "/w"}}); err != nil {
		t.Fatalf("stage: %v", err)
	}
	s.close()
	if !isMountPoint(root) {
		t.Fatalf("close unmounted the stage while a run was staged in it")
	}
	s.unstage("node", "run-1")
	if err := s.init(); err != nil {
		t.Fatalf("init again: %v", err)
	}
	s.close()
	if isMountPoint(root) {
		t.Errorf("%s is still a mount point after close", root)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stage directory setup made is still there: %v", err)
	}
}
