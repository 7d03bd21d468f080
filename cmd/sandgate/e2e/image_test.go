package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestImageListAndPruneCommands builds the sandbox image under a tag of
// its own, lists it (JSON and table, with its pin) and dry-runs prune over
// the sandbox label: tagged sandbox images are always kept, so only
// dangling ones may be offered, and nothing is removed.
func TestImageListAndPruneCommands(t *testing.T) {
	executortest.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := map[string]string{"DOCKER_HOST": executortest.DockerHost()}
	cli := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := runApp(ctx, args, env, &out, nil)
		return out.String(), err
	}

	// A sandbox build under a tag of its own: labelled as a sandbox image.
	tag := "sandgate/sandbox-cmdtest:" + sandgatetest.RandomHex(t, 4)
	t.Cleanup(func() { exec.Command("docker", "image", "rm", "-f", tag).Run() })
	if out, err := cli("image", "build", "--tag", tag); err != nil {
		t.Fatalf("image build: %v\n%s", err, out)
	}

	out := mustOK(t)(cli("image", "list", "--json", "--label", "org.opencontainers.image.source=sandgate image build"))
	var list struct {
		Images []images.ImageInfo `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("image list --json: %v\n%s", err, out)
	}
	var mine *images.ImageInfo
	for i, img := range list.Images {
		if !img.Sandbox {
			t.Errorf("label filter let through a non-sandbox image: %+v", img)
		}
		for _, rt := range img.RepoTags {
			if rt == tag {
				mine = &list.Images[i]
			}
		}
	}
	if mine == nil {
		t.Fatalf("image list does not show %s:\n%s", tag, out)
	}
	wantPin := "sandgate/sandbox-cmdtest@" + mine.ID
	found := false
	for _, p := range mine.Pins {
		found = found || p == wantPin
	}
	if !found || mine.Size <= 0 {
		t.Errorf("%s: pins %v (want %s), size %d", tag, mine.Pins, wantPin, mine.Size)
	}

	table := mustOK(t)(cli("image", "list"))
	if !strings.HasPrefix(table, "NAME") || !strings.Contains(table, tag) || !strings.Contains(table, wantPin) {
		t.Errorf("image list table lacks %s or its pin:\n%s", tag, table)
	}

	// Sandbox images are never pruned, even unused: a dry run over the
	// sandbox label offers nothing tagged.
	dry := mustOK(t)(cli("image", "prune", "--dry-run", "--json", "--label", "org.opencontainers.image.source=sandgate image build"))
	var rep images.PruneReport
	if err := json.Unmarshal([]byte(dry), &rep); err != nil {
		t.Fatalf("image prune --json: %v\n%s", err, dry)
	}
	if !rep.DryRun || rep.Kept < 1 {
		t.Errorf("dry run report %+v, want dry_run and the sandbox images kept", rep)
	}
	for _, p := range rep.Removed {
		if p.Reason != "dangling" {
			t.Errorf("dry run offers a tagged sandbox image: %+v", p)
		}
	}
	if _, err := exec.Command("docker", "image", "inspect", tag).Output(); err != nil {
		t.Errorf("%s is gone after a dry run: %v", tag, err)
	}
}

// mustOK fails the test when a command failed, else returns its output.
func mustOK(t *testing.T) func(string, error) string {
	return func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("sandgate: %v\n%s", err, out)
		}
		return out
	}
}
