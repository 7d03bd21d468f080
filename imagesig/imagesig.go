// Package imagesig signs and verifies sandgate images offline: a detached
// signature over a small JSON payload naming the image's ID (the digest of
// its configuration, which names every layer) and its recipe's digest or
// its repository digests. Signatures are cosign's `sign-blob` format (the
// base64 of an ASN.1 signature over the payload's SHA-256) with cosign's
// keys (PEM, cosign's encrypted ones too), made and checked with
// sigstore's own signature library, so a site can sign with `cosign
// sign-blob --key` and check with `cosign verify-blob --key` as well as
// with sandgate. It is the only package that imports sigstore.
package imagesig

import (
	"bytes"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// PayloadType names the payload format.
const PayloadType = "sandgate.image/v1"

// maxFileBytes bounds a key, payload or signature file.
const maxFileBytes = 1 << 20

// Payload is what an image signature covers.
type Payload struct {
	Type string `json:"type"`
	// ImageID is the image's ID (sha256:…), the digest of its
	// configuration: a tag moved to another image does not move it.
	ImageID string `json:"image_id"`
	// Ref is the name the image was signed under.
	Ref string `json:"ref"`
	// RecipeSHA256 is the digest of the recipe a recipe-built image was
	// built from; RepoDigests the image's registry digests, if any.
	RecipeSHA256 string   `json:"recipe_sha256,omitempty"`
	RepoDigests  []string `json:"repo_digests,omitempty"`
}

// Signed is a payload as signed: its exact bytes and the signature.
type Signed struct {
	Payload   []byte
	Signature string // base64, as cosign sign-blob prints it
}

// Sign signs p with the PEM private key key (ECDSA, RSA or Ed25519;
// cosign's encrypted keys are opened with password). It returns the
// payload's bytes and the signature.
func Sign(p Payload, key, password []byte) (Signed, error) {
	if p.ImageID == "" {
		return Signed{}, errors.New("sign: the payload names no image ID")
	}
	p.Type = PayloadType
	payload, err := json.Marshal(p)
	if err != nil {
		return Signed{}, err
	}
	priv, err := cryptoutils.UnmarshalPEMToPrivateKey(key, func(bool) ([]byte, error) { return password, nil })
	if err != nil {
		return Signed{}, fmt.Errorf("sign: the key: %w", err)
	}
	signer, err := signature.LoadSigner(priv, crypto.SHA256)
	if err != nil {
		return Signed{}, fmt.Errorf("sign: %w", err)
	}
	sig, err := signer.SignMessage(bytes.NewReader(payload))
	if err != nil {
		return Signed{}, fmt.Errorf("sign: %w", err)
	}
	return Signed{Payload: payload, Signature: base64.StdEncoding.EncodeToString(sig)}, nil
}

// Keys are the public keys image signatures are verified with, by ID.
type Keys struct {
	byID map[string]signature.Verifier
}

// LoadKeys reads the public keys at path (SANDGATE_IMAGE_VERIFY_KEYS): a
// PEM file (cosign.pub) or a directory of *.pem and *.pub files; a key's
// ID is its file's name without the extension, or its Key-ID header in a
// file of several.
func LoadKeys(path string) (*Keys, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("image verification keys: %w", err)
	}
	files := []string{path}
	if info.IsDir() {
		files = nil
		for _, pat := range []string{"*.pem", "*.pub"} {
			m, _ := filepath.Glob(filepath.Join(path, pat))
			files = append(files, m...)
		}
		sort.Strings(files)
	}
	k := &Keys{byID: map[string]signature.Verifier{}}
	for _, f := range files {
		if err := k.addFile(f); err != nil {
			return nil, fmt.Errorf("image verification keys: %s: %w", f, err)
		}
	}
	if len(k.byID) == 0 {
		return nil, fmt.Errorf("image verification keys: %s holds no public key", path)
	}
	return k, nil
}

func (k *Keys) addFile(name string) error {
	data, err := readCapped(name)
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
		return errors.New("no PEM block")
	}
	for _, b := range blocks {
		id := b.Headers["Key-ID"]
		if id == "" && len(blocks) == 1 {
			id = strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
		}
		if id == "" {
			return errors.New("a file of several keys names each with a Key-ID header")
		}
		if _, dup := k.byID[id]; dup {
			return fmt.Errorf("key ID %q is pinned twice", id)
		}
		pub, err := cryptoutils.UnmarshalPEMToPublicKey(pem.EncodeToMemory(&pem.Block{Type: b.Type, Bytes: b.Bytes}))
		if err != nil {
			return fmt.Errorf("key %q: %w", id, err)
		}
		v, err := signature.LoadVerifier(pub, crypto.SHA256)
		if err != nil {
			return fmt.Errorf("key %q: %w", id, err)
		}
		k.byID[id] = v
	}
	return nil
}

// IDs are the pinned key IDs, sorted.
func (k *Keys) IDs() []string {
	ids := make([]string, 0, len(k.byID))
	for id := range k.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Verify checks s against the pinned keys and returns its payload and the
// ID of the key that verified it. A signature no pinned key verifies, or
// a payload that is not sandgate's, is an error.
func (k *Keys) Verify(s Signed) (Payload, string, error) {
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s.Signature))
	if err != nil {
		return Payload{}, "", fmt.Errorf("the signature is not base64: %w", err)
	}
	signer := ""
	for _, id := range k.IDs() {
		if k.byID[id].VerifySignature(bytes.NewReader(sig), bytes.NewReader(s.Payload)) == nil {
			signer = id
			break
		}
	}
	if signer == "" {
		return Payload{}, "", fmt.Errorf("no pinned key (%s) verifies the signature", strings.Join(k.IDs(), ", "))
	}
	p, err := PayloadOf(s)
	if err != nil {
		return Payload{}, "", fmt.Errorf("signed by %s, but %w", signer, err)
	}
	return p, signer, nil
}

func readCapped(name string) ([]byte, error) {
	info, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() || info.Size() > maxFileBytes {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", name, maxFileBytes)
	}
	return os.ReadFile(name)
}

// PayloadOf decodes s's payload without verifying it, for a caller that
// keeps the signature to be verified later.
func PayloadOf(s Signed) (Payload, error) {
	var p Payload
	dec := json.NewDecoder(bytes.NewReader(s.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || p.Type != PayloadType || p.ImageID == "" {
		return Payload{}, errors.New("the payload is not a sandgate image payload")
	}
	return p, nil
}
