package imagesig_test

import (
	"crypto/elliptic"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/sandgate/sandgate/imagesig"
)

const (
	idA = "sha256:" + "aa00000000000000000000000000000000000000000000000000000000000000"
	idB = "sha256:" + "bb00000000000000000000000000000000000000000000000000000000000000"
)

// keyPair writes a cosign-style ECDSA P-256 key pair: the private key
// encrypted with password as cosign generate-key-pair does ("ENCRYPTED
// SIGSTORE PRIVATE KEY"), or plain PKCS#8 when password is empty, and the
// public key as NAME.pub in dir.
func keyPair(t *testing.T, dir, name, password string) []byte {
	t.Helper()
	var pf cryptoutils.PassFunc
	if password != "" {
		pf = func(bool) ([]byte, error) { return []byte(password), nil }
	}
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), pf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	return priv
}

// TestSignVerify: a signature verifies with the key that made it, names
// that key, and fails with another, on a changed payload, or on a
// payload that is not sandgate's; cosign's encrypted keys sign with
// their password.
func TestSignVerify(t *testing.T) {
	dir := t.TempDir()
	release := keyPair(t, dir, "release", "s3cret")
	other := keyPair(t, t.TempDir(), "other", "")
	keys, err := imagesig.LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := imagesig.Sign(imagesig.Payload{ImageID: idA, Ref: "sandgate/python:3"}, release, []byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	p, signer, err := keys.Verify(s)
	if err != nil || signer != "release" || p.ImageID != idA {
		t.Fatalf("Verify = %+v, %q, %v", p, signer, err)
	}
	if _, err := imagesig.Sign(imagesig.Payload{ImageID: idA}, release, []byte("wrong")); err == nil {
		t.Fatal("an encrypted key opened with a wrong password")
	}
	forged, err := imagesig.Sign(imagesig.Payload{ImageID: idA}, other, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.Verify(forged); err == nil || !strings.Contains(err.Error(), "no pinned key") {
		t.Fatalf("a signature by an unpinned key: %v", err)
	}
	changed := s
	changed.Payload = []byte(strings.Replace(string(s.Payload), idA, idB, 1))
	if _, _, err := keys.Verify(changed); err == nil {
		t.Fatal("a payload changed after signing verified")
	}
}

// TestStoreSigner: the store keeps a signature for the image it signs
// only, and a signature copied under another image's ID is refused.
func TestStoreSigner(t *testing.T) {
	dir := t.TempDir()
	priv := keyPair(t, dir, "release", "")
	keys, err := imagesig.LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := imagesig.Sign(imagesig.Payload{ImageID: idA}, priv, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _, _ := keys.Verify(s)
	store := imagesig.Store{Dir: t.TempDir()}
	if err := store.Put(idB, s, p); err == nil {
		t.Fatal("a signature of A was stored for B")
	}
	if err := store.Put(idA, s, p); err != nil {
		t.Fatal(err)
	}
	if signer, err := store.Signer(idA, keys); err != nil || signer != "release" {
		t.Fatalf("Signer(A) = %q, %v", signer, err)
	}
	if signer, err := store.Signer(idB, keys); err != nil || signer != "" {
		t.Fatalf("Signer(B), unsigned = %q, %v", signer, err)
	}
	// The attack: A's files copied under B's name.
	a := strings.TrimPrefix(idA, "sha256:")
	b := strings.TrimPrefix(idB, "sha256:")
	for _, ext := range []string{".payload", ".sig"} {
		data, err := os.ReadFile(filepath.Join(store.Dir, a+ext))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(store.Dir, b+ext), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Signer(idB, keys); err == nil || !strings.Contains(err.Error(), "is of image") {
		t.Fatalf("a signature copied under another image's ID: %v", err)
	}
	if _, err := store.Signer("sha256:../../etc", keys); err == nil {
		t.Fatal("an image ID that is a path was accepted")
	}
}
