package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDevTokenKept: the development token is made once and read back on
// every later start, so that a restarted `make run` accepts the token a
// developer exported; a file others could read, or one holding something
// else, is refused rather than trusted.
func TestDevTokenKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "dev-token")
	first, err := devToken(path)
	if err != nil {
		t.Fatal(err)
	}
	if !devTokenPattern.MatchString(first) {
		t.Fatalf("token %q is not a development token", first)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", st.Mode().Perm())
	}
	again, err := devToken(path)
	if err != nil || again != first {
		t.Fatalf("second start: %q, %v; want %q", again, err, first)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := devToken(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable token file = %v, want refused", err)
	}
	if err := os.WriteFile(path, []byte("sgdev_short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := devToken(path); err == nil || !strings.Contains(err.Error(), "does not hold a development token") {
		t.Errorf("a file of something else = %v, want refused", err)
	}
}
