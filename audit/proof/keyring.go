package proof

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// keyring is the note.Verifiers of the keys a verifier trusts: Ed25519
// keys trusted for every note name (origin) or for one, and note verifier
// keys given as such. A signature's key is found by its name and key
// hash, computing each candidate's hash for that name alone: checking a
// note costs the keys trusted for it, never a verifier made for every
// name and every key (issue #29: a receipt of many notes and keys took
// quadratic time).
type keyring struct {
	any    []ed25519.PublicKey
	byName map[string][]ed25519.PublicKey
	list   map[string]note.Verifier // by name and hash
	// ids names the key of each verifier handed out, by name and hash.
	ids map[string]string
}

func newKeyring() *keyring {
	return &keyring{byName: map[string][]ed25519.PublicKey{}, list: map[string]note.Verifier{}, ids: map[string]string{}}
}

// trust adds pub for notes named name ("" for every name).
func (k *keyring) trust(name string, pub ed25519.PublicKey) {
	if pub == nil {
		return
	}
	if name == "" {
		k.any = append(k.any, pub)
		return
	}
	k.byName[name] = append(k.byName[name], pub)
}

// trustVerifierKey adds a note verifier key ("name+hash+key").
func (k *keyring) trustVerifierKey(vkey string) error {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return err
	}
	k.list[sigKey(v.Name(), v.KeyHash())] = v
	id := vkey
	if i := strings.LastIndexByte(vkey, '+'); i >= 0 {
		if raw, err := base64.StdEncoding.DecodeString(vkey[i+1:]); err == nil && len(raw) == 1+ed25519.PublicKeySize {
			id = KeyID(raw[1:])
		}
	}
	k.ids[sigKey(v.Name(), v.KeyHash())] = id
	return nil
}

// Verifier returns the verifier of the key named name with hash, or
// note.UnknownVerifierError (the signature is then left unverified).
func (k *keyring) Verifier(name string, hash uint32) (note.Verifier, error) {
	for _, keys := range [][]ed25519.PublicKey{k.byName[name], k.any} {
		for _, pub := range keys {
			if ed25519KeyHash(name, pub) != hash {
				continue
			}
			vkey, err := NoteVerifierKey(name, pub)
			if err != nil {
				return nil, err
			}
			v, err := note.NewVerifier(vkey)
			if err != nil {
				return nil, err
			}
			k.ids[sigKey(name, hash)] = KeyID(pub)
			return v, nil
		}
	}
	if v, ok := k.list[sigKey(name, hash)]; ok {
		return v, nil
	}
	return nil, &note.UnknownVerifierError{Name: name, KeyHash: hash}
}

// keyID names the key that made a signature k verified.
func (k *keyring) keyID(s note.Signature) string { return k.ids[sigKey(s.Name, s.Hash)] }

func sigKey(name string, hash uint32) string { return fmt.Sprintf("%s+%08x", name, hash) }

// ed25519KeyHash is the key hash of an Ed25519 note key named name, as
// golang.org/x/mod/sumdb/note computes it: the first four bytes of
// SHA-256(name ‖ "\n" ‖ 0x01 ‖ key).
func ed25519KeyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write([]byte{1})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}
