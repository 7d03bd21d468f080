package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
)

// TestMountSwapNeverEscapes attacks bind mounts as a run with the team
// directory mounted read-write could: while runs that mount the admitted
// directory "proj" are created, a loop keeps replacing it with a symlink
// to a directory outside the mount root and back. Every run must see the
// admitted directory or fail with SBX-003 before anything is mounted;
// none may see what the symlink points to.
func TestMountSwapNeverEscapes(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("bind mounts are pinned with mount(2), which needs root")
	}
	ex, rec := newTestExecutor(t, func(c *executor.Config) { c.MaxConcurrent = 4 })
	base := t.TempDir()
	team := filepath.Join(base, "root", "payments")
	proj, real, outside := filepath.Join(team, "proj"), filepath.Join(team, "proj.real"), filepath.Join(base, "host")
	for _, d := range []string{proj, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(proj, "marker"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "marker"), []byte("ESCAPED"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Admitted while the path was the real directory.
	admitted := newJob(t, func(s *sandgate.RunSpec) {
		s.Mounts = []sandgate.Mount{{Source: proj, Target: "/workspace", ReadOnly: true}}
	}, "cat", "/workspace/marker")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var swaps atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if os.Rename(proj, real) != nil {
				continue
			}
			_ = os.Symlink(outside, proj)
			time.Sleep(time.Millisecond)
			_ = os.Remove(proj)
			_ = os.Rename(real, proj)
			swaps.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()

	const runs = 40
	results := make(chan sandgate.Result, runs)
	var rwg sync.WaitGroup
	for i := range runs {
		job := admitted
		job.RunID = "0193" + randomHex(t, 14)
		job.Spec.TaskID = "swap-" + string(rune('a'+i%26))
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			res, _ := ex.Execute(t.Context(), job)
			results <- res
		}()
	}
	rwg.Wait()
	close(stop)
	wg.Wait()
	close(results)

	var inside, refused int
	for res := range results {
		switch {
		case strings.Contains(res.Stdout.Data, "ESCAPED"):
			t.Errorf("a run saw the symlink's target: stdout %q", res.Stdout.Data)
		case res.Outcome == sandgate.OutcomeSucceeded && res.Stdout.Data == "inside":
			inside++
		case res.Outcome == sandgate.OutcomeError && res.Error != nil && res.Error.Code == sandgate.CodeMountError:
			refused++
		default:
			t.Errorf("unexpected result: outcome %s, error %+v, stdout %q, stderr %q", res.Outcome, res.Error, res.Stdout.Data, res.Stderr.Data)
		}
	}
	t.Logf("%d runs: %d saw the admitted directory, %d were refused; %d swaps", runs, inside, refused, swaps.Load())
	if inside == 0 {
		t.Errorf("no run mounted the admitted directory: the race was not exercised")
	}
	// The trail records what was mounted: the pinned directory's inode.
	st, err := os.Stat(proj)
	if err != nil {
		t.Fatal(err)
	}
	wantIno := inodeOf(st)
	found := false
	for _, ev := range rec.all() {
		if ev.Type != sandgate.EventContainerCreated || ev.Payload["mounts"] == nil {
			continue
		}
		ms, _ := ev.Payload["mounts"].([]any)
		if len(ms) != 1 {
			t.Fatalf("container.created mounts = %v", ev.Payload["mounts"])
		}
		m := ms[0].(map[string]any)
		if m["source"] != proj || m["target"] != "/workspace" || m["inode"] != wantIno {
			t.Errorf("container.created mount = %v, want source %s and inode %d", m, proj, wantIno)
		}
		found = true
	}
	if !found {
		t.Error("no container.created event records its mounts")
	}
}

// inodeOf is the inode of a file, as the trail records it.
func inodeOf(fi os.FileInfo) uint64 {
	return fi.Sys().(*syscall.Stat_t).Ino
}
