package policytest

import (
	"archive/tar"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const opaModule = "github.com/open-policy-agent/opa"

var opaOnce struct {
	sync.Once
	path string
	err  error
}

// OPA returns the path of the real opa CLI, of the version this module
// builds against, installed once per machine with `go install` into the
// user's cache directory, as the Makefile runs staticcheck. Tests sign
// bundles with it, so that sandgate verifies what OPA writes.
func OPA(t testing.TB) string {
	t.Helper()
	opaOnce.Do(func() { opaOnce.path, opaOnce.err = installOPA() })
	if opaOnce.err != nil {
		t.Fatalf("install the opa CLI: %v", opaOnce.err)
	}
	return opaOnce.path
}

func installOPA() (string, error) {
	// The version go.mod requires: a test runs inside the module.
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", opaModule).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", opaModule, err)
	}
	version := strings.TrimSpace(string(out))
	if version == "" {
		return "", errors.New("go.mod does not require " + opaModule)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "sandgate-test", "opa-"+version)
	bin := filepath.Join(dir, "opa")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, ".install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", opaModule+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New(strings.TrimSpace(string(out)) + ": " + err.Error())
	}
	// Rename is atomic: a concurrent installer finds either nothing or
	// the whole binary.
	if err := os.Rename(filepath.Join(tmp, "opa"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// KeyPair is a signing key written as PEM files in a test's directory.
type KeyPair struct {
	// Private is the PEM private key's path, Public the PEM public key's.
	Private, Public string
}

// NewRSAKey writes a new RSA key pair to dir as NAME.key and NAME.pem.
func NewRSAKey(t testing.TB, dir, name string) KeyPair {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return writeKeyPair(t, dir, name, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}, &k.PublicKey)
}

// NewECKey writes a new ECDSA P-256 key pair to dir as NAME.key and
// NAME.pem.
func NewECKey(t testing.TB, dir, name string) KeyPair {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return writeKeyPair(t, dir, name, &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}, &k.PublicKey)
}

func writeKeyPair(t testing.TB, dir, name string, priv *pem.Block, pub any) KeyPair {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	kp := KeyPair{Private: filepath.Join(dir, name+".key"), Public: filepath.Join(dir, name+".pem")}
	if err := os.WriteFile(kp.Private, pem.EncodeToMemory(priv), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kp.Public, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return kp
}

// OPABuild signs the bundle in src with the real opa CLI, as a site
// would: `opa build --bundle . --signing-key KEY --verification-key-id ID
// --revision REV` run inside src, and returns a new directory holding the
// built bundle unpacked (its modules, data.json, .manifest and
// .signatures.json), ready to be a SANDGATE_POLICY_DIR. extra are further
// flags (--signing-alg ES256).
func OPABuild(t testing.TB, src, key, keyID, revision string, extra ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	args := append([]string{"build", "--bundle", ".", "--signing-key", key, "--verification-key-id", keyID, "--revision", revision, "-o", out}, extra...)
	cmd := exec.Command(OPA(t), args...)
	cmd.Dir = src
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opa %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	dir := t.TempDir()
	untar(t, out, dir)
	return dir
}

// untar unpacks the regular files at the top of the gzipped tarball into
// dir (an opa-built bundle holds nothing else once built from inside its
// directory).
func untar(t testing.TB, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(h.Name, "/")
		if h.Typeflag != tar.TypeReg || strings.Contains(name, "/") {
			t.Fatalf("opa build wrote %q, not a file at the top of the bundle", h.Name)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// CopyDefaultBundle copies the default bundle (the policies directory's
// *.rego and data.json) into a new directory and returns it.
func CopyDefaultBundle(t testing.TB) string {
	t.Helper()
	return Bundle(t, nil)
}

// OPAVerify asks the real opa CLI to verify the bundle in dir against the
// public key pub under keyID, as OPA verifies a bundle it downloads: the
// directory's files packed as a bundle tarball, then `opa build --bundle
// TARBALL --verification-key PUB --verification-key-id ID`. It returns
// opa's output and its error.
func OPAVerify(t testing.TB, dir, pub, keyID string) (string, error) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "bundle.tar.gz")
	tarDir(t, dir, archive)
	cmd := exec.Command(OPA(t), "build", "--bundle", archive, "--verification-key", pub,
		"--verification-key-id", keyID, "-o", filepath.Join(t.TempDir(), "out.tar.gz"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tarDir packs the regular files at the top of dir into a gzipped bundle
// tarball, each as /NAME.
func tarDir(t testing.TB, dir, archive string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: "/" + e.Name(), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
}
