package proof

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/sandgate/sandgate"
)

// The key registry. Each node's checkpoint key is registered in audit_keys
// when the node first uses it, before it signs its first checkpoint,
// through audit_register_key (the application role cannot write the table
// itself), and in the same transaction the registration becomes an event
// of the trail: audit.key_registered for a node's first key,
// audit.key_rotated for a later one, which names the key it replaces and
// carries that key's endorsement. Verify trusts what the registry vouches
// for: a node's first key, a rotation endorsed by the key it replaces, and
// the keys migration 5 registered from the checkpoints that existed then.

// Sources of a registration.
const (
	KeySourceWriter    = "writer"    // a writer registered its key on first use
	KeySourceMigration = "migration" // migration 5 found it in older checkpoints
)

// KeyRecord is one registration of a node's checkpoint key.
type KeyRecord struct {
	Node      string `json:"node"`
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"` // hex
	// FirstUsedAt is the database's clock at registration (for keys
	// registered by migration, their first checkpoint's time).
	FirstUsedAt time.Time `json:"first_used_at"`
	ChainID     string    `json:"chain_id,omitempty"` // the chain whose writer registered it
	// Replaces is the node's key this one replaced (a rotation), and
	// Endorsement (hex) that key's signature over KeyRotationMessage.
	Replaces    string `json:"replaces,omitempty"`
	Endorsement string `json:"endorsement,omitempty"`
	Source      string `json:"source"`
	// Known, Trusted, TrustedBy and Pinned are verify's verdicts: the
	// registry vouches for the key (first key of its node, endorsed
	// rotation, registered by migration) or it is trusted; the anchors
	// make it trusted, and why; it is among the pinned keys.
	Known     bool   `json:"known"`
	Trusted   bool   `json:"trusted"`
	TrustedBy string `json:"trusted_by,omitempty"`
	Pinned    bool   `json:"pinned"`
}

// KeyRotationMessage returns the bytes a rotation's endorsement signs, with
// the replaced key:
//
//	sandgate-key-rotation-v1\n node\n replaced key_id\n hex(new public key)
func KeyRotationMessage(node, replaces string, pub ed25519.PublicKey) []byte {
	return fmt.Appendf(nil, "sandgate-key-rotation-v1\n%s\n%s\n%x", node, replaces, []byte(pub))
}

// publicKey returns k's public key, or nil when it is not one.
func (k KeyRecord) publicKey() ed25519.PublicKey {
	b, err := hex.DecodeString(k.PublicKey)
	if err != nil || len(b) != ed25519.PublicKeySize || KeyID(b) != k.KeyID {
		return nil
	}
	return b
}

// Payload is k as the payload of its trail event.
func (k KeyRecord) Payload() map[string]any {
	p := map[string]any{
		"node": k.Node, "key_id": k.KeyID, "public_key": k.PublicKey, "source": k.Source,
		"first_used_at": k.FirstUsedAt.UTC().Format(time.RFC3339Nano),
	}
	for name, v := range map[string]string{"chain_id": k.ChainID, "replaces": k.Replaces, "endorsement": k.Endorsement} {
		if v != "" {
			p[name] = v
		}
	}
	return p
}

// KeyFromEvent reads the registration an audit.key_registered or
// audit.key_rotated event records; ok is false for any other event.
func KeyFromEvent(ev sandgate.Event, recordedAt time.Time) (KeyRecord, bool) {
	if ev.Type != sandgate.EventAuditKeyRegistered && ev.Type != sandgate.EventAuditKeyRotated {
		return KeyRecord{}, false
	}
	str := func(name string) string {
		s, _ := ev.Payload[name].(string)
		return s
	}
	k := KeyRecord{Node: str("node"), KeyID: str("key_id"), PublicKey: str("public_key"), ChainID: str("chain_id"),
		Replaces: str("replaces"), Endorsement: str("endorsement"), Source: str("source"), FirstUsedAt: recordedAt}
	if t, err := time.Parse(time.RFC3339Nano, str("first_used_at")); err == nil {
		k.FirstUsedAt = t
	}
	return k, k.publicKey() != nil
}

// registryKeys decides which registrations the registry vouches for,
// given in registration order, and marks them Known, Trusted and Pinned
// (by trust, which may be nil): each node's first key, every key
// migration 5 registered, and a rotation endorsed by the vouched-for key
// it replaces; a trusted key always. It returns the keys vouched for, by
// key ID, and the rotations it rejects.
func registryKeys(keys []KeyRecord, trust *Trust) (map[string]ed25519.PublicKey, []KeyRecord) {
	known := map[string]ed25519.PublicKey{}
	valid := map[[2]string]ed25519.PublicKey{} // node, key ID
	seen := map[string]bool{}                  // nodes with a key
	var rejected []KeyRecord
	for i := range keys {
		k := &keys[i]
		pub := k.publicKey()
		if pub == nil {
			continue
		}
		if trust != nil && trust.Trusts(pub) {
			k.Trusted, k.TrustedBy = true, trust.Why(k.KeyID)
			k.Pinned = k.TrustedBy == AnchorPinned
		}
		ok := k.Trusted || k.Source == KeySourceMigration
		if !ok && !seen[k.Node] && k.Replaces == "" {
			ok = true // the node's first key
		}
		if !ok && k.Replaces != "" {
			sig, err := hex.DecodeString(k.Endorsement)
			old := valid[[2]string{k.Node, k.Replaces}]
			ok = err == nil && old != nil && ed25519.Verify(old, KeyRotationMessage(k.Node, k.Replaces, pub), sig)
		}
		seen[k.Node] = true
		if !ok {
			rejected = append(rejected, *k)
			continue
		}
		k.Known = true
		valid[[2]string{k.Node, k.KeyID}] = pub
		known[k.KeyID] = pub
	}
	return known, rejected
}

// RegistryKnown returns the keys the registry alone vouches for, by key
// ID: what a verifier with no anchor judges checkpoints by (and says that
// nothing vouches for them).
func RegistryKnown(keys []KeyRecord) map[string]ed25519.PublicKey {
	known, _ := registryKeys(slices.Clone(keys), nil)
	return known
}
