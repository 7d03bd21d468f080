package images_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate"
	recipefiles "github.com/sandgate/sandgate/deploy/images"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestRecipeImages checks the language images on the real daemon (the
// Node LTS and toolchain images from trixie too): the
// sandbox user, the workspace, the labels that record the recipe and
// every package version, that a second build of the same recipe reuses
// the image, and that BuiltImages lists them.
func TestRecipeImages(t *testing.T) {
	recipes, err := images.LoadRecipes(recipefiles.Recipes)
	if err != nil {
		t.Fatal(err)
	}
	im := newTestImages(t)
	ctx := context.Background()
	for _, tc := range []struct{ recipe, pkg string }{
		{"python", "python3="}, {"node", "nodejs="}, {"node-lts", "nodejs=20."}, {"toolchain", "ripgrep="},
	} {
		t.Run(tc.recipe, func(t *testing.T) {
			b := executortest.RequireRecipeImage(t, tc.recipe)
			r, err := images.FindRecipe(recipes, tc.recipe)
			if err != nil {
				t.Fatal(err)
			}
			img, err := docker(t).ImageInspect(ctx, r.Image)
			if err != nil {
				t.Fatal(err)
			}
			c := img.Config
			if img.ID != b.ID || c.User != "10001:10001" || c.WorkingDir != "/workspace" || len(img.RootFS.Layers) != 1 {
				t.Errorf("image %s: id %s (built %s), user %q, workdir %q, %d layers", r.Image, img.ID, b.ID, c.User, c.WorkingDir, len(img.RootFS.Layers))
			}
			if c.Labels[images.LabelRecipe] != r.Name || c.Labels[images.LabelRecipeDigest] != r.Digest ||
				c.Labels[images.LabelDebianSuite] != r.Suite || !strings.Contains(c.Labels[images.LabelDebianPackages], tc.pkg) {
				t.Errorf("labels %v", c.Labels)
			}
			again, err := im.BuildRecipeImage(ctx, r, images.RecipeBuildOptions{Reuse: true})
			if err != nil || !again.Reused || again.ID != b.ID || again.Size == 0 {
				t.Errorf("second build = %+v, %v; want the image reused", again, err)
			}
		})
	}
	built, err := im.BuiltImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recipesListed := map[string]bool{}
	for _, b := range built {
		recipesListed[b.Recipe] = true
		if b.Recipe != "" && (len(b.Packages) == 0 || len(b.Pins) == 0) {
			t.Errorf("BuiltImages: %+v", b)
		}
	}
	if !recipesListed["python"] || !recipesListed["node"] || !recipesListed["node-lts"] || !recipesListed["toolchain"] || !recipesListed[""] {
		t.Errorf("BuiltImages lists recipes %v, want python, node, node-lts, toolchain and the sandbox image", recipesListed)
	}
}

// TestRecipeImageFailedCheckRemovesIt builds a one-package image whose
// check cannot run (base-files has no programs): the build fails naming
// the check, and no image of that name is left to be admitted.
func TestRecipeImageFailedCheckRemovesIt(t *testing.T) {
	im := newTestImages(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil && os.Getenv("CI") != "true" {
		t.Skipf("mmdebstrap: %v (run deploy/bootstrap.sh)", err)
	}
	tag := "sandgate/check-test:" + sandgatetest.RandomHex(t, 4)
	r, err := images.ParseRecipe("check-test.yaml", []byte(`name: check-test
image: `+tag+`
suite: bookworm
packages: [base-files]
source_date_epoch: 1764201600
checks:
  - name: a program that is not there
    command: [/usr/bin/true]
`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker(t).ImageRemove(context.Background(), tag, image.RemoveOptions{}) })
	_, err = im.BuildRecipeImage(context.Background(), r, images.RecipeBuildOptions{})
	if sandgate.ErrorCodeOf(err) != sandgate.CodeImageUnavailable || !strings.Contains(err.Error(), "a program that is not there") {
		t.Fatalf("BuildRecipeImage = %v, want SBX-002 naming the check", err)
	}
	if _, err := docker(t).ImageInspect(context.Background(), tag); !cerrdefs.IsNotFound(err) {
		t.Errorf("image %s after a failed check: %v, want not found", tag, errors.Unwrap(err))
	}
}
