package proof

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LoadSigningKey reads the Ed25519 checkpoint key from path (PEM, PKCS #8
// "PRIVATE KEY"). When the file does not exist and create is true it
// generates a key and writes it with mode 0600 (its directory 0700).
func LoadSigningKey(path string, create bool) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && create {
		return generateKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing key %s: not a PEM PRIVATE KEY", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s: not an Ed25519 key", path)
	}
	return priv, nil
}

func generateKey(path string) (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("encode signing key: %w", err)
	}
	switch err := writeNewSecret(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); {
	case errors.Is(err, os.ErrExist):
		// Another process made it first: use theirs.
		return LoadSigningKey(path, false)
	case err != nil:
		return nil, fmt.Errorf("write signing key: %w", err)
	}
	return priv, nil
}

// writeNewSecret writes data to a new file at path with mode 0600 (its
// directory 0700) and syncs it. It fails with os.ErrExist when the file
// is already there.
func writeNewSecret(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// MinMaskKeyBytes is the shortest mask key LoadMaskKey accepts.
const MinMaskKeyBytes = 32

// LoadMaskKey reads the key that hashes secrets in payloads from path: at
// least MinMaskKeyBytes bytes, written as hex (whitespace around it is
// ignored), such as `openssl rand -hex 32` prints. When the file does not
// exist and create is true it generates one and writes it with mode 0600
// (its directory 0700). Gateways that share a mask key hash equal secrets
// equally; the key is independent of the signing key, so it survives a
// rotation of that.
func LoadMaskKey(path string, create bool) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && create {
		return generateMaskKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read mask key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("mask key %s: not hex: %w", path, err)
	}
	if len(key) < MinMaskKeyBytes {
		return nil, fmt.Errorf("mask key %s: %d bytes, want at least %d", path, len(key), MinMaskKeyBytes)
	}
	return key, nil
}

func generateMaskKey(path string) ([]byte, error) {
	key := make([]byte, MinMaskKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate mask key: %w", err)
	}
	switch err := writeNewSecret(path, []byte(hex.EncodeToString(key)+"\n")); {
	case errors.Is(err, os.ErrExist):
		// Another process made it first: use theirs.
		return LoadMaskKey(path, false)
	case err != nil:
		return nil, fmt.Errorf("write mask key: %w", err)
	}
	return key, nil
}

// KeyID names a public key in checkpoints: the first 8 bytes of its
// SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// EncodePublicKey returns pub as PEM ("PUBLIC KEY", PKIX), the form
// auditors keep and pass to verify.
func EncodePublicKey(pub ed25519.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		// Marshalling a well-formed Ed25519 key cannot fail.
		panic(fmt.Sprintf("audit: encode public key: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// ParsePublicKey reads an Ed25519 public key given as PEM ("PUBLIC KEY" or
// a "PRIVATE KEY", whose public half is taken) or as 64 hex digits.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		switch block.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse public key: %w", err)
			}
			pub, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, errors.New("parse public key: not an Ed25519 key")
			}
			return pub, nil
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse key: %w", err)
			}
			priv, ok := k.(ed25519.PrivateKey)
			if !ok {
				return nil, errors.New("parse key: not an Ed25519 key")
			}
			return priv.Public().(ed25519.PublicKey), nil
		}
		return nil, fmt.Errorf("parse public key: unexpected PEM block %q", block.Type)
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, errors.New("parse public key: want PEM or 64 hex digits")
	}
	return ed25519.PublicKey(raw), nil
}

// ParsePublicKeys reads the Ed25519 public keys of a trusted-keys file:
// PEM blocks one after the other (as ParsePublicKey takes them), or lines
// of 64 hex digits; blank lines and lines starting with # are skipped. A
// file with no key is an error.
func ParsePublicKeys(data []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	if bytes.Contains(data, []byte("-----BEGIN ")) {
		for rest := data; ; {
			block, next := pem.Decode(rest)
			if block == nil {
				break
			}
			k, err := ParsePublicKey(pem.EncodeToMemory(block))
			if err != nil {
				return nil, err
			}
			keys = append(keys, k)
			rest = next
		}
	} else {
		for i, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, err := ParsePublicKey([]byte(line))
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", i+1, err)
			}
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("parse public keys: no key found")
	}
	return keys, nil
}
