package policies

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/keys"
)

// The files of a signed bundle beside its policy and data, in OPA's bundle
// format: the signature (a JWT over every file's digest, as `opa build
// --signing-key` and `opa sign` write it) and the manifest that carries
// the signed revision.
const (
	SignaturesFile = ".signatures.json"
	ManifestFile   = ".manifest"
)

// defaultSignaturePlugin is the plugin OPA's own signer names: its JWT
// over file digests, the only signature sandgate verifies.
const defaultSignaturePlugin = "_default"

// maxKeyFileBytes bounds one file of SANDGATE_POLICY_VERIFY_KEYS, and
// maxSignedFileBytes the signature and manifest files of a bundle.
const (
	maxKeyFileBytes    = 1 << 20
	maxSignedFileBytes = 1 << 20
)

// Signature is who signed the bundle in force, as its verification found.
type Signature struct {
	// KeyID is the pinned key the signature verified with.
	KeyID string
	// Revision is the revision the signed manifest (.manifest) names; ""
	// when the bundle has no manifest.
	Revision string
}

// VerifyKeys are the public keys a bundle must be signed with, by key ID:
// with them, an engine loads only a bundle whose every file a signature by
// one of them covers. It is safe for concurrent use.
type VerifyKeys struct {
	byID map[string]*keys.Config
}

// LoadVerifyKeys reads the public keys at path (SANDGATE_POLICY_VERIFY_KEYS):
// a PEM file, or a directory of *.pem files. Each PEM block is a public key
// ("PUBLIC KEY", "RSA PUBLIC KEY" or a "CERTIFICATE") whose ID is its
// Key-ID header or, for a file of one key, the file name without .pem.
// Its algorithm is its Algorithm header or, without one, RS256 for RSA and
// ES256, ES384 or ES512 for an ECDSA curve. A key that cannot be parsed, a
// key without an ID, one ID twice or no key at all is an error.
func LoadVerifyKeys(path string) (*VerifyKeys, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("policy verification keys: %w", err)
	}
	files := []string{path}
	if info.IsDir() {
		files, err = filepath.Glob(filepath.Join(path, "*.pem"))
		if err != nil {
			return nil, fmt.Errorf("policy verification keys: %w", err)
		}
		sort.Strings(files)
	}
	k := &VerifyKeys{byID: map[string]*keys.Config{}}
	for _, f := range files {
		if err := k.addFile(f); err != nil {
			return nil, fmt.Errorf("policy verification keys: %w", err)
		}
	}
	if len(k.byID) == 0 {
		return nil, fmt.Errorf("policy verification keys: %s holds no public key", path)
	}
	return k, nil
}

// addFile adds the keys of one PEM file.
func (k *VerifyKeys) addFile(name string) error {
	data, err := readCapped(os.DirFS(filepath.Dir(name)), filepath.Base(name), maxKeyFileBytes)
	if err != nil {
		return err
	}
	var blocks []*pem.Block
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		blocks = append(blocks, b)
	}
	if len(blocks) == 0 {
		return fmt.Errorf("%s: no PEM block", name)
	}
	for _, b := range blocks {
		id := b.Headers["Key-ID"]
		if id == "" && len(blocks) == 1 {
			id = strings.TrimSuffix(filepath.Base(name), ".pem")
		}
		if id == "" {
			return fmt.Errorf("%s: a file of several keys names each with a Key-ID header", name)
		}
		if _, dup := k.byID[id]; dup {
			return fmt.Errorf("%s: key ID %q is pinned twice", name, id)
		}
		cfg, err := keyConfig(b)
		if err != nil {
			return fmt.Errorf("%s: key %q: %w", name, id, err)
		}
		k.byID[id] = cfg
	}
	return nil
}

// keyConfig is OPA's verification key for one PEM block.
func keyConfig(b *pem.Block) (*keys.Config, error) {
	var pub any
	var err error
	switch b.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(b.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(b.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(b.Bytes); err == nil {
			pub = cert.PublicKey
		}
	default:
		return nil, fmt.Errorf("a %q PEM block is not a public key", b.Type)
	}
	if err != nil {
		return nil, err
	}
	alg := b.Headers["Algorithm"]
	if alg == "" {
		if alg, err = algorithmOf(pub); err != nil {
			return nil, err
		}
	}
	if !keys.IsSupportedAlgorithm(alg) || strings.HasPrefix(alg, "HS") {
		return nil, fmt.Errorf("algorithm %q is not one of RS*, PS* or ES*", alg)
	}
	clean := pem.EncodeToMemory(&pem.Block{Type: b.Type, Bytes: b.Bytes})
	return &keys.Config{Key: string(clean), Algorithm: alg}, nil
}

// algorithmOf is the JWS algorithm a key signs with unless its PEM block
// says otherwise: OPA's default RS256 for RSA, the curve's for ECDSA.
func algorithmOf(key any) (string, error) {
	switch k := key.(type) {
	case *rsa.PublicKey, *rsa.PrivateKey:
		return "RS256", nil
	case *ecdsa.PublicKey:
		return curveAlgorithm(k.Curve)
	case *ecdsa.PrivateKey:
		return curveAlgorithm(k.Curve)
	}
	return "", fmt.Errorf("a %T key cannot sign a bundle: use RSA or ECDSA (P-256, P-384, P-521)", key)
}

func curveAlgorithm(c elliptic.Curve) (string, error) {
	switch c {
	case elliptic.P256():
		return "ES256", nil
	case elliptic.P384():
		return "ES384", nil
	case elliptic.P521():
		return "ES512", nil
	}
	return "", fmt.Errorf("ECDSA curve %s cannot sign a bundle", c.Params().Name)
}

// IDs are the pinned key IDs, sorted.
func (k *VerifyKeys) IDs() []string {
	ids := make([]string, 0, len(k.byID))
	for id := range k.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// signedFiles are a bundle's signature and manifest, nil when absent.
type signedFiles struct {
	signatures []byte
	manifest   []byte
}

// readSignedFiles reads the signature and the manifest of the bundle in
// fsys, each if it is there as a regular file.
func readSignedFiles(fsys fs.FS) (signedFiles, error) {
	var s signedFiles
	for _, f := range []struct {
		name string
		to   *[]byte
	}{{SignaturesFile, &s.signatures}, {ManifestFile, &s.manifest}} {
		info, err := fs.Stat(fsys, f.name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return s, err
		}
		if !info.Mode().IsRegular() {
			return s, fmt.Errorf("%s is not a regular file", f.name)
		}
		if *f.to, err = readCapped(fsys, f.name, maxSignedFileBytes); err != nil {
			return s, err
		}
	}
	return s, nil
}

// readCapped reads name from fsys, refusing a file over max bytes.
func readCapped(fsys fs.FS, name string, max int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is over %d bytes", name, max)
	}
	return data, nil
}

// verify checks that the signature in signed verifies with a pinned key
// and covers exactly files and the manifest: every file the engine would
// load is signed with its digest, the manifest too when there is one, and
// nothing is signed that is not there. It uses OPA's own verification, so
// a bundle `opa build --signing-key` or `opa sign` signed verifies as OPA
// would verify it.
func (k *VerifyKeys) verify(files []bundleFile, signed signedFiles) (Signature, error) {
	var sig Signature
	if signed.signatures == nil {
		return sig, fmt.Errorf("the bundle is not signed: it has no %s, and SANDGATE_POLICY_VERIFY_KEYS pins keys (%s)", SignaturesFile, strings.Join(k.IDs(), ", "))
	}
	var sc opabundle.SignaturesConfig
	if err := json.Unmarshal(signed.signatures, &sc); err != nil {
		return sig, fmt.Errorf("%s: %v", SignaturesFile, err)
	}
	if sc.Plugin != "" && sc.Plugin != defaultSignaturePlugin {
		return sig, fmt.Errorf("%s: signature plugin %q is not supported", SignaturesFile, sc.Plugin)
	}
	covered, err := opabundle.VerifyBundleSignature(sc, opabundle.NewVerificationConfig(k.byID, "", "", nil))
	if err != nil {
		return sig, fmt.Errorf("%s: %v", SignaturesFile, err)
	}
	if sig.KeyID, err = signingKeyID(sc.Signatures[0]); err != nil {
		return sig, fmt.Errorf("%s: %v", SignaturesFile, err)
	}
	for _, f := range files {
		if err := opabundle.VerifyBundleFile(f.name, *bytes.NewBuffer(f.data), covered); err != nil {
			return sig, fmt.Errorf("signed by %s, but %v", sig.KeyID, err)
		}
	}
	if signed.manifest != nil {
		if err := opabundle.VerifyBundleFile(ManifestFile, *bytes.NewBuffer(signed.manifest), covered); err != nil {
			return sig, fmt.Errorf("signed by %s, but %v", sig.KeyID, err)
		}
		var m opabundle.Manifest
		if err := json.Unmarshal(signed.manifest, &m); err != nil {
			return sig, fmt.Errorf("%s: %v", ManifestFile, err)
		}
		sig.Revision = m.Revision
	}
	if len(covered) > 0 {
		missing := make([]string, 0, len(covered))
		for name := range covered {
			missing = append(missing, name)
		}
		slices.Sort(missing)
		return sig, fmt.Errorf("signed by %s, but the bundle lacks signed file(s) %s (sandgate loads the *.rego and *.json files at the top of the directory: build the bundle from inside it, opa build --bundle .)",
			sig.KeyID, strings.Join(missing, ", "))
	}
	return sig, nil
}

// signingKeyID is the key ID a verified token names: its header's kid,
// else the payload's deprecated keyid claim, as OPA chooses the key.
func signingKeyID(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("the signature is not a compact JWS")
	}
	var hdr struct {
		KeyID string `json:"kid"`
	}
	var payload struct {
		KeyID string `json:"keyid"`
	}
	for i, to := range []any{&hdr, &payload} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			return "", err
		}
		if err := json.Unmarshal(raw, to); err != nil {
			return "", err
		}
	}
	if hdr.KeyID != "" {
		return hdr.KeyID, nil
	}
	return payload.KeyID, nil
}

// same reports whether s and o are the same signer and signed revision
// (both nil when no keys are pinned).
func (s *Signature) same(o *Signature) bool {
	if s == nil || o == nil {
		return s == o
	}
	return *s == *o
}
