package proof

import (
	"crypto/ed25519"
	"errors"
	"fmt"
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
// rewritten prefix and a note not signed by the pinned key, keeping its
// view as it was.
func TestWitnessAlarms(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	_, wkey, _ := ed25519.GenerateKey(nil)
	const origin = "sandgate.gw1/gw1-abc"
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
	checkpoint := func(tree *memTree, size int64, k ed25519.PrivateKey) string {
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
	prover := func(tree *memTree) ConsistencyFunc {
		return func(_ string, from, to int64) ([]tlog.Hash, error) { return tlog.ProveTree(to, from, tree) }
	}
	w, err := NewWitness(t.TempDir(), key.Public().(ed25519.PublicKey), NewCosigner("w", wkey))
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := w.Observe(checkpoint(honest, 5, key), prover(honest))
	if err != nil {
		t.Fatal(err)
	}
	wv, _ := NewCosignatureVerifier(NewCosigner("w", wkey).VerifierKey())
	if _, err := note.Open([]byte(cosigned), note.VerifierList(wv)); err != nil {
		t.Fatalf("cosignature: %v", err)
	}
	if _, err := w.Observe(checkpoint(honest, 10, key), prover(honest)); err != nil {
		t.Fatalf("consistent growth: %v", err)
	}
	if _, err := w.Observe(checkpoint(honest, 10, key), prover(honest)); err != nil {
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := w.Observe(tt.msg, prover(tt.tree))
			var alarm *WitnessAlarm
			if !errors.As(err, &alarm) || alarm.Kind != tt.kind {
				t.Fatalf("got %v, want alarm %s", err, tt.kind)
			}
			v, _, _ := w.View(origin)
			if v.Size != 10 {
				t.Errorf("view moved to %d", v.Size)
			}
		})
	}
	if _, err := w.Observe(checkpoint(honest, 20, key), prover(honest)); err != nil {
		t.Fatalf("honest growth after alarms: %v", err)
	}
}
