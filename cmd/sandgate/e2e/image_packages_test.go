package e2e

import (
	"context"
	"crypto/elliptic"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// buildRecipeImage builds a one-package recipe image (Debian bookworm's
// busybox-static) tagged tag, removed when the test ends.
func buildRecipeImage(t *testing.T, tag string) images.RecipeBuild {
	t.Helper()
	if _, err := exec.LookPath("mmdebstrap"); err != nil && os.Getenv("CI") != "true" {
		t.Skipf("mmdebstrap: %v (run deploy/bootstrap.sh)", err)
	}
	r, err := images.ParseRecipe("pkgs.yaml", []byte("name: pkgs\nimage: "+tag+"\nsuite: bookworm\npackages: [busybox-static]\nsource_date_epoch: 1764201600\n"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := images.New(images.Config{DockerHost: os.Getenv("DOCKER_HOST")})
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	b, err := im.BuildRecipeImage(context.Background(), r, images.RecipeBuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// buildBareImage builds an image FROM scratch holding one file: no
// package list.
func buildBareImage(t *testing.T, tag string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY f /f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte(tag), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("docker", "build", "-q", "-t", tag, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", tag, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
}

// TestImagePackagesEndToEnd: a recipe image, signed and carried across
// as a tarball (docker save, sandgate image load --signature), is served
// by GET /v1/images/{ref}/packages by name and by ID with its package
// list; a run of it, under a policy that requires the signature, records
// in image.resolved both the signer and the digest of that list. An image
// with no list says so; an unknown one is 404 naming ref; hostile refs
// (a "..", 300 bytes, a digest that is not hex) are 400 naming ref.
func TestImagePackagesEndToEnd(t *testing.T) {
	sfx := sandgatetest.RandomHex(t, 4)
	repo := "sandgate-test/pkgs-" + sfx
	ref := repo + ":1"
	built := buildRecipeImage(t, ref)
	bare := "sandgate-test/bare-" + sfx + ":1"
	buildBareImage(t, bare)

	keys, state := t.TempDir(), t.TempDir()
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), func(bool) ([]byte, error) { return []byte("pw"), nil })
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(state, "release.key")
	if err := os.WriteFile(keyFile, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(keys, "release.pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"DOCKER_HOST": os.Getenv("DOCKER_HOST"), "COSIGN_PASSWORD": "pw",
		"SANDGATE_IMAGE_VERIFY_KEYS": keys, "SANDGATE_IMAGE_SIGNATURE_DIR": filepath.Join(state, "sigs"),
	}
	cli := func(args ...string) string {
		t.Helper()
		var out syncBuffer
		if err := runApp(context.Background(), args, env, &out, nil); err != nil {
			t.Fatalf("sandgate %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	prefix := filepath.Join(state, "pkgs")
	cli("image", "sign", ref, "--key", keyFile, "--out", prefix)
	tarball := filepath.Join(state, "pkgs.tar")
	if out, err := exec.Command("docker", "save", "-o", tarball, ref).CombinedOutput(); err != nil {
		t.Fatalf("docker save: %v\n%s", err, out)
	}
	if err := exec.Command("docker", "rmi", "-f", ref).Run(); err != nil {
		t.Fatal(err)
	}
	cli("image", "load", tarball, "--signature", prefix)

	dir := bundleWith(t, func(cfg map[string]any) {
		cfg["allowed_images"] = append(cfg["allowed_images"].([]any), repo)
		cfg["image_signers"] = map[string]any{"default": map[string]any{repo: []any{"release"}}, "teams": map[string]any{}}
	})
	opts := []serverOption{withEnv("SANDGATE_POLICY_DIR", dir)}
	for k, v := range env {
		if strings.HasPrefix(k, "SANDGATE_IMAGE") {
			opts = append(opts, withEnv(k, v))
		}
	}
	s := startServer(t, opts...)
	ctx := context.Background()

	list, err := s.Client.ImagePackages(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !list.Listed || list.ID != built.ID || !strings.HasPrefix(list.Digest, "sha256:") {
		t.Fatalf("the loaded recipe image's list: %+v (built %s)", list, built.ID)
	}
	var bb *sandgate.Package
	for i, p := range list.Packages {
		if p.Name == "busybox-static" {
			bb = &list.Packages[i]
		}
	}
	if bb == nil || bb.Source != "busybox" || bb.Architecture == "" || !strings.HasPrefix(bb.Version, "1:") {
		t.Fatalf("busybox-static in %+v", list.Packages)
	}
	byID, err := s.Client.ImagePackages(ctx, built.ID)
	if err != nil || byID.Digest != list.Digest || len(byID.Packages) != len(list.Packages) {
		t.Fatalf("by ID: %+v, %v", byID, err)
	}
	env["SANDGATE_URL"], env["SANDGATE_TOKEN"] = s.URL, s.Token
	out := cli("image", "packages", ref)
	if !strings.Contains(out, "busybox-static") || !strings.Contains(out, list.Digest) {
		t.Errorf("sandgate image packages: %s", out)
	}

	run := s.submitWait(t, s.Token, `{"image":"`+ref+`","command":["busybox","echo","hi"]}`)
	if run.ExitCode == nil || *run.ExitCode != 0 {
		t.Fatalf("a run of the signed recipe image: %+v", run)
	}
	resolved := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}, "type": {string(sandgate.EventImageResolved)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) > 0 })
	if p := resolved[0].Payload; p["signer"] != "release" || p["packages_sha256"] != list.Digest || p["image_id"] != built.ID {
		t.Fatalf("image.resolved %v, want signer release and packages_sha256 %s", p, list.Digest)
	}

	none, err := s.Client.ImagePackages(ctx, bare)
	if err != nil || none.Listed || none.Reason == "" || len(none.Packages) != 0 {
		t.Errorf("an image with no list: %+v, %v", none, err)
	}
	for _, tc := range []struct {
		name, ref string
		code      sandgate.ErrorCode
	}{
		{"unknown", "sandgate-test/none-" + sfx + ":1", sandgate.CodeNotFound},
		{"dot dot", repo + "/../../etc:1", sandgate.CodeInvalidRequest},
		{"very long", repo + "/" + strings.Repeat("a", 300) + ":1", sandgate.CodeInvalidRequest},
		{"digest not hex", repo + "@sha256:" + strings.Repeat("g", 64), sandgate.CodeInvalidRequest},
		{"ID not hex", "sha256:" + strings.Repeat("Z", 64), sandgate.CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Client.ImagePackages(ctx, tc.ref)
			var se *sandgate.Error
			if !errors.As(err, &se) || se.Code != tc.code || se.Field != "ref" {
				t.Errorf("ImagePackages(%.60q) = %v, want %s naming ref", tc.ref, err, tc.code)
			}
		})
	}
}
