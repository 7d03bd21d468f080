package policies_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
	"github.com/sandgate/sandgate/policies/policytest"
)

// signedSetup is a bundle signed by the real opa CLI, and the directory of
// pinned public keys that verifies it.
type signedSetup struct {
	keys    string // a directory of pinned public keys
	key     policytest.KeyPair
	bundle  string // the opa-built bundle, unpacked
	pinned  *policies.VerifyKeys
	private string // the key directory (private keys too)
}

// signedOnce is the one opa-built signed bundle and key pair the tests
// share (building it takes opa a second or two); each test gets a copy.
var signedOnce struct {
	sync.Once
	dir, keys, private, bundle string
	key                        policytest.KeyPair
}

// TestMain removes the shared signed bundle once every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if signedOnce.dir != "" {
		os.RemoveAll(signedOnce.dir)
	}
	os.Exit(code)
}

// newSigned returns a copy of the default bundle built with `opa build
// --signing-key` under key ID "release" and revision "r-1", and its
// public key pinned.
func newSigned(t *testing.T) signedSetup {
	t.Helper()
	signedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandgate-signed-")
		if err != nil {
			t.Fatal(err)
		}
		signedOnce.dir = dir
		signedOnce.keys, signedOnce.private = filepath.Join(dir, "keys"), filepath.Join(dir, "private")
		for _, d := range []string{signedOnce.keys, signedOnce.private} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		signedOnce.key = policytest.NewRSAKey(t, signedOnce.private, "release")
		copyTo(t, signedOnce.key.Public, filepath.Join(signedOnce.keys, "release.pem"))
		signedOnce.bundle = policytest.OPABuild(t, policytest.CopyDefaultBundle(t), signedOnce.key.Private, "release", "r-1")
		// OPABuild's directory is the first test's; keep a copy of our own.
		own := filepath.Join(dir, "bundle")
		if err := os.Mkdir(own, 0o755); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(signedOnce.bundle)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			copyTo(t, filepath.Join(signedOnce.bundle, e.Name()), filepath.Join(own, e.Name()))
		}
		signedOnce.bundle = own
	})
	if signedOnce.bundle == "" {
		t.Fatal("the shared signed bundle could not be built")
	}
	s := signedSetup{keys: signedOnce.keys, key: signedOnce.key, bundle: copyDir(t, signedOnce.bundle), private: t.TempDir()}
	var err error
	if s.pinned, err = policies.LoadVerifyKeys(s.keys); err != nil {
		t.Fatal(err)
	}
	return s
}

func copyTo(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSignedBundleLoads: a bundle opa signed with a pinned key loads, and
// its signer's key ID and signed revision are in the status and in
// policy.loaded.
func TestSignedBundleLoads(t *testing.T) {
	s := newSigned(t)
	var ev events
	e := newEngine(t, policies.Options{Dir: s.bundle, VerifyKeys: s.pinned, Events: &ev})
	st := e.Status()
	if st.SignedBy != "release" || st.SignedRevision != "r-1" {
		t.Fatalf("status signed by %q revision %q, want release r-1", st.SignedBy, st.SignedRevision)
	}
	loaded := ev.last()
	if loaded.Type != sandgate.EventPolicyLoaded || loaded.Payload["signer_key_id"] != "release" || loaded.Payload["signed_revision"] != "r-1" {
		t.Fatalf("policy.loaded = %s %v", loaded.Type, loaded.Payload)
	}
	if d := decide(t, e, baseSpec()); !d.Allow {
		t.Fatalf("the signed default bundle denied the base spec: %+v", d.Violations)
	}
}

// TestSignedBundleRefused: with keys pinned, a bundle that is unsigned,
// signed by a key that is not pinned (under a pinned ID or another), or
// changed after signing (a file edited, added or removed, its manifest
// or its signature edited) is refused at start with the reason.
func TestSignedBundleRefused(t *testing.T) {
	s := newSigned(t)
	other := policytest.NewRSAKey(t, s.private, "other")
	cases := []struct {
		name string
		dir  func(t *testing.T) string
		want string
	}{
		{"unsigned", func(t *testing.T) string { return policytest.CopyDefaultBundle(t) }, "not signed"},
		{"unpinned key under the pinned ID", func(t *testing.T) string {
			return policytest.OPABuild(t, policytest.CopyDefaultBundle(t), other.Private, "release", "r-1")
		}, "failed to verify JWT signature"},
		{"unpinned key ID", func(t *testing.T) string {
			return policytest.OPABuild(t, policytest.CopyDefaultBundle(t), other.Private, "other", "r-1")
		}, "verification key corresponding to ID other not found"},
		{"data changed after signing", func(t *testing.T) string {
			dir := copyDir(t, s.bundle)
			writeFile(t, dir, "data.json", strings.Replace(readFile(t, dir, "data.json"), `"privileged_gids":[0,`, `"privileged_gids":[`, 1))
			return dir
		}, "data.json: digest mismatch"},
		{"module changed after signing", func(t *testing.T) string {
			dir := copyDir(t, s.bundle)
			writeFile(t, dir, "privileged.rego", readFile(t, dir, "privileged.rego")+"\n# an extra line\n")
			return dir
		}, "privileged.rego: digest mismatch"},
		{"module added after signing", func(t *testing.T) string {
			dir := copyDir(t, s.bundle)
			writeFile(t, dir, "zz_allow.rego", "package sandgate.extra\n\nx := 1\n")
			return dir
		}, "file zz_allow.rego not included in bundle signature"},
		{"data file added after signing", func(t *testing.T) string {
			dir := copyDir(t, s.bundle)
			writeFile(t, dir, "teams.json", `{"sandgate": {"extra": 1}}`)
			return dir
		}, "file teams.json not included in bundle signature"},
		{"module removed after signing", func(t *testing.T) string {
			dir := copyDir(t, s.bundle)
			if err := os.Remove(filepath.Join(dir, "privileged_test.rego")); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "lacks signed file(s) privileged_test.rego"},
		{"manifest revision changed", func(t *testing.T) string {
			dir := copyDir(t, s.bundle)
			writeFile(t, dir, ".manifest", strings.Replace(readFile(t, dir, ".manifest"), "r-1", "r-2", 1))
			return dir
		}, ".manifest: digest mismatch"},
		{"signature replaced by garbage", func(t *testing.T) string {
			dir := copyDir(t, s.bundle)
			writeFile(t, dir, ".signatures.json", `{"signatures": ["a.b.c"]}`)
			return dir
		}, ".signatures.json"},
		{"signature removed", func(t *testing.T) string {
			dir := copyDir(t, s.bundle)
			if err := os.Remove(filepath.Join(dir, ".signatures.json")); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "not signed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policies.New(context.Background(), policies.Options{Dir: tc.dir(t), VerifyKeys: s.pinned})
			errs, ok := policies.IsPolicyInvalid(err)
			if !ok {
				t.Fatalf("New = %v, want POLICY-INVALID", err)
			}
			if !strings.Contains(strings.Join(errs, "; "), tc.want) {
				t.Fatalf("errors %q do not say %q", errs, tc.want)
			}
		})
	}
}

// TestEmbeddedBundleRefusedWithKeys: the embedded bundle carries no
// signature, so pinned keys refuse it rather than fall back to it.
func TestEmbeddedBundleRefusedWithKeys(t *testing.T) {
	s := newSigned(t)
	_, err := policies.New(context.Background(), policies.Options{VerifyKeys: s.pinned})
	if errs, ok := policies.IsPolicyInvalid(err); !ok || !strings.Contains(strings.Join(errs, ";"), "embedded bundle is not signed") {
		t.Fatalf("New without a directory = %v", err)
	}
}

// TestSignedReloadRefusedKeepsPolicy: a reload of a bundle changed after
// signing keeps the policy in force, says why in the status and in
// policy.load_failed; so does one whose files are unchanged but whose
// signature was swapped for another key's (the revision alone would call
// it the same bundle). A properly re-signed bundle then loads.
func TestSignedReloadRefusedKeepsPolicy(t *testing.T) {
	s := newSigned(t)
	var ev events
	e := newEngine(t, policies.Options{Dir: s.bundle, VerifyKeys: s.pinned, Events: &ev})
	rev := e.Status().Revision

	editData(t, s.bundle, `"pids":1024`, `"pids":4096`)
	_, err := e.Reload(context.Background())
	if _, ok := policies.IsPolicyInvalid(err); !ok {
		t.Fatalf("reload of a bundle edited after signing = %v", err)
	}
	st := e.Status()
	if st.Revision != rev || st.SignedBy != "release" || !strings.Contains(st.LastError, "data.json: digest mismatch") {
		t.Fatalf("status after a refused reload: %+v", st)
	}
	failed := ev.last()
	if failed.Type != sandgate.EventPolicyLoadFailed || !strings.Contains(strings.Join(failed.Payload["errors"].([]string), ";"), "digest mismatch") {
		t.Fatalf("last event %s %v", failed.Type, failed.Payload)
	}

	// The files as signed again, but the signature another key's.
	editData(t, s.bundle, `"pids":4096`, `"pids":1024`)
	other := policytest.NewRSAKey(t, s.private, "other")
	forged := policytest.OPABuild(t, policytest.CopyDefaultBundle(t), other.Private, "release", "r-1")
	copyTo(t, filepath.Join(forged, ".signatures.json"), filepath.Join(s.bundle, ".signatures.json"))
	if _, err := e.Reload(context.Background()); err == nil {
		t.Fatal("a reload with a signature by an unpinned key was accepted")
	}
	if st := e.Status(); st.Revision != rev || !strings.Contains(st.LastError, "failed to verify JWT signature") {
		t.Fatalf("status after a forged signature: %+v", st)
	}

	// Re-signed by the pinned key, with a new revision: loaded.
	src := policytest.CopyDefaultBundle(t)
	writeFile(t, src, "data.json", strings.Replace(readFile(t, src, "data.json"), `"pids":1024`, `"pids":2048`, 1))
	resigned := policytest.OPABuild(t, src, s.key.Private, "release", "r-2")
	for _, f := range []string{"data.json", ".manifest", ".signatures.json"} {
		copyTo(t, filepath.Join(resigned, f), filepath.Join(s.bundle, f))
	}
	if _, err := e.Reload(context.Background()); err != nil {
		t.Fatalf("reload of a re-signed bundle: %v", err)
	}
	if st := e.Status(); st.Revision == rev || st.SignedRevision != "r-2" || st.LastError != "" {
		t.Fatalf("status after the re-signed reload: %+v", st)
	}
}

// TestSignedBundleECDSA: an ES256 signature by opa verifies with a pinned
// ECDSA key whose algorithm LoadVerifyKeys infers (the verification an
// engine runs before it loads; TestSignedBundleLoads loads one).
func TestSignedBundleECDSA(t *testing.T) {
	dir := t.TempDir()
	k := policytest.NewECKey(t, dir, "ec")
	bundle := policytest.OPABuild(t, policytest.CopyDefaultBundle(t), k.Private, "ec", "r-ec", "--signing-alg", "ES256")
	pinned, err := policies.LoadVerifyKeys(k.Public)
	if err != nil {
		t.Fatal(err)
	}
	if sig, err := policies.Verify(bundle, pinned); err != nil || sig.KeyID != "ec" || sig.Revision != "r-ec" {
		t.Fatalf("Verify = %+v, %v", sig, err)
	}
}

// TestSandgateSignInteroperates: `sandgate policy sign` (policies.Sign)
// writes a signature that the engine and the real opa CLI both verify,
// and policies.Verify reports the signer of what opa signed.
func TestSandgateSignInteroperates(t *testing.T) {
	s := newSigned(t)
	dir := policytest.CopyDefaultBundle(t)
	key, err := os.ReadFile(s.key.Private)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := policies.Sign(dir, policies.SignOptions{Key: key, KeyID: "release", Revision: "r-sg"})
	if err != nil {
		t.Fatal(err)
	}
	if sig.KeyID != "release" || sig.Revision != "r-sg" {
		t.Fatalf("Sign = %+v", sig)
	}
	got, err := policies.Verify(dir, s.pinned)
	if err != nil || got != sig {
		t.Fatalf("Verify(sandgate-signed) = %+v, %v", got, err)
	}
	// OPA verifies sandgate's signature as it verifies its own.
	if out, err := policytest.OPAVerify(t, dir, s.key.Public, "release"); err != nil {
		t.Fatalf("opa on a sandgate-signed bundle: %v\n%s", err, out)
	}
	// And refuses it once a file changes.
	writeFile(t, dir, "user.rego", readFile(t, dir, "user.rego")+"\n")
	if out, err := policytest.OPAVerify(t, dir, s.key.Public, "release"); err == nil || !strings.Contains(out, "digest mismatch") {
		t.Fatalf("opa verified a sandgate-signed bundle changed after signing: %v\n%s", err, out)
	}
	if _, err := policies.Verify(dir, s.pinned); err == nil {
		t.Fatal("Verify accepted a bundle changed after signing")
	}
	if got, err := policies.Verify(s.bundle, s.pinned); err != nil || got.KeyID != "release" || got.Revision != "r-1" {
		t.Fatalf("Verify(opa-signed) = %+v, %v", got, err)
	}
}

// TestCandidateFollowsSignatures: with keys pinned, a replay's candidate
// bundle must carry a signature by one of them, as a reload must.
func TestCandidateFollowsSignatures(t *testing.T) {
	s := newSigned(t)
	e := newEngine(t, policies.Options{Dir: s.bundle, VerifyKeys: s.pinned})
	ctx := context.Background()
	signed, err := policies.BundleFiles(s.bundle)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := signed[".signatures.json"]; !ok {
		t.Fatal("BundleFiles left the signature out")
	}
	if _, err := e.LoadCandidate(ctx, signed); err != nil {
		t.Fatalf("signed candidate: %v", err)
	}
	unsigned, err := policies.BundleFiles(policytest.CopyDefaultBundle(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.LoadCandidate(ctx, unsigned); err == nil {
		t.Fatal("an unsigned candidate was loaded by an engine that pins keys")
	} else if errs, ok := policies.IsPolicyInvalid(err); !ok || !strings.Contains(strings.Join(errs, ";"), "not signed") {
		t.Fatalf("unsigned candidate: %v", err)
	}
	signed["zz.rego"] = []byte("package sandgate.extra\n\nx := 1\n")
	if _, err := e.LoadCandidate(ctx, signed); err == nil {
		t.Fatal("a candidate with a file added after signing was loaded")
	}
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		copyTo(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
	}
	return dst
}

// TestLoadVerifyKeys: the pinned keys' file forms, and what is refused.
func TestLoadVerifyKeys(t *testing.T) {
	dir := t.TempDir()
	rsaKey := policytest.NewRSAKey(t, dir, "a")
	ecKey := policytest.NewECKey(t, dir, "b")
	pub := func(k policytest.KeyPair, headers string) string {
		s := readFile(t, filepath.Dir(k.Public), filepath.Base(k.Public))
		if headers == "" {
			return s
		}
		return strings.Replace(s, "-----BEGIN PUBLIC KEY-----\n", "-----BEGIN PUBLIC KEY-----\n"+headers+"\n\n", 1)
	}
	cases := []struct {
		name  string
		files map[string]string
		ids   string
		err   string
	}{
		{"one key named by its file", map[string]string{"release.pem": pub(rsaKey, "")}, "release", ""},
		{"a directory of keys", map[string]string{"a.pem": pub(rsaKey, ""), "b.pem": pub(ecKey, ""), "notes.txt": "x"}, "a,b", ""},
		{"one file, Key-ID headers", map[string]string{"keys.pem": pub(rsaKey, "Key-ID: one") + pub(ecKey, "Key-ID: two\nAlgorithm: ES256")}, "one,two", ""},
		{"several keys without IDs", map[string]string{"keys.pem": pub(rsaKey, "") + pub(ecKey, "")}, "", "names each with a Key-ID"},
		{"one ID twice", map[string]string{"a.pem": pub(rsaKey, ""), "b.pem": pub(ecKey, "Key-ID: a")}, "", `key ID "a" is pinned twice`},
		{"a private key", map[string]string{"a.pem": readFile(t, dir, "a.key")}, "", "is not a public key"},
		{"an HMAC algorithm", map[string]string{"a.pem": pub(rsaKey, "Algorithm: HS256")}, "", "is not one of RS*, PS* or ES*"},
		{"no PEM", map[string]string{"a.pem": "not a key"}, "", "no PEM block"},
		{"an empty directory", map[string]string{}, "", "holds no public key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			for name, content := range tc.files {
				writeFile(t, d, name, content)
			}
			path := d
			if len(tc.files) == 1 {
				for name := range tc.files {
					path = filepath.Join(d, name)
				}
			}
			k, err := policies.LoadVerifyKeys(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("LoadVerifyKeys = %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(k.IDs(), ","); got != tc.ids {
				t.Fatalf("IDs = %s, want %s", got, tc.ids)
			}
		})
	}
}
