package images_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// buildTiny builds a one-file image FROM scratch with the given labels and
// returns its ID.
func buildTiny(t *testing.T, tag, content string, labels map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string]string{"Dockerfile": "FROM scratch\nCOPY f /f\n", "f": content} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := docker(t).ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags: []string{tag}, Labels: labels, Remove: true, ForceRemove: true, NetworkMode: "none", Version: build.BuilderV1,
	})
	if err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	img, err := docker(t).ImageInspect(ctx, tag)
	if err != nil {
		t.Fatalf("inspect %s: %v\n%s", tag, err, out)
	}
	return img.ID
}

// TestListAndPruneImages prunes only images labelled for this test, so
// that it never touches images other tests or the operator rely on.
func TestListAndPruneImages(t *testing.T) {
	ctx := context.Background()
	suffix := sandgatetest.RandomHex(t, 4)
	label := "sandgate.test.prune=" + suffix
	labels := map[string]string{"sandgate.test.prune": suffix}
	repo := "sandgate-test/prune-" + suffix
	sandboxLabels := map[string]string{"sandgate.test.prune": suffix, "org.opencontainers.image.source": "sandgate image build"}

	oldID := buildTiny(t, repo+":v1", "old "+suffix, labels)        // becomes dangling
	newID := buildTiny(t, repo+":v1", "new "+suffix, labels)        // unused, tagged
	usedID := buildTiny(t, repo+"-used:v1", "used "+suffix, labels) // a container holds it
	keptID := buildTiny(t, repo+"-keep:v1", "keep "+suffix, labels) // in --keep
	sbxID := buildTiny(t, repo+"-sandbox:v1", "sbx "+suffix, sandboxLabels)
	t.Cleanup(func() {
		for _, id := range []string{oldID, newID, usedID, keptID, sbxID} {
			docker(t).ImageRemove(context.Background(), id, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
	c, err := docker(t).ContainerCreate(ctx, &container.Config{Image: repo + "-used:v1", Cmd: []string{"/f"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		docker(t).ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})

	list, err := newTestImages(t).ListImages(ctx, images.ListOptions{Label: label})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]images.ImageInfo{}
	for _, img := range list {
		byID[img.ID] = img
	}
	if len(list) != 5 || !list[0].Sandbox || list[0].ID != sbxID {
		t.Fatalf("ListImages = %+v; want 5 images, the sandbox one first", list)
	}
	if got := byID[oldID]; !got.Dangling || len(got.RepoTags) != 0 || len(got.Pins) != 0 {
		t.Errorf("old build = %+v, want dangling with no names and no pins", got)
	}
	if got := byID[newID]; got.Dangling || !slices.Equal(got.RepoTags, []string{repo + ":v1"}) ||
		!slices.Equal(got.Pins, []string{repo + "@" + newID}) || got.Size <= 0 || got.Created.IsZero() {
		t.Errorf("tagged image = %+v, want tag %s:v1 and pin %s@%s", got, repo, repo, newID)
	}
	if got := byID[usedID]; got.Containers != 1 {
		t.Errorf("used image counts %d containers, want 1", got.Containers)
	}

	opts := images.PruneOptions{DryRun: true, Label: label, Keep: []string{repo + "-keep"}}
	dry, err := newTestImages(t).PruneImages(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	removed := func(rep images.PruneReport) map[string]string {
		m := map[string]string{}
		for _, p := range rep.Removed {
			m[p.ID] = p.Reason
		}
		return m
	}
	want := map[string]string{oldID: "dangling", newID: "unused"}
	if got := removed(dry); len(got) != 2 || got[oldID] != want[oldID] || got[newID] != want[newID] || dry.Kept != 3 || !dry.DryRun {
		t.Fatalf("dry run = %+v, want %v removed and 3 kept", dry, want)
	}
	for _, id := range []string{oldID, newID} {
		if _, err := docker(t).ImageInspect(ctx, id); err != nil {
			t.Errorf("dry run removed %s: %v", id, err)
		}
	}

	dangling, err := newTestImages(t).PruneImages(ctx, images.PruneOptions{Label: label, DanglingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := removed(dangling); len(got) != 1 || got[oldID] != "dangling" || len(dangling.Failed) != 0 {
		t.Fatalf("dangling-only prune = %+v, want only %s", dangling, oldID)
	}

	opts.DryRun = false
	rep, err := newTestImages(t).PruneImages(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := removed(rep); len(got) != 1 || got[newID] != "unused" || len(rep.Failed) != 0 || rep.Bytes <= 0 {
		t.Fatalf("prune = %+v, want only %s removed", rep, newID)
	}
	for id, gone := range map[string]bool{oldID: true, newID: true, usedID: false, keptID: false, sbxID: false} {
		_, err := docker(t).ImageInspect(ctx, id)
		if gone != (err != nil) {
			t.Errorf("image %s: inspect error %v, want gone=%t", id, err, gone)
		}
	}
}
