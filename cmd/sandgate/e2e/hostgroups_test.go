package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/policies"
)

// TestHostGroupsDenied asks the real stack for runs whose primary group
// is a group of this host that opens doors on it: the group of the Docker
// socket of the daemon sandgate drives, and the group that owns a mount
// root. Neither is in the bundle's fixed privileged_gids; both are found
// at start and denied by policy with the rest (403, rule
// privileged_group, naming what the group owns). A group of nothing
// still runs.
func TestHostGroupsDenied(t *testing.T) {
	socket := "/var/run/docker.sock"
	if h := executortest.DockerHost(); h != "" {
		p, ok := strings.CutPrefix(h, "unix://")
		if !ok {
			t.Fatalf("DOCKER_HOST %s: the test needs the daemon's unix socket on this host", h)
		}
		socket = p
	}
	st, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	socketGID := st.Sys().(*syscall.Stat_t).Gid
	root := filepath.Join(t.TempDir(), "roots")
	if err := os.Mkdir(root, 0o750); err != nil {
		t.Fatal(err)
	}
	const rootGID = 43210
	if err := os.Chown(root, 0, rootGID); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withEnv("SANDGATE_MOUNT_ROOTS", root))
	since := time.Now().Add(-time.Second)

	for _, tc := range []struct {
		name, user, says string
	}{
		{"the docker socket's group", fmt.Sprintf("10001:%d", socketGID), socket},
		{"a mount root's group", fmt.Sprintf("10001:%d", rootGID), root},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := fmt.Sprintf(`{"command":["id","-G"],"user":%q}`, tc.user)
			status, _, body := s.do(t, http.MethodPost, "/v1/runs?wait=30s", spec)
			if status != http.StatusForbidden {
				t.Fatalf("user %s: status %d, want 403: %s", tc.user, status, body)
			}
			e := apiError(body)
			dec, err := api.DecisionFromDetails(e.Error.Details)
			if err != nil || e.Error.Code != sandgate.CodePolicyDenied {
				t.Fatalf("error %+v (%v), want %s", e.Error, err, sandgate.CodePolicyDenied)
			}
			if !slices.ContainsFunc(dec.Violations, func(v sandgate.Violation) bool {
				return v.Rule == "privileged_group" && strings.Contains(v.Message, tc.says)
			}) {
				t.Errorf("violations %+v, want privileged_group naming %s", dec.Violations, tc.says)
			}
		})
	}
	t.Run("a group of nothing", func(t *testing.T) {
		status, _, body := s.do(t, http.MethodPost, "/v1/runs?wait=30s", `{"command":["id","-G"],"user":"10001:10002"}`)
		if status != http.StatusOK {
			t.Fatalf("status %d, want 200: %s", status, body)
		}
	})
	// The host's groups are in the recorded input: replaying the bundle in
	// force, whose data names neither, denies both again, exactly.
	t.Run("replayed", func(t *testing.T) {
		files, err := policies.BundleFiles("")
		if err != nil {
			t.Fatal(err)
		}
		rep, err := s.Client.ReplayPolicy(context.Background(), files, client.ReplayOptions{Since: since})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Replayed != 3 || rep.Unchanged != 3 || rep.NewlyAllowed.Count != 0 || rep.Approximate != 0 {
			t.Errorf("replay: replayed %d, unchanged %d, newly allowed %d, approximate %d; want 3 3 0 0",
				rep.Replayed, rep.Unchanged, rep.NewlyAllowed.Count, rep.Approximate)
		}
	})
}
