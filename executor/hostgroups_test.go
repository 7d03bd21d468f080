package executor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// socketGroup is the group of the test daemon's socket, which must be on
// this host.
func socketGroup(t *testing.T) int64 {
	t.Helper()
	groups, err := executor.HostGroups(executortest.DockerHost(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if strings.Contains(g.Owns, "socket") {
			return g.GID
		}
	}
	t.Fatalf("no group of the Docker socket found (DOCKER_HOST %q): the test needs the daemon's socket on this host", executortest.DockerHost())
	return 0
}

// TestExecutorRefusesHostGroups attacks the executor as a policy that
// does not know the host would let it: the decision's enforcement names
// gid 0 alone, and the run asks for the Docker socket's group, as its
// primary group, or as a supplementary group its image's /etc/group
// gives the run's user, or for a mount root's group. The executor found
// the socket's group itself, and was given the mount root's: each is
// refused before the container starts, naming what the group owns.
func TestExecutorRefusesHostGroups(t *testing.T) {
	sock := socketGroup(t)
	root := t.TempDir()
	const rootGID = 43211
	if err := os.Chown(root, 0, rootGID); err != nil {
		t.Fatal(err)
	}
	found, err := executor.HostGroups(executortest.DockerHost(), []string{root})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(found, func(g sandgate.HostGroup) bool { return g.GID == rootGID && strings.Contains(g.Owns, root) }) {
		t.Fatalf("HostGroups = %+v, want the mount root's group %d", found, rootGID)
	}
	// The executor is given only the mount root's group; its own
	// daemon's socket it finds by itself.
	rootOnly := slices.DeleteFunc(slices.Clone(found), func(g sandgate.HostGroup) bool { return g.GID != rootGID })
	ex, rec := newTestExecutor(t, func(c *executor.Config) { c.HostGroups = rootOnly })
	tag := "sandgate-test/hostgroups:" + sandgatetest.RandomHex(t, 4)
	buildTestImage(t, tag, map[string]string{
		"/etc/group": fmt.Sprintf("root:x:0:\nsandbox:x:10001:\ndockerish:x:%d:sandbox\n", sock),
	})
	for _, tc := range []struct {
		name, image, user, refused string
	}{
		{"the socket's group", images.SandboxImage, fmt.Sprintf("10001:%d", sock), "Docker socket"},
		{"the socket's group, supplementary", tag, "10001:10001", "supplementary group"},
		{"a mount root's group", images.SandboxImage, fmt.Sprintf("10001:%d", rootGID), filepath.Base(root)},
		{"a group of nothing", images.SandboxImage, "10001:10002", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, func(s *sandgate.RunSpec) { s.Image, s.User = tc.image, tc.user }, "id", "-G")
			job.Enforcement = sandgate.Enforcement{PrivilegedGIDs: []int64{0}}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			res, err := ex.Execute(ctx, job)
			if tc.refused == "" {
				if err != nil || res.Outcome != sandgate.OutcomeSucceeded {
					t.Fatalf("Execute = %v, %+v; want success", err, res)
				}
				return
			}
			if sandgate.ErrorCodeOf(err) != sandgate.CodeContainerCreate || !strings.Contains(sandgate.ErrorMessageOf(err), tc.refused) {
				t.Fatalf("Execute error = %v; want SBX-001 naming %q", err, tc.refused)
			}
			if res.Outcome != sandgate.OutcomeError || res.Error == nil {
				t.Errorf("result %s %+v, want outcome error with the refusal", res.Outcome, res.Error)
			}
			for _, ev := range rec.of(job.RunID) {
				if ev.Type == sandgate.EventContainerStarted {
					t.Errorf("the container was started")
				}
			}
		})
	}
}
