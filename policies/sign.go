package policies

import (
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/util"
)

// SignOptions say how Sign signs a bundle.
type SignOptions struct {
	// Key is the PEM private key (RSA, or ECDSA on P-256, P-384 or P-521).
	Key []byte
	// KeyID names the key; the gateway finds the pinned public key by it.
	KeyID string
	// Algorithm is the JWS algorithm (RS256, PS256, ES256, …); "" picks
	// the key's as LoadVerifyKeys does.
	Algorithm string
	// Revision, when set, is written to the bundle's manifest, which the
	// signature then covers; "" keeps the manifest as it is, if any.
	Revision string
}

// Sign signs the bundle in dir in OPA's format, for sites without the opa
// CLI: it writes the manifest (when opts.Revision is set) and then
// .signatures.json, a JWT over the digest of every file the engine loads
// and of the manifest, exactly as `opa sign --bundle` would. A bundle that
// cannot be read or a key that cannot sign is an error; the bundle's code
// is not compiled (`sandgate policy check` does that).
func Sign(dir string, opts SignOptions) (Signature, error) {
	if dir == "" {
		return Signature{}, errors.New("sign: a bundle directory is needed; the embedded bundle is part of the binary")
	}
	if opts.KeyID == "" {
		return Signature{}, errors.New("sign: a key ID is needed")
	}
	alg, err := signingAlgorithm(opts)
	if err != nil {
		return Signature{}, err
	}
	files, _, err := readBundleFiles(dir)
	if err != nil {
		return Signature{}, fmt.Errorf("sign: %w", err)
	}
	signed, err := readSignedFiles(os.DirFS(dir))
	if err != nil {
		return Signature{}, fmt.Errorf("sign: %w", err)
	}
	if opts.Revision != "" {
		if signed.manifest, err = withRevision(signed.manifest, opts.Revision); err != nil {
			return Signature{}, err
		}
		if err := writeAtomic(dir, ManifestFile, signed.manifest); err != nil {
			return Signature{}, err
		}
	}
	if signed.manifest != nil {
		files = append(files, bundleFile{name: ManifestFile, data: signed.manifest})
	}
	infos, err := fileInfos(files)
	if err != nil {
		return Signature{}, err
	}
	token, err := opabundle.GenerateSignedToken(infos, opabundle.NewSigningConfig(string(opts.Key), alg, ""), opts.KeyID)
	if err != nil {
		return Signature{}, fmt.Errorf("sign: %w", err)
	}
	out, err := json.MarshalIndent(opabundle.SignaturesConfig{Signatures: []string{token}}, "", " ")
	if err != nil {
		return Signature{}, err
	}
	if err := writeAtomic(dir, SignaturesFile, out); err != nil {
		return Signature{}, err
	}
	var m opabundle.Manifest
	if signed.manifest != nil {
		_ = json.Unmarshal(signed.manifest, &m)
	}
	return Signature{KeyID: opts.KeyID, Revision: m.Revision}, nil
}

// Verify verifies the bundle in dir against keys as the engine does
// before it loads it, and returns who signed it. A bundle that fails is a
// POLICY-INVALID error naming the problem.
func Verify(dir string, keys *VerifyKeys) (Signature, error) {
	if keys == nil {
		return Signature{}, errors.New("verify: no keys are pinned (SANDGATE_POLICY_VERIFY_KEYS)")
	}
	b, err := readVerifiedBundle(dir, keys)
	if err != nil {
		_, source := bundleFS(dir)
		return Signature{}, invalid(source, err)
	}
	return *b.signature, nil
}

// signingAlgorithm is opts.Algorithm, or the one the key's type implies.
func signingAlgorithm(opts SignOptions) (string, error) {
	if opts.Algorithm != "" {
		return opts.Algorithm, nil
	}
	block, _ := pem.Decode(opts.Key)
	if block == nil {
		return "", errors.New("sign: the key is not PEM")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return "", fmt.Errorf("sign: a %q PEM block is not a private key", block.Type)
	}
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	alg, err := algorithmOf(key)
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return alg, nil
}

// withRevision is manifest (or an empty one) with its revision set.
func withRevision(manifest []byte, revision string) ([]byte, error) {
	m := map[string]any{}
	if manifest != nil {
		if err := util.UnmarshalJSON(manifest, &m); err != nil {
			return nil, fmt.Errorf("sign: %s: %w", ManifestFile, err)
		}
	}
	m["revision"] = revision
	return json.MarshalIndent(m, "", "  ")
}

// fileInfos are the digests of files as OPA's signer and verifier compute
// them: the data and manifest documents over their parsed JSON, the rest
// over their bytes.
func fileInfos(files []bundleFile) ([]opabundle.FileInfo, error) {
	h, err := opabundle.NewSignatureHasher(opabundle.SHA256)
	if err != nil {
		return nil, err
	}
	infos := make([]opabundle.FileInfo, 0, len(files))
	for _, f := range files {
		var v any = f.data
		if opabundle.IsStructuredDoc(f.name) {
			if err := util.Unmarshal(f.data, &v); err != nil {
				return nil, fmt.Errorf("sign: %s: %w", f.name, err)
			}
		}
		sum, err := h.HashFile(v)
		if err != nil {
			return nil, fmt.Errorf("sign: %s: %w", f.name, err)
		}
		infos = append(infos, opabundle.NewFile(f.name, hex.EncodeToString(sum), opabundle.SHA256.String()))
	}
	return infos, nil
}

// writeAtomic replaces dir/name with data through a hidden temporary file
// and a rename, so that a watching engine never reads half of it.
func writeAtomic(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, ".sign-*")
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("sign: write %s: %w", name, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("sign: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("sign: write %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	return nil
}
