package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/gateway/api"
)

// remapRange is the dockremap user's subordinate uid range: its first
// uid and its length, from /etc/subuid (bootstrap writes it).
func remapRange(t *testing.T) (int, int) {
	t.Helper()
	f, err := os.Open("/etc/subuid")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.Split(sc.Text(), ":")
			if len(parts) == 3 && parts[0] == "dockremap" {
				first, err1 := strconv.Atoi(parts[1])
				n, err2 := strconv.Atoi(parts[2])
				if err1 == nil && err2 == nil {
					return first, n
				}
			}
		}
	}
	t.Fatalf("the dockremap user has no subordinate uids in /etc/subuid: run deploy/bootstrap.sh")
	return 0, 0
}

// TestUsernsRemap: on a daemon with userns-remap (a private dockerd, in a
// network namespace of its own, removed after the test), a run's root is
// an unprivileged uid of the host: /proc/self/uid_map maps 0 to the
// dockremap range, and a file the run writes into its bind mount belongs,
// seen from the host, to that range's uid for 10001, which owns nothing
// else. The run's workspace (files in, written by the run), its team's
// cache volume and its bind mount all keep working.
func TestUsernsRemap(t *testing.T) {
	first, size := remapRange(t)
	d := startPrivateDockerWith(t, "--userns-remap=dockremap")
	root := t.TempDir()
	out := filepath.Join(root, "dev", "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	// The site gives the team's directories to the uid its runs have on
	// the host: 10001 inside is first+10001 outside.
	hostUID := first + 10001
	if err := os.Chown(out, hostUID, hostUID); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, filepath.Dir(out)} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, withEnv("DOCKER_HOST", d.Host), withEnv("SANDGATE_MOUNT_ROOTS", root))

	spec, _ := json.Marshal(map[string]any{
		"command": []string{"sh", "-c", "set -e; head -1 /proc/self/uid_map; id -u; echo hi > /out/file; " +
			"cat /workspace/in; echo ws > /workspace/made; echo v > /cache/v; cat /cache/v"},
		"mounts":  []map[string]any{{"source": out, "target": "/out"}},
		"files":   []map[string]any{{"path": "in", "content": "from the gateway\n"}},
		"volumes": []map[string]any{{"name": "userns", "target": "/cache"}},
	})
	run := s.submitWait(t, s.Token, string(spec))
	if run.ExitCode == nil || *run.ExitCode != 0 {
		t.Fatalf("run under userns-remap: exit %v error %+v\nstdout %q\nstderr %q", exitOf(run.ExitCode), run.Error, run.Stdout.Data, run.Stderr.Data)
	}
	lines := strings.Split(strings.TrimSpace(run.Stdout.Data), "\n")
	if len(lines) < 4 {
		t.Fatalf("stdout %q", run.Stdout.Data)
	}
	if f := strings.Fields(lines[0]); len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(first) || f[2] != strconv.Itoa(size) {
		t.Fatalf("uid_map %q, want 0 %d %d: the run's root is the host's root", lines[0], first, size)
	}
	if lines[1] != "10001" || lines[2] != "from the gateway" || lines[3] != "v" {
		t.Fatalf("stdout %q", run.Stdout.Data)
	}
	info, err := os.Stat(filepath.Join(out, "file"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := info.Sys().(*syscall.Stat_t).Uid; int(uid) != hostUID {
		t.Fatalf("the file the run wrote belongs to uid %d on the host, want %d", uid, hostUID)
	}

	// A session: its agent starts commands as 10001, and a file put into
	// its workspace is theirs to change.
	ss := openSession(t, s.Client, api.SessionRequest{})
	defer s.Client.DeleteSession(context.Background(), ss.ID)
	if _, err := s.Client.PutFile(context.Background(), ss.ID, "notes.txt", 0o644, strings.NewReader("put\n")); err != nil {
		t.Fatal(err)
	}
	cmd := execWait(t, s.Client, ss.ID, api.ExecRequest{Command: []string{"sh", "-c", "echo more >> notes.txt && cat notes.txt && head -1 /proc/self/uid_map"}})
	if cmd.ExitCode == nil || *cmd.ExitCode != 0 || !strings.HasPrefix(cmd.Stdout.Data, "put\nmore\n") || !strings.Contains(cmd.Stdout.Data, strconv.Itoa(first)) {
		t.Fatalf("session command under userns-remap: exit %s stdout %q stderr %q", exitOf(cmd.ExitCode), cmd.Stdout.Data, cmd.Stderr.Data)
	}
}

func exitOf(code *int) string {
	if code == nil {
		return "none"
	}
	return strconv.Itoa(*code)
}
