package executor_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestBuildSandboxImage builds the sandbox recipe under a scratch tag and
// checks the image: non-root user, busybox applets, no base image.
func TestBuildSandboxImage(t *testing.T) {
	ex, _ := newTestExecutor(t, nil)
	ctx := context.Background()
	tag := "sandgate/sandbox-test:" + sandgatetest.RandomHex(t, 4)
	t.Cleanup(func() { docker(t).ImageRemove(context.Background(), tag, image.RemoveOptions{}) })
	var progress strings.Builder
	id, err := newTestImages(t).BuildSandboxImage(ctx, images.BuildOptions{Tag: tag, Progress: &progress})
	if err != nil {
		t.Fatalf("BuildSandboxImage: %v\n%s", err, progress.String())
	}
	if !strings.HasPrefix(id, "sha256:") || !strings.Contains(progress.String(), "FROM scratch") {
		t.Errorf("id %q, progress %q", id, progress.String())
	}
	img, err := docker(t).ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config == nil || img.Config.User != "10001:10001" || img.Config.WorkingDir != "/workspace" || len(img.RootFS.Layers) != 2 {
		t.Errorf("image config %+v, layers %d; want user 10001:10001, workdir /workspace, two layers", img.Config, len(img.RootFS.Layers))
	}
	res := execute(t, ex, newJob(t, func(s *sandgate.RunSpec) { s.Image = tag }, "sh", "-c", "id -u; id -g; ls /bin; test -d /tmp -a -w /tmp && echo tmp-ok"))
	lines := strings.Split(strings.TrimSpace(text(res.Stdout)), "\n")
	if len(lines) < 3 || lines[0] != "10001" || lines[1] != "10001" || lines[len(lines)-1] != "tmp-ok" {
		t.Fatalf("stdout = %q", text(res.Stdout))
	}
	// Every applet of the busybox the image carries has its link, and the
	// release file says which busybox that is and where it came from.
	res = execute(t, ex, newJob(t, func(s *sandgate.RunSpec) { s.Image = tag }, "sh", "-c", "busybox --list; cat /etc/sandgate-release"))
	applets, release, _ := strings.Cut(text(res.Stdout), "busybox_sha256=")
	if !strings.Contains(release, "busybox_version=BusyBox v") || !strings.Contains(release, "busybox_source=") {
		t.Errorf("/etc/sandgate-release does not name the busybox: %q", release)
	}
	for _, applet := range strings.Fields(applets) {
		if applet != "busybox" && !slices.Contains(lines, applet) {
			t.Errorf("applet %s missing from /bin", applet)
		}
	}

	// A fresh cache volume mounted at /cache is writable by the image's
	// user and by another unprivileged one, and keeps what they wrote.
	volume := "cachetest-" + sandgatetest.RandomHex(t, 4)
	withCache := func(user string) func(*sandgate.RunSpec) {
		return func(s *sandgate.RunSpec) {
			s.Image, s.User = tag, user
			s.Volumes = []sandgate.Volume{{Name: volume, Target: "/cache"}}
		}
	}
	res = execute(t, ex, newJob(t, withCache(""), "sh", "-c", "echo kept > /cache/a && cat /cache/a"))
	if exitCode(res) != 0 || text(res.Stdout) != "kept\n" {
		t.Errorf("first use of the cache as 10001: exit %d, stdout %q, stderr %q", exitCode(res), text(res.Stdout), text(res.Stderr))
	}
	res = execute(t, ex, newJob(t, withCache("10002:10002"), "sh", "-c", "cat /cache/a && echo more > /cache/b && echo written"))
	if exitCode(res) != 0 || text(res.Stdout) != "kept\nwritten\n" {
		t.Errorf("the cache as 10002: exit %d, stdout %q, stderr %q", exitCode(res), text(res.Stdout), text(res.Stderr))
	}

	if _, err := newTestImages(t).BuildSandboxImage(ctx, images.BuildOptions{Tag: tag, Busybox: "/bin/ls"}); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("build with a dynamic binary = %v, want refused", err)
	}
}

// TestLocalDigestPin runs the sandbox image by repository@ID, the pin
// `sandgate image list` prints for an image with no registry digest, and
// checks that a pin naming another repository or an unknown ID is refused.
func TestLocalDigestPin(t *testing.T) {
	ex, _ := newTestExecutor(t, nil)
	id, err := newTestImages(t).ImageID(context.Background(), images.SandboxImage)
	if err != nil {
		t.Fatal(err)
	}
	pinned := "sandgate/sandbox@" + id
	res := execute(t, ex, newJob(t, func(s *sandgate.RunSpec) { s.Image = pinned }, "sh", "-c", "echo pinned; id -u"))
	if exitCode(res) != 0 || text(res.Stdout) != "pinned\n10001\n" {
		t.Fatalf("pinned run: exit %d, stdout %q, stderr %q", exitCode(res), text(res.Stdout), text(res.Stderr))
	}
	ci, err := docker(t).ContainerList(context.Background(), container.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ci {
		if c.ID == res.ContainerID {
			t.Errorf("container %s of the finished run still exists", c.ID)
		}
	}

	for name, ref := range map[string]string{
		"other repository": "sandgate/other@" + id,
		"unknown ID":       "sandgate/sandbox@sha256:" + strings.Repeat("0", 64),
	} {
		t.Run(name, func(t *testing.T) {
			job := newJob(t, func(s *sandgate.RunSpec) { s.Image = ref }, "true")
			_, err := ex.Execute(context.Background(), job)
			if code := sandgate.ErrorCodeOf(err); code != sandgate.CodeImageUnavailable {
				t.Errorf("Execute(%s) = %v (code %q), want %s", ref, err, code, sandgate.CodeImageUnavailable)
			}
		})
	}
}
