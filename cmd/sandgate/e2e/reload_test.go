package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// TestServeReloadsOnSIGHUP: serve, not the policy engine, owns SIGHUP, and
// reloads the policy on it.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	// Catch SIGHUP ourselves too, so that a signal that arrives before
	// serve registers cannot kill the test binary.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	dir := bundleWith(t, func(map[string]any) {})
	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", dir))
	revision := func() string {
		status, _, body := s.do(t, http.MethodGet, "/v1/policies", "")
		var st sandgate.PolicyStatus
		if err := json.Unmarshal(body, &st); status != http.StatusOK || err != nil {
			t.Fatalf("GET /v1/policies = %d %s", status, body)
		}
		return st.Revision
	}
	rev0 := revision()
	// Edit the bundle by a rename, which the directory watcher would see
	// too; SIGHUP must not wait for it.
	data, err := os.ReadFile(filepath.Join(dir, "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), `"pids": 1024`, `"pids": 2048`, 1)
	if edited == string(data) {
		t.Fatal("data.json has no pids maximum of 1024 to change")
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for revision() == rev0 {
		if time.Now().After(deadline) {
			t.Fatal("the policy was not reloaded")
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
