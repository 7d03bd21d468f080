package proof

import (
	"crypto/ed25519"
	"encoding/hex"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestResolveTrust: which keys each anchor makes trusted, over a registry
// of two nodes (node-a rotated its key, endorsed; node-b has one key) and
// a root's endorsement of node-b's key.
func TestResolveTrust(t *testing.T) {
	gen := func() (ed25519.PublicKey, ed25519.PrivateKey) {
		pub, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		return pub, priv
	}
	a1, a1priv := gen()
	a2, _ := gen()
	b1, _ := gen()
	rootPub, root := gen()
	otherRootPub, otherRoot := gen()
	stray, _ := gen()
	reg := func(node string, k ed25519.PublicKey) KeyRecord {
		return KeyRecord{Node: node, KeyID: KeyID(k), PublicKey: hex.EncodeToString(k), Source: KeySourceWriter, FirstUsedAt: time.Now()}
	}
	rot := reg("node-a", a2)
	rot.Replaces = KeyID(a1)
	rot.Endorsement = hex.EncodeToString(ed25519.Sign(a1priv, KeyRotationMessage("node-a", KeyID(a1), a2)))
	registry := []KeyRecord{reg("node-a", a1), reg("node-b", b1), rot}
	endorsed := Endorse(root, "node-b", b1)
	forged := Endorse(otherRoot, "node-a", stray)
	forged.RootKeyID = KeyID(rootPub) // claims the cluster's root
	ends := []Endorsement{endorsed, forged}
	id := func(ks ...ed25519.PublicKey) []string {
		out := []string{}
		for _, k := range ks {
			out = append(out, KeyID(k))
		}
		return out
	}
	tests := []struct {
		name    string
		anchors Anchors
		signers []ed25519.PublicKey
		want    []string // trusted key IDs
		inUse   bool
	}{
		{"nothing", Anchors{}, nil, id(), false},
		{"a pinned key and its endorsed rotation", Anchors{Pinned: []ed25519.PublicKey{a1}}, nil, id(a1, a2), true},
		{"the root: the key it endorsed, not the forged endorsement", Anchors{Roots: []ed25519.PublicKey{rootPub}}, nil, id(b1), true},
		{"another root", Anchors{Roots: []ed25519.PublicKey{otherRootPub}}, nil, id(), true},
		{"the local key registered for its node, online: the node's lineage", Anchors{Local: &LocalKey{Node: "node-a", Key: a2, Lineage: true}}, nil, id(a1, a2), true},
		// Offline an export can be rewritten whole: the first key it
		// registers for the node, which "endorsed" the local key, may be
		// a forger's.
		{"the local key registered for its node, offline: the key alone, not the one it replaced", Anchors{Local: &LocalKey{Node: "node-a", Key: a2}}, nil, id(a2), true},
		{"the local key under another node's name", Anchors{Local: &LocalKey{Node: "node-b", Key: a2}}, nil, id(), false},
		{"a stray local key", Anchors{Local: &LocalKey{Node: "node-a", Key: stray}}, nil, id(), false},
		{"a stray local key that signed checkpoints here", Anchors{Local: &LocalKey{Node: "node-a", Key: stray}}, []ed25519.PublicKey{stray}, id(stray), true},
		{"the key this process signs with", Anchors{Local: &LocalKey{Node: "node-c", Key: stray, Signing: true}}, nil, id(stray), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := ResolveTrust(tt.anchors, registry, ends, tt.signers...)
			got := []string{}
			for _, k := range []ed25519.PublicKey{a1, a2, b1, stray} {
				if tr.Trusts(k) {
					got = append(got, KeyID(k))
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("trusted (-want +got):\n%s", diff)
			}
			if tr.InUse() != tt.inUse {
				t.Errorf("in use = %t, want %t", tr.InUse(), tt.inUse)
			}
			if n := len(tt.anchors.Pinned) + len(tt.anchors.Roots); tt.anchors.Local != nil && len(tr.Anchors()) != n+1 || tt.anchors.Local == nil && len(tr.Anchors()) != n {
				t.Errorf("anchors reported = %+v", tr.Anchors())
			}
		})
	}
}

// TestParseEndorsement: an endorsement file is exactly the JSON
// endorse-key writes; a key ID that does not name its key, or another
// field, is refused.
func TestParseEndorsement(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	_, root, _ := ed25519.GenerateKey(nil)
	e := Endorse(root, "gw-1", pub)
	good := `{"node":"gw-1","key_id":"` + e.KeyID + `","public_key":"` + e.PublicKey + `","root_key_id":"` + e.RootKeyID + `","signature":"` + e.Signature + `"}`
	if got, err := ParseEndorsement([]byte(good)); err != nil || got != e || !got.Verify(root.Public().(ed25519.PublicKey)) {
		t.Fatalf("ParseEndorsement = %+v, %v; want %+v, verifying", got, err, e)
	}
	for _, bad := range []string{
		`{"node":"gw-1","key_id":"00","public_key":"` + e.PublicKey + `","root_key_id":"x","signature":"y"}`,
		`{"node":"gw-1","key_id":"` + e.KeyID + `","public_key":"` + e.PublicKey + `","root_key_id":"x","signature":"y","extra":1}`,
		`{"key_id":"` + e.KeyID + `","public_key":"` + e.PublicKey + `","root_key_id":"x","signature":"y"}`,
	} {
		if _, err := ParseEndorsement([]byte(bad)); err == nil {
			t.Errorf("ParseEndorsement(%s) accepted", bad)
		}
	}
}
