package proof

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sandgate/sandgate"
)

// Which checkpoint keys to trust. The key registry (audit_keys, and the
// trail's key events) says which key each node registered, but anyone
// with the application role can register a key for a node name no gateway
// has used, so the registry alone vouches for nothing. Trust starts from
// anchors the operator configured:
//
//   - pinned keys: public keys the operator handed to the verifier (a
//     trusted-keys file, --public-key); each is trusted;
//   - cluster root keys: a key a root endorsed (sandgate audit
//     endorse-key; the node records the endorsement in the trail as
//     audit.key_endorsed) is trusted;
//   - the local key: this host's own checkpoint key and node name
//     (SANDGATE_SIGNING_KEY_FILE, SANDGATE_NODE). It counts only when the
//     trail registered that key for that node, and then with the keys the
//     registry vouches for as that node's (its first key and the rotations
//     each endorsed); or, where the material verified holds no such
//     registration (an archived month), when it signed checkpoints there.
//     A key file that belongs to no node of this trail is left out, and
//     the report says so: pinning it would make every node's key
//     untrusted (issue #26).
//
// Besides, a rotation a trusted key endorsed (sandgate audit rotate-key)
// is trusted. ResolveTrust is the one place this is decided: verify of the
// trail online (CLI and API) and offline, archives, receipts and the
// witness all use it.

// Anchor kinds, as reports name them.
const (
	AnchorPinned = "pinned"
	AnchorRoot   = "root"
	AnchorLocal  = "local"
)

// Anchors are what a verifier starts from to decide which keys to trust.
type Anchors struct {
	// Pinned are keys the operator pinned; Roots are cluster root keys.
	Pinned []ed25519.PublicKey
	Roots  []ed25519.PublicKey
	// Local is this host's checkpoint key, when one can be read.
	Local *LocalKey
	// Source says where the pinned and root keys were configured (flags,
	// a file, an environment variable), for the report.
	Source string
}

// LocalKey is a host's own checkpoint key, the node name it signs as, and
// the file it was read from. Signing says the verifying process itself
// signs the trail's checkpoints with it (a gateway verifying its own
// trail): it is then trusted before its first registration. Lineage says
// the registry is the database's, where the application role cannot
// rewrite a node's registrations: the keys it vouches for as the node's
// (the ones the local key replaced) are then trusted with it. An export
// or an archive can be rewritten whole, registrations included, so
// offline the local key is trusted alone (with the rotations it
// endorsed).
type LocalKey struct {
	Node    string
	Key     ed25519.PublicKey
	File    string
	Signing bool
	Lineage bool
}

// Empty reports whether a names no anchor at all.
func (a Anchors) Empty() bool { return len(a.Pinned) == 0 && len(a.Roots) == 0 && a.Local == nil }

// Endorsement is a cluster root key's signature over a node's checkpoint
// key: the root's holder vouches that the key is that node's. Its
// signature covers EndorsementMessage.
type Endorsement struct {
	Node      string `json:"node"`
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"` // hex
	RootKeyID string `json:"root_key_id"`
	Signature string `json:"signature"` // hex
}

// endorsementHeader is the first line of the endorsed message.
const endorsementHeader = "sandgate-key-endorsement-v1"

// EndorsementMessage returns the bytes a root's endorsement signs:
//
//	sandgate-key-endorsement-v1\n node\n hex(public key)
func EndorsementMessage(node string, pub ed25519.PublicKey) []byte {
	return fmt.Appendf(nil, "%s\n%s\n%x", endorsementHeader, node, []byte(pub))
}

// Endorse returns root's endorsement of pub as node's checkpoint key.
func Endorse(root ed25519.PrivateKey, node string, pub ed25519.PublicKey) Endorsement {
	return Endorsement{
		Node: node, KeyID: KeyID(pub), PublicKey: hex.EncodeToString(pub),
		RootKeyID: KeyID(root.Public().(ed25519.PublicKey)),
		Signature: hex.EncodeToString(ed25519.Sign(root, EndorsementMessage(node, pub))),
	}
}

// Key returns the endorsed key, or nil when e does not name one.
func (e Endorsement) Key() ed25519.PublicKey {
	b, err := hex.DecodeString(e.PublicKey)
	if err != nil || len(b) != ed25519.PublicKeySize || KeyID(b) != e.KeyID {
		return nil
	}
	return b
}

// Verify reports whether root signed e.
func (e Endorsement) Verify(root ed25519.PublicKey) bool {
	pub := e.Key()
	sig, err := hex.DecodeString(e.Signature)
	return pub != nil && err == nil && e.RootKeyID == KeyID(root) && ed25519.Verify(root, EndorsementMessage(e.Node, pub), sig)
}

// Payload is e as the payload of its audit.key_endorsed event.
func (e Endorsement) Payload() map[string]any {
	return map[string]any{"node": e.Node, "key_id": e.KeyID, "public_key": e.PublicKey,
		"root_key_id": e.RootKeyID, "signature": e.Signature}
}

// EndorsementFromEvent reads the endorsement an audit.key_endorsed event
// records; ok is false for any other event.
func EndorsementFromEvent(ev sandgate.Event) (Endorsement, bool) {
	if ev.Type != sandgate.EventAuditKeyEndorsed {
		return Endorsement{}, false
	}
	str := func(name string) string {
		s, _ := ev.Payload[name].(string)
		return s
	}
	e := Endorsement{Node: str("node"), KeyID: str("key_id"), PublicKey: str("public_key"),
		RootKeyID: str("root_key_id"), Signature: str("signature")}
	return e, e.Key() != nil
}

// maxEndorsementFile bounds an endorsement file.
const maxEndorsementFile = 4 << 10

// ParseEndorsement reads an endorsement file (JSON, as sandgate audit
// endorse-key writes it).
func ParseEndorsement(data []byte) (Endorsement, error) {
	var e Endorsement
	if len(data) > maxEndorsementFile {
		return e, fmt.Errorf("endorsement: longer than %d bytes", maxEndorsementFile)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("endorsement: %w", err)
	}
	if e.Key() == nil || e.Node == "" || e.RootKeyID == "" || e.Signature == "" {
		return e, errors.New("endorsement: node, key_id, public_key, root_key_id and signature are required, key_id naming public_key")
	}
	return e, nil
}

// Trust is the set of keys anchors make trusted over a trail's
// registrations and endorsements, with why each is, and a report of each
// anchor.
type Trust struct {
	keys    map[string]ed25519.PublicKey
	why     map[string]string
	anchors []sandgate.VerifyAnchor
	inUse   bool
}

// ResolveTrust decides which keys a's anchors make trusted, given the
// trail's key registrations (in registration order), the root
// endorsements it holds, and the keys whose checkpoint signatures over it
// verified (offline: a local key counts when it signed some).
func ResolveTrust(a Anchors, registry []KeyRecord, endorsements []Endorsement, signers ...ed25519.PublicKey) *Trust {
	t := &Trust{keys: map[string]ed25519.PublicKey{}, why: map[string]string{}, anchors: []sandgate.VerifyAnchor{}}
	for _, k := range a.Pinned {
		t.add(k, AnchorPinned)
		t.anchors = append(t.anchors, sandgate.VerifyAnchor{Kind: AnchorPinned, KeyID: KeyID(k), Source: a.Source, Used: true})
	}
	for _, root := range a.Roots {
		n := 0
		for _, e := range endorsements {
			if e.Verify(root) {
				t.add(e.Key(), "endorsed by root "+KeyID(root))
				n++
			}
		}
		t.anchors = append(t.anchors, sandgate.VerifyAnchor{Kind: AnchorRoot, KeyID: KeyID(root), Source: a.Source, Used: true,
			Detail: fmt.Sprintf("%d endorsement(s) of node keys by this root in the trail", n)})
	}
	judged := slices.Clone(registry)
	registryKeys(judged, nil)
	if a.Local != nil {
		t.addLocal(*a.Local, judged, slices.ContainsFunc(signers, func(k ed25519.PublicKey) bool { return k.Equal(a.Local.Key) }))
	}
	t.inUse = len(a.Pinned) > 0 || len(a.Roots) > 0 || len(t.keys) > 0
	// A rotation a trusted key endorsed is trusted: the registrations are
	// in order, so one pass follows a chain of rotations.
	for _, k := range judged {
		old, ok := t.keys[k.Replaces]
		pub := k.publicKey()
		if !ok || pub == nil || k.Replaces == "" {
			continue
		}
		if sig, err := hex.DecodeString(k.Endorsement); err == nil && ed25519.Verify(old, KeyRotationMessage(k.Node, k.Replaces, pub), sig) {
			t.add(pub, "rotation endorsed by trusted key "+k.Replaces)
		}
	}
	return t
}

// addLocal trusts the local key, and the keys the registry vouches for
// as its node's, when the trail registered it for that node; or the key
// alone when it signed checkpoints of the trail.
func (t *Trust) addLocal(l LocalKey, judged []KeyRecord, signed bool) {
	id := KeyID(l.Key)
	anchor := sandgate.VerifyAnchor{Kind: AnchorLocal, KeyID: id, Node: l.Node, Source: l.File}
	registered := false
	for _, k := range judged {
		registered = registered || (k.Node == l.Node && k.KeyID == id && k.Known)
	}
	if l.Signing {
		t.add(l.Key, "the key this node signs with")
	}
	if !registered && l.Signing {
		anchor.Used = true
		anchor.Detail = "the key this process signs the trail with; not yet registered for node " + l.Node
		t.anchors = append(t.anchors, anchor)
		return
	}
	if !registered && signed {
		t.add(l.Key, "the local key, which signed checkpoints of this trail")
		anchor.Used = true
		anchor.Detail = fmt.Sprintf("not registered for node %q here, but it signed checkpoints of this trail", l.Node)
		t.anchors = append(t.anchors, anchor)
		return
	}
	if !registered {
		anchor.Detail = fmt.Sprintf("not used: this trail registers no key %s for node %q, and the key signed none of its checkpoints, so the key file belongs to no node of it", id, l.Node)
		t.anchors = append(t.anchors, anchor)
		return
	}
	anchor.Used = true
	if !l.Lineage {
		t.add(l.Key, "the local key, registered for node "+l.Node)
		anchor.Detail = fmt.Sprintf("registered for node %q: the key is trusted (offline, not the keys it replaced: an export can be rewritten whole)", l.Node)
		t.anchors = append(t.anchors, anchor)
		return
	}
	n := 0
	for _, k := range judged {
		if k.Node == l.Node && k.Known {
			t.add(k.publicKey(), "the local node's key, as registered for node "+l.Node)
			n++
		}
	}
	anchor.Detail = fmt.Sprintf("registered for node %q: its %d key(s) the registry vouches for are trusted", l.Node, n)
	t.anchors = append(t.anchors, anchor)
}

func (t *Trust) add(pub ed25519.PublicKey, why string) {
	if pub == nil {
		return
	}
	id := KeyID(pub)
	if _, ok := t.keys[id]; !ok {
		t.keys[id], t.why[id] = pub, why
	}
}

// InUse reports whether any anchor is in use: keys pinned, a root
// configured, or the local key registered. Without one, nothing is
// trusted and verify says so.
func (t *Trust) InUse() bool { return t.inUse }

// Trusts reports whether pub is trusted.
func (t *Trust) Trusts(pub ed25519.PublicKey) bool {
	k, ok := t.keys[KeyID(pub)]
	return ok && k.Equal(pub)
}

// Why says why the key keyID is trusted ("" when it is not).
func (t *Trust) Why(keyID string) string { return t.why[keyID] }

// Keys returns the trusted keys, by key ID.
func (t *Trust) Keys() map[string]ed25519.PublicKey { return t.keys }

// Anchors reports each anchor and whether it was used.
func (t *Trust) Anchors() []sandgate.VerifyAnchor { return t.anchors }
