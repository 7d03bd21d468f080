package proof

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// memTree is an RFC 6962 tree in memory, for the witness's log.
type memTree struct{ stored map[int64]tlog.Hash }

func (m *memTree) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		out[i] = m.stored[x]
	}
	return out, nil
}

func newMemTree(leaves []string) *memTree {
	m := &memTree{stored: map[int64]tlog.Hash{}}
	for i, l := range leaves {
		hs, _ := tlog.StoredHashes(int64(i), []byte(l), m)
		for j, h := range hs {
			m.stored[tlog.StoredHashIndex(0, int64(i))+int64(j)] = h
		}
	}
	return m
}

// TestWitnessAlarms: a witness cosigns a first checkpoint and each that
// extends it, and raises the named alarm for a rollback, a fork, a
// rewritten prefix, a note not signed by a pinned key, a note of the
// chain under another origin (issue #29 item 2: a rolled-back history
// under a renamed origin), one whose origin names another chain, and one
// signed by another pinned key than the chain's, keeping its view as it
// was.
func TestWitnessAlarms(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	_, second, _ := ed25519.GenerateKey(nil) // pinned too: another node's
	_, wkey, _ := ed25519.GenerateKey(nil)
	const chain, origin = "gw1-abc", "sandgate.gw1/gw1-abc"
	leaves := func(n int, changed int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprint("event ", i)
			if i == changed {
				out[i] = "rewritten"
			}
		}
		return out
	}
	honest := newMemTree(leaves(20, -1))
	forged := newMemTree(leaves(20, 2))
	checkpointAs := func(origin string, tree *memTree, size int64, k ed25519.PrivateKey) string {
		root, err := tlog.TreeHash(size, tree)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := SignNote(k, origin, size, root)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	checkpoint := func(tree *memTree, size int64, k ed25519.PrivateKey) string {
		return checkpointAs(origin, tree, size, k)
	}
	prover := func(tree *memTree) ConsistencyFunc {
		return func(_ string, from, to int64) ([]tlog.Hash, error) { return tlog.ProveTree(to, from, tree) }
	}
	pinned := []ed25519.PublicKey{key.Public().(ed25519.PublicKey), second.Public().(ed25519.PublicKey)}
	w, err := NewWitness(t.TempDir(), Anchors{Pinned: pinned}, NewCosigner("w", wkey))
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := w.Observe(chain, checkpoint(honest, 5, key), nil, prover(honest))
	if err != nil {
		t.Fatal(err)
	}
	wv, _ := NewCosignatureVerifier(NewCosigner("w", wkey).VerifierKey())
	if _, err := note.Open([]byte(cosigned), note.VerifierList(wv)); err != nil {
		t.Fatalf("cosignature: %v", err)
	}
	if _, err := w.Observe(chain, checkpoint(honest, 10, key), nil, prover(honest)); err != nil {
		t.Fatalf("consistent growth: %v", err)
	}
	if _, err := w.Observe(chain, checkpoint(honest, 10, key), nil, prover(honest)); err != nil {
		t.Fatalf("the same checkpoint again: %v", err)
	}
	tests := []struct {
		name string
		msg  string
		tree *memTree
		kind string
	}{
		{"rollback", checkpoint(honest, 7, key), honest, AlarmRollback},
		{"fork at the same size", checkpoint(forged, 10, key), forged, AlarmFork},
		{"rewritten prefix", checkpoint(forged, 15, key), forged, AlarmInconsistent},
		{"another key", checkpoint(honest, 15, other), honest, AlarmBadSignature},
		{"a smaller tree under a renamed origin", checkpointAs("sandgate.gw1.rewritten/gw1-abc", forged, 6, key), forged, AlarmOrigin},
		{"a renamed origin, growing", checkpointAs("sandgate.gw9/gw1-abc", honest, 15, key), honest, AlarmOrigin},
		{"an origin naming another chain", checkpointAs("sandgate.gw1/gw1-xyz", honest, 15, key), honest, AlarmOrigin},
		{"another pinned key", checkpoint(honest, 15, second), honest, AlarmKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := w.Observe(chain, tt.msg, nil, prover(tt.tree))
			var alarm *WitnessAlarm
			if !errors.As(err, &alarm) || alarm.Kind != tt.kind {
				t.Fatalf("got %v, want alarm %s", err, tt.kind)
			}
			v, _, _ := w.State().View(chain)
			if v.Size != 10 || v.Origin != origin || v.KeyID != KeyID(pinned[0]) {
				t.Errorf("view moved to %+v", v)
			}
		})
	}
	if _, err := w.Observe(chain, checkpoint(honest, 20, key), nil, prover(honest)); err != nil {
		t.Fatalf("honest growth after alarms: %v", err)
	}
}

// TestWitnessLegacyView: a view an earlier witness kept under its origin's
// name (no chain, no key) still holds the witness to what it saw: a
// smaller tree of that chain is a rollback, a growing one is accepted and
// kept as the chain's, with its key.
func TestWitnessLegacyView(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	_, wkey, _ := ed25519.GenerateKey(nil)
	const chain, origin = "gw1-abc", "sandgate.gw1/gw1-abc"
	tree := newMemTree([]string{"a", "b", "c", "d", "e", "f"})
	note := func(size int64) string {
		root, _ := tlog.TreeHash(size, tree)
		msg, err := SignNote(key, origin, size, root)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	dir := t.TempDir()
	root4, _ := tlog.TreeHash(4, tree)
	legacy := fmt.Sprintf(`{"origin": %q, "size": 4, "root": %q, "note": "", "seen_at": "2026-01-02T03:04:05Z"}`, origin, b64(root4[:]))
	if err := os.WriteFile(filepath.Join(dir, "sandgate.gw1_gw1-abc.json"), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := NewWitness(dir, Anchors{Pinned: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}, NewCosigner("w", wkey))
	if err != nil {
		t.Fatal(err)
	}
	prove := func(_ string, from, to int64) ([]tlog.Hash, error) { return tlog.ProveTree(to, from, tree) }
	var alarm *WitnessAlarm
	if _, err := w.Observe(chain, note(3), nil, prove); !errors.As(err, &alarm) || alarm.Kind != AlarmRollback {
		t.Fatalf("a tree smaller than the legacy view's = %v, want a rollback", err)
	}
	if _, err := w.Observe(chain, note(6), nil, prove); err != nil {
		t.Fatalf("growth past the legacy view: %v", err)
	}
	if v, ok, err := w.State().View(chain); err != nil || !ok || v.Size != 6 || v.KeyID != KeyID(key.Public().(ed25519.PublicKey)) {
		t.Errorf("view = %+v %t %v, want the chain's at 6 with its key", v, ok, err)
	}
}

// TestWitnessTrustsRoot: a witness that trusts a cluster root (and pins
// no gateway key) accepts a note signed by a key the root endorsed for the
// node whose chain it is, and raises bad_signature for one endorsed for
// another node, or by another root.
func TestWitnessTrustsRoot(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	rootPub, root, _ := ed25519.GenerateKey(nil)
	_, otherRoot, _ := ed25519.GenerateKey(nil)
	_, wkey, _ := ed25519.GenerateKey(nil)
	pub := key.Public().(ed25519.PublicKey)
	const chain, origin = "gw1-abc", "sandgate.gw1/gw1-abc"
	tree := newMemTree([]string{"a", "b", "c"})
	root3, _ := tlog.TreeHash(3, tree)
	msg, err := SignNote(key, origin, 3, root3)
	if err != nil {
		t.Fatal(err)
	}
	prove := func(_ string, from, to int64) ([]tlog.Hash, error) { return tlog.ProveTree(to, from, tree) }
	for _, tt := range []struct {
		name string
		e    Endorsement
		ok   bool
	}{
		{"endorsed for the chain's node", Endorse(root, "gw1", pub), true},
		{"endorsed for another node", Endorse(root, "gw2", pub), false},
		{"endorsed by another root", Endorse(otherRoot, "gw1", pub), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := NewWitness(t.TempDir(), Anchors{Roots: []ed25519.PublicKey{rootPub}}, NewCosigner("w", wkey))
			if err != nil {
				t.Fatal(err)
			}
			_, err = w.Observe(chain, msg, []Endorsement{tt.e}, prove)
			var alarm *WitnessAlarm
			switch {
			case tt.ok && err != nil:
				t.Errorf("Observe = %v, want it cosigned", err)
			case !tt.ok && (!errors.As(err, &alarm) || alarm.Kind != AlarmBadSignature):
				t.Errorf("Observe = %v, want %s", err, AlarmBadSignature)
			}
		})
	}
}
