package images_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestRecipePackageList builds one small recipe twice: both builds give
// the same image ID and the same package list, and the list the image
// carries (its label, served by ImagePackages) is what `dpkg -l` reports
// inside the image, each package with its documentation directory.
func TestRecipePackageList(t *testing.T) {
	im := newTestImages(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil && os.Getenv("CI") != "true" {
		t.Skipf("mmdebstrap: %v (run deploy/bootstrap.sh)", err)
	}
	ctx := context.Background()
	tag := "sandgate/packages-test:" + sandgatetest.RandomHex(t, 4)
	r, err := images.ParseRecipe("packages-test.yaml", []byte("name: packages-test\nimage: "+tag+"\nsuite: bookworm\npackages: [zlib1g]\nsource_date_epoch: 1764201600\n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker(t).ImageRemove(context.Background(), tag, image.RemoveOptions{PruneChildren: true}) })
	first, err := im.BuildRecipeImage(ctx, r, images.RecipeBuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := im.ImagePackages(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	second, err := im.BuildRecipeImage(ctx, r, images.RecipeBuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := im.ImagePackages(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != second.ID || second.Reused {
		t.Errorf("two builds of one recipe: %s and %s (reused %v), want one ID, built twice", first.ID, second.ID, second.Reused)
	}
	if diff := cmp.Diff(listed, again); diff != "" {
		t.Errorf("the second build's list (-first +second):\n%s", diff)
	}
	if !listed.Listed || listed.ID != first.ID || !strings.HasPrefix(listed.Digest, "sha256:") {
		t.Fatalf("ImagePackages = %+v", listed)
	}
	byName := map[string]sandgate.Package{}
	for _, p := range listed.Packages {
		byName[p.Name] = p
	}
	if z := byName["zlib1g"]; z.Source != "zlib" || z.Architecture == "" || byName["libc6"].Source != "glibc" {
		t.Errorf("zlib1g %+v, libc6 %+v: want their sources zlib and glibc", z, byName["libc6"])
	}

	out := runWithBusybox(t, first.ID, "dpkg -l; echo DOCS; ls /usr/share/doc")
	inImage, docs := dpkgList(out)
	want := map[string]string{}
	for _, p := range listed.Packages {
		want[p.Name] = p.Version
		if !docs[p.Name] {
			t.Errorf("package %s has no /usr/share/doc/%s in the image", p.Name, p.Name)
		}
	}
	if diff := cmp.Diff(want, inImage); diff != "" {
		t.Errorf("dpkg -l in the image (-listed +dpkg):\n%s\n%s", diff, out)
	}
}

// runWithBusybox runs script with busybox's sh in a container of image
// id, which has no shell: the sandbox image's static busybox is copied in
// as /busybox before the container starts.
func runWithBusybox(t *testing.T, id, script string) string {
	t.Helper()
	ctx := context.Background()
	d := docker(t)
	src, err := d.ContainerCreate(ctx, &container.Config{Image: images.SandboxImage, Cmd: []string{"true"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatalf("a container of %s: %v (make image)", images.SandboxImage, err)
	}
	defer d.ContainerRemove(ctx, src.ID, container.RemoveOptions{Force: true})
	bb, _, err := d.CopyFromContainer(ctx, src.ID, "/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	defer bb.Close()
	c, err := d.ContainerCreate(ctx, &container.Config{Image: id, User: "10001:10001", Cmd: []string{"/busybox", "sh", "-c", script}},
		&container.HostConfig{NetworkMode: "none", CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	if err := d.CopyToContainer(ctx, c.ID, "/", bb, container.CopyToContainerOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	waitC, errC := d.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	select {
	case w := <-waitC:
		if w.StatusCode != 0 {
			t.Errorf("script exited %d", w.StatusCode)
		}
	case err := <-errC:
		t.Fatal(err)
	}
	logs, err := d.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, io.LimitReader(logs, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if stderr.Len() > 0 {
		t.Logf("stderr: %s", stderr.String())
	}
	return stdout.String()
}

// dpkgList reads `dpkg -l` ("ii  NAME  VERSION") then, after DOCS, one
// directory of /usr/share/doc a line.
func dpkgList(out string) (map[string]string, map[string]bool) {
	pkgs, docs := map[string]string{}, map[string]bool{}
	before, after, _ := strings.Cut(out, "DOCS\n")
	for _, line := range strings.Split(before, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "ii" {
			pkgs[f[1]] = f[2]
		}
	}
	for _, d := range strings.Fields(after) {
		docs[d] = true
	}
	return pkgs, docs
}

// TestSandboxImagePackageList builds the sandbox image under a scratch
// tag: its list names the one Debian package its busybox came from, and
// the version is the one the busybox in the image prints in its banner
// ("BusyBox v1.37.0 (Debian 1:1.37.0-6+b9)").
func TestSandboxImagePackageList(t *testing.T) {
	im := newTestImages(t)
	ctx := context.Background()
	tag := "sandgate/sandbox-packages-test:" + sandgatetest.RandomHex(t, 4)
	t.Cleanup(func() { docker(t).ImageRemove(context.Background(), tag, image.RemoveOptions{PruneChildren: true}) })
	id, err := im.BuildSandboxImage(ctx, images.BuildOptions{Tag: tag})
	if err != nil {
		t.Fatal(err)
	}
	list, err := im.ImagePackages(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if !list.Listed {
		// A busybox of no Debian package (not the case on Debian hosts,
		// where it is the host's or Debian's busybox-static) must say so.
		t.Fatalf("the sandbox image has no list: %q", list.Reason)
	}
	if len(list.Packages) != 1 || list.Packages[0].Name != "busybox-static" || list.Packages[0].Source != "busybox" {
		t.Fatalf("the sandbox image's list: %+v", list.Packages)
	}
	banner := runWithBusybox(t, id, "/bin/busybox 2>&1 | head -n 1")
	if want := "(Debian " + list.Packages[0].Version + ")"; !strings.Contains(banner, want) {
		t.Errorf("the image's busybox says %q; the list says %s", banner, want)
	}
}
