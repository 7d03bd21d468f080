package imagesig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Store keeps the signatures of the images loaded with one, by image ID,
// in a directory: ID.payload (the exact bytes signed) and ID.sig (the
// signature), the files cosign verify-blob reads.
type Store struct {
	Dir string
}

var imageID = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func (s Store) paths(id string) (string, string, error) {
	if !imageID.MatchString(id) {
		return "", "", fmt.Errorf("%q is not an image ID (sha256:<64 hex>)", id)
	}
	base := filepath.Join(s.Dir, strings.TrimPrefix(id, "sha256:"))
	return base + ".payload", base + ".sig", nil
}

// Put stores the signature of the image id. The payload must name id: a
// signature is kept only for the image it signs.
func (s Store) Put(id string, sig Signed, p Payload) error {
	if p.ImageID != id {
		return fmt.Errorf("the signature is of image %s, not of %s", p.ImageID, id)
	}
	payload, sigPath, err := s.paths(id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	if err := writeFile(payload, sig.Payload); err != nil {
		return err
	}
	return writeFile(sigPath, []byte(sig.Signature+"\n"))
}

// Get returns the stored signature of the image id; ok is false when it
// has none.
func (s Store) Get(id string) (sig Signed, ok bool, err error) {
	payload, sigPath, err := s.paths(id)
	if err != nil {
		return Signed{}, false, err
	}
	p, err := readCapped(payload)
	if errors.Is(err, fs.ErrNotExist) {
		return Signed{}, false, nil
	}
	if err != nil {
		return Signed{}, false, err
	}
	b, err := readCapped(sigPath)
	if err != nil {
		return Signed{}, false, err
	}
	return Signed{Payload: p, Signature: strings.TrimSpace(string(b))}, true, nil
}

// Signer verifies the stored signature of the image id with keys and
// returns the ID of the key that signed it, or "" when the image has no
// signature. A signature that does not verify, or that signs another
// image (a payload copied under this ID), is an error naming why.
func (s Store) Signer(id string, keys *Keys) (string, error) {
	sig, ok, err := s.Get(id)
	if err != nil || !ok {
		return "", err
	}
	p, signer, err := keys.Verify(sig)
	if err != nil {
		return "", err
	}
	if p.ImageID != id {
		return "", fmt.Errorf("the signature by %s is of image %s, not of %s", signer, p.ImageID, id)
	}
	return signer, nil
}

// ReadSigned reads a payload and signature pair written by `sandgate
// image sign` or cosign sign-blob.
func ReadSigned(payloadFile, sigFile string) (Signed, error) {
	p, err := readCapped(payloadFile)
	if err != nil {
		return Signed{}, err
	}
	b, err := readCapped(sigFile)
	if err != nil {
		return Signed{}, err
	}
	return Signed{Payload: p, Signature: strings.TrimSpace(string(b))}, nil
}

func writeFile(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
