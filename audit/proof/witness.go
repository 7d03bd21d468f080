package proof

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// A witness keeps, apart from the gateway, the newest checkpoint it
// verified of each chain it watches, with the origin the chain's notes
// were under and the gateway key that signed them when it first saw the
// chain: a new checkpoint is accepted only when it is for that chain,
// under that origin, signed by that key (one of the keys pinned), and a
// consistency proof shows the old tree is a prefix of the new one.
// Accepted checkpoints are cosigned (tlog-cosignature/v1). Anything else
// is an alarm: the log's history was rewritten or forked, or someone
// tries to pass another log off as it.

// Alarm kinds a witness raises.
const (
	AlarmBadSignature = "bad_signature" // the note is not signed by a pinned gateway key
	AlarmRollback     = "rollback"      // the tree is smaller than one seen before
	AlarmFork         = "fork"          // same size, another root
	AlarmInconsistent = "inconsistent"  // no valid consistency proof from the old tree to the new
	AlarmOrigin       = "origin"        // the chain's note is under another origin than before, or names another chain
	AlarmKey          = "key"           // the chain's note is signed by another pinned key than before
)

// alarmKinds are every kind, for the gateway that checks an alarm.
var alarmKinds = []string{AlarmBadSignature, AlarmRollback, AlarmFork, AlarmInconsistent, AlarmOrigin, AlarmKey}

// WitnessAlarm is a checkpoint a witness refuses: the chain, the tree it
// last saw of it (SeenSize 0 when none) and the one it was offered.
// Origin is the origin the chain's notes were under (the offered one
// when the witness had seen none).
type WitnessAlarm struct {
	Kind    string
	ChainID string
	Origin  string
	Detail  string

	SeenSize    int64
	SeenRoot    string // base64
	OfferedSize int64
	OfferedRoot string // base64
}

func (a *WitnessAlarm) Error() string {
	return fmt.Sprintf("ALARM %s for %s: %s", a.Kind, a.Origin, a.Detail)
}

// maxWitnessedNote bounds a note a witness reads.
const maxWitnessedNote = 16 << 10

// maxGatewayKeys bounds the keys a witness pins.
const maxGatewayKeys = 256

// Witness checks and cosigns the checkpoints of the chains it watches,
// signed by the gateway keys it trusts, keeping its view in a
// WitnessState. It trusts keys as verify does (ResolveTrust's anchors):
// keys pinned, and keys a cluster root endorsed for the node whose chain
// the note is of.
type Witness struct {
	state   WitnessState
	keys    []ed25519.PublicKey
	roots   []ed25519.PublicKey
	signer  *Cosigner
	nowFunc func() time.Time
}

// NewWitness returns a witness keeping its view in dir (created 0700),
// trusting notes signed by a key anchors pin or its roots endorsed, and
// cosigning with signer.
func NewWitness(dir string, anchors Anchors, signer *Cosigner) (*Witness, error) {
	if n := len(anchors.Pinned) + len(anchors.Roots); n == 0 || n > maxGatewayKeys {
		return nil, fmt.Errorf("witness: pin between 1 and %d gateway or root keys, not %d", maxGatewayKeys, n)
	}
	st, err := OpenWitnessState(dir)
	if err != nil {
		return nil, err
	}
	return &Witness{state: st, keys: anchors.Pinned, roots: anchors.Roots, signer: signer, nowFunc: time.Now}, nil
}

// State is the witness's directory.
func (w *Witness) State() WitnessState { return w.state }

// ConsistencyFunc fetches the consistency proof from the tree of from
// leaves to the tree of to leaves of chain chainID.
type ConsistencyFunc func(chainID string, from, to int64) ([]tlog.Hash, error)

// Observe checks a checkpoint note of chain chainID, fetched from the
// log with the root's endorsements of its key (when the witness trusts a
// root), against the witness's view of that chain: the note's origin (the
// chain's, and the one it first saw), a trusted key's signature (the one
// it first saw), and consistency with the newest tree it saw (fetching the
// proof through prove). It returns the note cosigned by the witness and
// records the new view; a refused checkpoint is a *WitnessAlarm and
// leaves the view as it was.
func (w *Witness) Observe(chainID, msg string, endorsements []Endorsement, prove ConsistencyFunc) (string, error) {
	if chainID == "" {
		return "", errors.New("witness: which chain the note is of is required")
	}
	if len(msg) > maxWitnessedNote {
		return "", fmt.Errorf("witness: the note of chain %s is longer than %d bytes", chainID, maxWitnessedNote)
	}
	old, seen, err := w.state.View(chainID)
	if err != nil {
		return "", err
	}
	origin := NoteOrigin(msg)
	body, _, _ := strings.Cut(msg, "\n\n")
	offered, _ := ParseNoteText(body + "\n")
	alarm := func(kind, detail string) *WitnessAlarm {
		a := &WitnessAlarm{Kind: kind, ChainID: chainID, Origin: origin, Detail: detail, OfferedSize: offered.Size, OfferedRoot: b64(offered.Root[:])}
		if seen {
			a.Origin, a.SeenSize, a.SeenRoot = old.Origin, old.Size, old.Root
		}
		return a
	}
	switch {
	case !strings.HasSuffix(origin, "/"+chainID):
		return "", alarm(AlarmOrigin, fmt.Sprintf("asked for chain %s, offered a note under origin %q, which is not that chain's", chainID, origin))
	case seen && old.Origin != origin:
		return "", alarm(AlarmOrigin, fmt.Sprintf("chain %s's notes were under origin %q when first seen at %s; offered one under %q",
			chainID, old.Origin, old.SeenAt.Format(time.RFC3339), origin))
	}
	n, c, keyID, err := w.open(msg, chainID, origin, endorsements)
	if err != nil {
		return "", alarm(AlarmBadSignature, fmt.Sprintf("not signed by a pinned gateway key: %v", err))
	}
	if seen && old.KeyID != "" && keyID != old.KeyID {
		return "", alarm(AlarmKey, fmt.Sprintf("chain %s's notes were signed by key %s when first seen; offered one signed by key %s", chainID, old.KeyID, keyID))
	}
	if seen {
		if a, err := w.extends(old, c, prove, alarm); a != nil || err != nil {
			if a != nil {
				return "", a
			}
			return "", err
		}
	}
	if !seen || c.Size > old.Size || old.KeyID == "" {
		v := WitnessView{ChainID: chainID, Origin: origin, KeyID: keyID, Size: c.Size, Root: b64(c.Root[:]), Note: msg, SeenAt: w.nowFunc().UTC()}
		if seen && c.Size <= old.Size {
			v = old
			v.ChainID, v.KeyID = chainID, keyID
		}
		if err := w.state.store(v); err != nil {
			return "", err
		}
	}
	return Cosign(n.Text, w.signer)
}

// open checks msg's signature by a trusted key under origin (a pinned
// key, or one a root endorsed for the node whose chain it is), and returns
// the note, what it states and the key's ID.
func (w *Witness) open(msg, chainID, origin string, endorsements []Endorsement) (*note.Note, NoteCheckpoint, string, error) {
	ring := newKeyring()
	for _, k := range w.keys {
		ring.trust(origin, k)
	}
	for _, e := range endorsements {
		for _, root := range w.roots {
			if e.Verify(root) && Origin(e.Node, chainID) == origin {
				ring.trust(origin, e.Key())
			}
		}
	}
	n, err := note.Open([]byte(msg), ring)
	if err != nil {
		return nil, NoteCheckpoint{}, "", err
	}
	c, err := ParseNoteText(n.Text)
	if err != nil {
		return nil, NoteCheckpoint{}, "", err
	}
	return n, c, ring.keyID(n.Sigs[0]), nil
}

// extends checks that c, the offered tree, extends old, the tree seen:
// an alarm when it does not, an error when that cannot be told now.
func (w *Witness) extends(old WitnessView, c NoteCheckpoint, prove ConsistencyFunc, alarm func(kind, detail string) *WitnessAlarm) (*WitnessAlarm, error) {
	oldRoot, err := base64.StdEncoding.DecodeString(old.Root)
	if err != nil || len(oldRoot) != tlog.HashSize {
		return nil, fmt.Errorf("witness state of %s: bad root", old.ChainID)
	}
	switch {
	case c.Size < old.Size:
		return alarm(AlarmRollback, fmt.Sprintf("tree size %d is smaller than the %d seen at %s", c.Size, old.Size, old.SeenAt.Format(time.RFC3339))), nil
	case c.Size == old.Size && tlog.Hash(oldRoot) != c.Root:
		return alarm(AlarmFork, fmt.Sprintf("tree size %d has root %s, but %s was seen at %s", c.Size, b64(c.Root[:]), old.Root, old.SeenAt.Format(time.RFC3339))), nil
	case c.Size > old.Size && old.Size > 0:
		proof, err := prove(old.ChainID, old.Size, c.Size)
		if err != nil {
			return nil, fmt.Errorf("consistency proof %d→%d of %s: %w", old.Size, c.Size, old.ChainID, err)
		}
		if err := tlog.CheckTree(proof, c.Size, c.Root, old.Size, tlog.Hash(oldRoot)); err != nil {
			return alarm(AlarmInconsistent, fmt.Sprintf("the tree of %d leaves (root %s) does not extend the tree of %d leaves seen at %s (root %s): %v; the log's history was rewritten",
				c.Size, b64(c.Root[:]), old.Size, old.SeenAt.Format(time.RFC3339), old.Root, err)), nil
		}
	}
	return nil, nil
}

// Cosign returns the note cosigned by c (tlog-cosignature/v1): msg is a
// note's text, or a signed note, whose signatures are left out.
func Cosign(msg string, c *Cosigner) (string, error) {
	text := msg
	if body, _, ok := strings.Cut(msg, "\n\n"); ok {
		text = body + "\n"
	}
	cosigned, err := note.Sign(&note.Note{Text: text}, c)
	if err != nil {
		return "", fmt.Errorf("cosign: %w", err)
	}
	return string(cosigned), nil
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
