package executor_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestSecondInstanceOfANode is the attack at the executor's depth: a
// second executor of a serving executor's node, on its daemon. It cannot
// claim the node (CONFLICT naming the holder), and nothing it does (its
// reaper's pass, its listing, its shutdown's last sweep) touches the
// first one's running container: the first one's run ends as its caller
// says, not lost.
func TestSecondInstanceOfANode(t *testing.T) {
	a, _ := newTestExecutor(t, nil)
	job := newJob(t, nil, "sleep", "60")
	done := executeAsync(t, a, job)
	waitState(t, a, job.RunID, sandgate.StateRunning)

	b, err := executor.New(executor.Config{DockerHost: executortest.DockerHost(), Node: a.Node()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, step := range map[string]func() error{"Claim": func() error { return b.Claim(ctx) }, "Start": func() error { return b.Start(ctx) }} {
		if err := step(); sandgate.ErrorCodeOf(err) != sandgate.CodeConflict || !strings.Contains(err.Error(), "held by a live gateway") {
			t.Errorf("%s of a held node = %v, want CONFLICT naming the holder", name, err)
		}
	}
	if removed, err := b.Reaper().CleanupOrphans(ctx); err != nil || len(removed) > 0 {
		t.Errorf("the second instance's reaper removed %+v (%v)", removed, err)
	}
	boxes, err := b.Reaper().Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range boxes {
		if s.RunID == job.RunID && s.Orphan {
			t.Errorf("the second instance lists the first one's running container as an orphan")
		}
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	b.Close()
	if n := len(managed(t, a.Node())); n != 1 {
		t.Errorf("%d container(s) of the node after the second instance's shutdown, want the first one's", n)
	}
	if err := a.Cancel(ctx, job.RunID); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Outcome != sandgate.OutcomeCancelled {
		t.Errorf("the first instance's run ended %s (%+v), want cancelled", res.Outcome, res.Error)
	}
}

// TestDeadInstanceTakenOver: a gateway that died without giving its node
// up (a lease volume of a process of this host that is gone, and a
// container of its instance) does not hold the node: the next executor of
// the node claims it at once, and its reaper removes the dead instance's
// container and lease.
func TestDeadInstanceTakenOver(t *testing.T) {
	ctx := context.Background()
	node := "test-" + sandgatetest.RandomHex(t, 6)
	dead := "dead-" + sandgatetest.RandomHex(t, 4)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	pidns, _ := os.Readlink("/proc/self/ns/pid")
	lease := "sandgate-lease-" + node + "-" + dead + "-1"
	_, err := docker(t).VolumeCreate(ctx, volume.CreateOptions{Name: lease, Labels: map[string]string{
		"sandgate.lease.node": node, "sandgate.lease.instance": dead, "sandgate.lease.host": host,
		"sandgate.lease.boot": strings.TrimSpace(string(boot)), "sandgate.lease.pidns": pidns,
		"sandgate.lease.pid": strconv.Itoa(gone.Process.Pid), "sandgate.lease.process_start": "1",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker(t).VolumeRemove(context.Background(), lease, true) })
	left, err := docker(t).ContainerCreate(ctx, &container.Config{Image: images.SandboxImage, Cmd: []string{"true"}, Labels: map[string]string{
		sandgate.LabelManaged: "true", sandgate.LabelNode: node, executor.LabelInstance: dead, sandgate.LabelRunID: "gone",
	}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}

	newTestExecutor(t, func(c *executor.Config) { c.Node = node })
	if _, err := docker(t).ContainerInspect(ctx, left.ID); err == nil {
		t.Errorf("the dead instance's container %s is still there", left.ID)
	}
	vols, err := docker(t).VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("name", lease))})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols.Volumes {
		if v.Name == lease {
			t.Errorf("the dead instance's lease %s is still there", lease)
		}
	}
}
