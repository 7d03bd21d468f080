package executor

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDescendants: a command's process tree is read from /proc, names
// with spaces and parentheses included, other processes left out.
func TestDescendants(t *testing.T) {
	proc := t.TempDir()
	stat := map[string]string{
		"10":   "10 (sh) S 1 10 10 0",
		"11":   "11 (sleep) S 10 10 10 0",
		"12":   "12 (my (odd) name) S 10 10 10 0",
		"13":   "13 (child) S 12 10 10 0",
		"20":   "20 (other) S 1 20 20 0",
		"21":   "21 (broken",
		"self": "x",
	}
	for pid, s := range stat {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := descendants(proc, 10)
	slices.Sort(got)
	if !slices.Equal(got, []int{10, 11, 12, 13}) {
		t.Errorf("descendants = %v, want 10 11 12 13", got)
	}
	if got := descendants(proc, 99); !slices.Equal(got, []int{99}) {
		t.Errorf("descendants of a gone process = %v", got)
	}
}
