package proof

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Checkpoint notes: each chain's checkpoint as a C2SP signed note
// (https://c2sp.org/tlog-checkpoint), signed with the node's checkpoint
// key through golang.org/x/mod/sumdb/note, and witnesses' cosignatures of
// them (https://c2sp.org/tlog-cosignature).

// Origin returns the log origin of a chain's checkpoint notes,
// "sandgate.<node>/<chain_id>", which is also the name of the key that
// signs them. Characters a note's key name cannot hold (space, "+") become
// "-".
func Origin(node, chainID string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '+' || r <= ' ' || r == 0x7f {
				return '-'
			}
			return r
		}, s)
	}
	if node == "" {
		node = "node"
	}
	return "sandgate." + clean(node) + "/" + clean(chainID)
}

// NoteText returns the body of a checkpoint note: origin, tree size and
// base64 root hash, each followed by a newline.
func NoteText(origin string, size int64, root tlog.Hash) string {
	return fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(root[:]))
}

// NoteCheckpoint is what a checkpoint note states.
type NoteCheckpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
}

// ParseNoteText reads a checkpoint note's body (the text before the blank
// line): origin, size, base64 root, and any extension lines, which are
// ignored.
func ParseNoteText(text string) (NoteCheckpoint, error) {
	lines := strings.Split(text, "\n")
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		return NoteCheckpoint{}, errors.New("checkpoint note: want origin, size and root hash lines")
	}
	var c NoteCheckpoint
	c.Origin = lines[0]
	if c.Origin == "" {
		return c, errors.New("checkpoint note: empty origin")
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || n < 0 || lines[1] != strconv.FormatInt(n, 10) {
		return c, fmt.Errorf("checkpoint note: bad tree size %q", lines[1])
	}
	c.Size = n
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return c, fmt.Errorf("checkpoint note: bad root hash %q", lines[2])
	}
	copy(c.Root[:], root)
	return c, nil
}

// NoteVerifierKey returns the note verifier key ("name+hash+key", as
// golang.org/x/mod/sumdb/note writes it) of pub for origin.
func NoteVerifierKey(origin string, pub ed25519.PublicKey) (string, error) {
	return note.NewEd25519VerifierKey(origin, pub)
}

// noteSigner returns a note signer named origin with key.
func noteSigner(origin string, key ed25519.PrivateKey) (note.Signer, error) {
	vkey, err := NoteVerifierKey(origin, key.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, err
	}
	// vkey is name+hash+base64(alg‖key), the hash 8 hex digits; the
	// signer key takes the seed instead of the public key.
	hash := vkey[len(origin)+1 : len(origin)+9]
	skey := "PRIVATE+KEY+" + origin + "+" + hash + "+" +
		base64.StdEncoding.EncodeToString(append([]byte{1}, key.Seed()...))
	return note.NewSigner(skey)
}

// SignNote returns the checkpoint note of a tree signed with key.
func SignNote(key ed25519.PrivateKey, origin string, size int64, root tlog.Hash) (string, error) {
	s, err := noteSigner(origin, key)
	if err != nil {
		return "", fmt.Errorf("note signer for %q: %w", origin, err)
	}
	msg, err := note.Sign(&note.Note{Text: NoteText(origin, size, root)}, s)
	if err != nil {
		return "", fmt.Errorf("sign note: %w", err)
	}
	return string(msg), nil
}

// OpenNote checks a signed checkpoint note against the given verifier
// keys: at least one must have signed it. It returns the note (with the
// signatures it could not check, cosignatures among them, in
// UnverifiedSigs) and what it states.
func OpenNote(msg string, vkeys ...string) (*note.Note, NoteCheckpoint, error) {
	var vs []note.Verifier
	for _, k := range vkeys {
		v, err := note.NewVerifier(k)
		if err != nil {
			return nil, NoteCheckpoint{}, fmt.Errorf("verifier key %q: %w", k, err)
		}
		vs = append(vs, v)
	}
	n, err := note.Open([]byte(msg), note.VerifierList(vs...))
	if err != nil {
		return nil, NoteCheckpoint{}, err
	}
	c, err := ParseNoteText(n.Text)
	return n, c, err
}

// NoteOrigin returns the origin a note's first line names, without
// checking anything.
func NoteOrigin(msg string) string {
	origin, _, _ := strings.Cut(msg, "\n")
	return origin
}

// Cosignatures (C2SP tlog-cosignature/v1): a witness signs
// "cosignature/v1\ntime <unix seconds>\n" followed by the checkpoint's
// body, with Ed25519; the signature line carries the 8-byte big-endian
// time then the 64-byte signature, under a key hash of algorithm 0x04.

const cosignatureAlg = 0x04

func cosignKeyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write([]byte{cosignatureAlg})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

func cosignMessage(t uint64, text []byte) []byte {
	return append(fmt.Appendf(nil, "cosignature/v1\ntime %d\n", t), text...)
}

// Cosigner signs checkpoint notes as a witness (tlog-cosignature/v1). It
// is a note.Signer.
type Cosigner struct {
	name string
	key  ed25519.PrivateKey
	// Now is the cosignature's time (default time.Now).
	Now func() time.Time
}

// NewCosigner returns a cosigner named name (the witness's key name) with
// key.
func NewCosigner(name string, key ed25519.PrivateKey) *Cosigner {
	return &Cosigner{name: name, key: key, Now: time.Now}
}

// Name is the witness's key name.
func (c *Cosigner) Name() string { return c.name }

// KeyHash is the cosignature key hash of the witness's key.
func (c *Cosigner) KeyHash() uint32 {
	return cosignKeyHash(c.name, c.key.Public().(ed25519.PublicKey))
}

// Sign cosigns a checkpoint body.
func (c *Cosigner) Sign(msg []byte) ([]byte, error) {
	t := uint64(c.Now().Unix())
	sig := ed25519.Sign(c.key, cosignMessage(t, msg))
	out := binary.BigEndian.AppendUint64(nil, t)
	return append(out, sig...), nil
}

// VerifierKey is the witness's verifier key, "name+hash+base64(0x04‖key)",
// the form witnesses publish.
func (c *Cosigner) VerifierKey() string {
	return CosignerVerifierKey(c.name, c.key.Public().(ed25519.PublicKey))
}

// CosignerVerifierKey returns a witness's verifier key.
func CosignerVerifierKey(name string, pub ed25519.PublicKey) string {
	return fmt.Sprintf("%s+%08x+%s", name, cosignKeyHash(name, pub),
		base64.StdEncoding.EncodeToString(append([]byte{cosignatureAlg}, pub...)))
}

// cosignVerifier checks cosignatures; it is a note.Verifier.
type cosignVerifier struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
}

// NewCosignatureVerifier parses a witness's verifier key.
func NewCosignatureVerifier(vkey string) (note.Verifier, error) {
	name, rest, ok := strings.Cut(vkey, "+")
	hexHash, b64, ok2 := strings.Cut(rest, "+")
	if !ok || !ok2 || name == "" {
		return nil, errors.New("cosignature key: want name+hash+key")
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != cosignatureAlg {
		return nil, errors.New("cosignature key: not a cosignature/v1 Ed25519 key")
	}
	pub := ed25519.PublicKey(raw[1:])
	h := cosignKeyHash(name, pub)
	if fmt.Sprintf("%08x", h) != hexHash {
		return nil, errors.New("cosignature key: hash does not match")
	}
	return &cosignVerifier{name: name, hash: h, pub: pub}, nil
}

func (v *cosignVerifier) Name() string    { return v.name }
func (v *cosignVerifier) KeyHash() uint32 { return v.hash }
func (v *cosignVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig[:8])
	return ed25519.Verify(v.pub, cosignMessage(t, msg), sig[8:])
}

// CosignatureLines returns the signature lines of a signed note that are
// not by the named key (the log's own): the cosignatures.
func CosignatureLines(msg, logName string) []string {
	_, sigs, ok := strings.Cut(msg, "\n\n")
	if !ok {
		return nil
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(sigs, "\n"), "\n") {
		rest, ok := strings.CutPrefix(line, "— ")
		if !ok {
			continue
		}
		if name, _, _ := strings.Cut(rest, " "); name != logName {
			out = append(out, line)
		}
	}
	return out
}

// WithCosignatures appends signature lines to a signed note, skipping any
// it holds already.
func WithCosignatures(msg string, lines []string) string {
	var b bytes.Buffer
	b.WriteString(msg)
	for _, l := range lines {
		if !strings.Contains(msg, l+"\n") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
