package secrets

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate"
)

// KeySize is the size of a key-encryption key and of a data key: AES-256.
const KeySize = 32

// sealVersion begins every wrapped key and ciphertext: the format's
// version, so that a later one can be told apart.
const sealVersion = 1

// keyID is the form of a key's ID in the key file.
var keyID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Keyring is the key-encryption keys of SANDGATE_SECRETS_KEY_FILE: the
// first seals every new version and every rewrapped one; the others,
// older keys kept for rotation, only open what they sealed.
type Keyring struct {
	ids  []string
	keys map[string]cipher.AEAD
}

// LoadKeyring reads the key file at path. The file must be readable by
// its owner alone: a key the group or others may read is refused.
func LoadKeyring(path string) (*Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets key file %s: mode %04o lets others than its owner read it; chmod 600 it", path, st.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	k, err := ParseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("secrets key file %s: %w", path, err)
	}
	return k, nil
}

// ParseKeyring reads a key file: one key a line, its ID and its 32 bytes
// in hex ("k2 9f86d0…"), the first line's key the one that seals; blank
// lines and lines beginning with '#' are skipped. Errors name the line,
// never a key.
func ParseKeyring(data []byte) (*Keyring, error) {
	k := &Keyring{keys: map[string]cipher.AEAD{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want a key ID and the key in hex, separated by a space", n)
		}
		id := fields[0]
		if !keyID.MatchString(id) {
			return nil, fmt.Errorf("line %d: key ID %q is not 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'", n, id)
		}
		if _, dup := k.keys[id]; dup {
			return nil, fmt.Errorf("line %d: key ID %s is given twice", n, id)
		}
		raw, err := hex.DecodeString(fields[1])
		if err != nil || len(raw) != KeySize {
			return nil, fmt.Errorf("line %d: key %s is not %d bytes in hex (openssl rand -hex %d)", n, id, KeySize, KeySize)
		}
		aead, err := newAEAD(raw)
		if err != nil {
			return nil, err
		}
		k.ids = append(k.ids, id)
		k.keys[id] = aead
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(k.ids) == 0 {
		return nil, errors.New("no key: write a line `ID HEX` with a key of 32 bytes in hex")
	}
	return k, nil
}

// NewKeyLine is a key file's line for a new random key named id.
func NewKeyLine(id string) (string, error) {
	if !keyID.MatchString(id) {
		return "", fmt.Errorf("key ID %q is not 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'", id)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return id + " " + hex.EncodeToString(key), nil
}

// Primary is the ID of the key that seals.
func (k *Keyring) Primary() string { return k.ids[0] }

// IDs are the keys' IDs, the primary first.
func (k *Keyring) IDs() []string { return append([]string(nil), k.ids...) }

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// valueAAD binds a value's ciphertext to its secret's name and version: a
// ciphertext moved to another row or version does not open.
func valueAAD(name string, version int64) []byte {
	return []byte("sandgate/secret/v1\x00" + name + "\x00" + strconv.FormatInt(version, 10))
}

// keyAAD binds a wrapped data key to its key-encryption key and its
// secret's name and version.
func keyAAD(kek, name string, version int64) []byte {
	return []byte("sandgate/data-key/v1\x00" + kek + "\x00" + name + "\x00" + strconv.FormatInt(version, 10))
}

// seal encrypts value for name's version under a fresh data key, wrapped
// under the primary key: s's KeyID, WrappedKey and Ciphertext.
func (k *Keyring) seal(s *sandgate.SealedSecret, value string) error {
	dek := make([]byte, KeySize)
	if _, err := rand.Read(dek); err != nil {
		return fmt.Errorf("data key: %w", err)
	}
	defer clear(dek)
	aead, err := newAEAD(dek)
	if err != nil {
		return err
	}
	s.Ciphertext = encrypt(aead, []byte(value), valueAAD(s.Name, s.Version))
	return k.wrap(s, dek)
}

// wrap wraps dek under the primary key into s.
func (k *Keyring) wrap(s *sandgate.SealedSecret, dek []byte) error {
	s.KeyID = k.Primary()
	s.WrappedKey = encrypt(k.keys[s.KeyID], dek, keyAAD(s.KeyID, s.Name, s.Version))
	return nil
}

// unwrap is s's data key.
func (k *Keyring) unwrap(s sandgate.SealedSecret) ([]byte, error) {
	kek, ok := k.keys[s.KeyID]
	if !ok {
		return nil, fmt.Errorf("secret %s version %d is sealed under key %s, which the key file does not hold", s.Name, s.Version, s.KeyID)
	}
	dek, err := decrypt(kek, s.WrappedKey, keyAAD(s.KeyID, s.Name, s.Version))
	if err != nil {
		return nil, fmt.Errorf("secret %s version %d: its data key does not open under key %s", s.Name, s.Version, s.KeyID)
	}
	return dek, nil
}

// open is s's value.
func (k *Keyring) open(s sandgate.SealedSecret) (string, error) {
	dek, err := k.unwrap(s)
	if err != nil {
		return "", err
	}
	defer clear(dek)
	aead, err := newAEAD(dek)
	if err != nil {
		return "", err
	}
	v, err := decrypt(aead, s.Ciphertext, valueAAD(s.Name, s.Version))
	if err != nil {
		return "", fmt.Errorf("secret %s version %d: its value does not open", s.Name, s.Version)
	}
	return string(v), nil
}

// rewrap is s with its data key wrapped under the primary key; changed is
// false when it is already.
func (k *Keyring) rewrap(s sandgate.SealedSecret) (sandgate.SealedSecret, bool, error) {
	if s.KeyID == k.Primary() {
		return s, false, nil
	}
	dek, err := k.unwrap(s)
	if err != nil {
		return s, false, err
	}
	defer clear(dek)
	if err := k.wrap(&s, dek); err != nil {
		return s, false, err
	}
	return s, true, nil
}

// encrypt is the format's version, a random nonce and plain sealed under
// aead with aad.
func encrypt(aead cipher.AEAD, plain, aad []byte) []byte {
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plain)+aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on Linux
	}
	return aead.Seal(out, out[1:], plain, aad)
}

func decrypt(aead cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	n := 1 + aead.NonceSize()
	if len(sealed) < n+aead.Overhead() || sealed[0] != sealVersion {
		return nil, errors.New("not a sealed value of this format")
	}
	return aead.Open(nil, sealed[1:n], sealed[n:], aad)
}
