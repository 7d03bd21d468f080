package e2e

import (
	"context"
	"crypto/elliptic"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/sandgatetest"
)

// buildTinyImage builds an image of the sandbox with label mark, tagged
// tag, removed when the test ends, and returns its ID.
func buildTinyImage(t *testing.T, tag, mark string) string {
	t.Helper()
	dir := t.TempDir()
	df := "FROM sandgate/sandbox:latest\nLABEL sandgate.test.mark=" + mark + "\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("docker", "build", "-q", "-t", tag, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", tag, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", tag).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestSignedImages: a site signs an image offline (sandgate image sign, a
// cosign-format key), carries the tarball and its signature across
// (docker save, sandgate image load --signature), and its policy requires
// a signature by that key for the repository (data image_signers). A run
// of the signed image runs, and image.resolved names the signer. The
// attacks: an unsigned image of a repository that requires one, the
// signed tag moved to another image (re-tagged: signatures are by image
// ID), and the signature's files copied under the other image's ID: each
// is refused before a container is made, SBX-002 and image.unavailable
// naming image_signature and why.
func TestSignedImages(t *testing.T) {
	sfx := sandgatetest.RandomHex(t, 4)
	signedRepo, unsignedRepo := "sandgate-test/signed-"+sfx, "sandgate-test/unsigned-"+sfx
	signedRef, unsignedRef := signedRepo+":1", unsignedRepo+":1"
	signedID := buildTinyImage(t, signedRef, "signed-"+sfx)
	otherID := buildTinyImage(t, unsignedRef, "other-"+sfx)

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
	prefix := filepath.Join(state, "signed")
	cli("image", "sign", signedRef, "--key", keyFile, "--out", prefix)
	tarball := filepath.Join(state, "signed.tar")
	if out, err := exec.Command("docker", "save", "-o", tarball, signedRef).CombinedOutput(); err != nil {
		t.Fatalf("docker save: %v\n%s", err, out)
	}
	if out := cli("image", "load", tarball, "--signature", prefix); !strings.Contains(out, "by release kept") {
		t.Fatalf("image load --signature: %s", out)
	}

	dir := bundleWith(t, func(cfg map[string]any) {
		cfg["allowed_images"] = append(cfg["allowed_images"].([]any), signedRepo, unsignedRepo)
		cfg["image_signers"] = map[string]any{
			"default": map[string]any{signedRepo: []any{"release"}, unsignedRepo: []any{"release"}},
			"teams":   map[string]any{},
		}
	})
	opts := []serverOption{withEnv("SANDGATE_POLICY_DIR", dir)}
	for k, v := range env {
		if strings.HasPrefix(k, "SANDGATE_IMAGE") {
			opts = append(opts, withEnv(k, v))
		}
	}
	s := startServer(t, opts...)

	ok := s.submitWait(t, s.Token, `{"image":"`+signedRef+`","command":["echo","signed"]}`)
	if ok.ExitCode == nil || *ok.ExitCode != 0 {
		t.Fatalf("the signed image's run: %+v", ok)
	}
	resolved := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {ok.ID}, "type": {string(sandgate.EventImageResolved)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) > 0 })
	if resolved[0].Payload["signer"] != "release" || resolved[0].Payload["image_id"] != signedID {
		t.Fatalf("image.resolved %v", resolved[0].Payload)
	}

	refused := func(what, ref, why string) {
		t.Helper()
		run := s.submitWait(t, s.Token, `{"image":"`+ref+`","command":["echo","ran"]}`)
		if run.Error == nil || run.Error.Code != sandgate.CodeImageUnavailable || !strings.Contains(run.Error.Message, "image_signature") || !strings.Contains(run.Error.Message, why) {
			t.Fatalf("%s: %+v", what, run)
		}
		ev := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}}, func(ev []sandgate.AuditRecord) bool {
			return hasEvent(ev, sandgate.EventImageUnavailable)
		})
		if hasEvent(ev, sandgate.EventContainerCreated) {
			t.Fatalf("%s: a container was created: %s", what, eventTypes(ev))
		}
	}
	refused("an unsigned image", unsignedRef, "it is not signed")

	// Re-tagged: the signed name now points at the other image.
	if out, err := exec.Command("docker", "tag", otherID, signedRef).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v\n%s", err, out)
	}
	refused("the signed tag moved to another image", signedRef, "it is not signed")

	// The signature's files copied under the other image's ID.
	sigs := env["SANDGATE_IMAGE_SIGNATURE_DIR"]
	for _, ext := range []string{".payload", ".sig"} {
		data, err := os.ReadFile(filepath.Join(sigs, strings.TrimPrefix(signedID, "sha256:")+ext))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sigs, strings.TrimPrefix(otherID, "sha256:")+ext), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	refused("a signature copied under another image's ID", signedRef, "is of image")
}
