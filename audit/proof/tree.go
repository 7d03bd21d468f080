package proof

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/mod/sumdb/tlog"
)

// Each chain is also an RFC 6962 Merkle tree whose leaves are its events'
// hash values in seq order: leaf i (from 0) is the event at seq i+1, and
// its leaf hash is SHA-256(0x00 ‖ event hash) (tlog.RecordHash). Stored
// hashes are numbered as golang.org/x/mod/sumdb/tlog numbers them.

// LeafHash returns the tree leaf hash of an event hash.
func LeafHash(eventHash []byte) tlog.Hash { return tlog.RecordHash(eventHash) }

// Frontier is a tree known by its frontier: the stored hashes on its
// right edge (the roots of the complete subtrees the tree is made of),
// all that a new leaf or the root needs. A writer's tree builder keeps
// one for its chain; verify follows a chain's tree with one. It is a
// tlog.HashReader of those hashes.
type Frontier struct {
	size   int64
	hashes map[int64]tlog.Hash
}

// NewFrontier returns the tree of no leaves.
func NewFrontier() *Frontier { return &Frontier{hashes: map[int64]tlog.Hash{}} }

// FrontierOf returns the tree of size leaves whose frontier hashes are hs,
// in FrontierIndexes(size) order.
func FrontierOf(size int64, hs []tlog.Hash) (*Frontier, error) {
	idx := FrontierIndexes(size)
	if len(idx) != len(hs) {
		return nil, fmt.Errorf("tree of %d leaves: %d frontier hashes, want %d", size, len(hs), len(idx))
	}
	f := &Frontier{size: size, hashes: make(map[int64]tlog.Hash, len(idx))}
	for i, x := range idx {
		f.hashes[x] = hs[i]
	}
	return f, nil
}

// FrontierIndexes are the stored hash indexes of the complete subtrees a
// tree of n leaves is made of.
func FrontierIndexes(n int64) []int64 {
	var out []int64
	for l := 0; n>>l > 0; l++ {
		if (n>>l)&1 == 1 {
			out = append(out, tlog.StoredHashIndex(l, (n>>l)-1))
		}
	}
	return out
}

// Size is the tree's number of leaves.
func (f *Frontier) Size() int64 { return f.size }

// Root is the tree's root hash.
func (f *Frontier) Root() (tlog.Hash, error) { return tlog.TreeHash(f.size, f) }

// Clone returns a copy of f.
func (f *Frontier) Clone() *Frontier { return &Frontier{size: f.size, hashes: maps.Clone(f.hashes)} }

// ReadHashes reads the frontier (tlog.HashReader).
func (f *Frontier) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		h, ok := f.hashes[x]
		if !ok {
			return nil, fmt.Errorf("tree hash %d is not on the frontier", x)
		}
		out[i] = h
	}
	return out, nil
}

// Push adds the leaf of an event hash and returns the stored hashes it
// makes, from index tlog.StoredHashIndex(0, size before) on. What the
// frontier no longer needs is dropped every 1024 leaves (and by Prune).
func (f *Frontier) Push(eventHash []byte) ([]tlog.Hash, error) {
	hs, err := tlog.StoredHashesForRecordHash(f.size, LeafHash(eventHash), f)
	if err != nil {
		return nil, err
	}
	x := tlog.StoredHashIndex(0, f.size)
	for j, h := range hs {
		f.hashes[x+int64(j)] = h
	}
	f.size++
	if f.size%1024 == 0 {
		f.Prune()
	}
	return hs, nil
}

// Prune drops what the frontier no longer needs.
func (f *Frontier) Prune() {
	keep := FrontierIndexes(f.size)
	for k := range f.hashes {
		if !slices.Contains(keep, k) {
			delete(f.hashes, k)
		}
	}
}

// PurgedTree is a chain's tree where retention dropped its rows, as
// retention.applied records it: Size leaves (the last purged seq), their
// Root, and the Frontier hashes (base64, in FrontierIndexes order), from
// which the tree's later roots follow without the dropped leaves.
type PurgedTree struct {
	ChainID  string   `json:"chain_id"`
	Size     int64    `json:"tree_size"`
	Root     string   `json:"root"`
	Frontier []string `json:"frontier"`
}

// PurgedTreeOf records f as chainID's tree at a purge.
func PurgedTreeOf(chainID string, f *Frontier) (PurgedTree, error) {
	t := PurgedTree{ChainID: chainID, Size: f.size}
	root, err := f.Root()
	if err != nil {
		return t, err
	}
	t.Root = b64(root[:])
	hs, err := f.ReadHashes(FrontierIndexes(f.size))
	if err != nil {
		return t, err
	}
	for _, h := range hs {
		t.Frontier = append(t.Frontier, b64(h[:]))
	}
	return t, nil
}

// Tree decodes t, checking that its frontier makes its root.
func (t PurgedTree) Tree() (*Frontier, error) {
	hs := make([]tlog.Hash, len(t.Frontier))
	for i, s := range t.Frontier {
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw) != tlog.HashSize {
			return nil, fmt.Errorf("frontier hash %d is not base64 of 32 bytes", i)
		}
		hs[i] = tlog.Hash(raw)
	}
	f, err := FrontierOf(t.Size, hs)
	if err != nil {
		return nil, err
	}
	root, err := f.Root()
	if err != nil {
		return nil, err
	}
	if b64(root[:]) != t.Root {
		return nil, fmt.Errorf("the frontier makes root %s, the record says %s", b64(root[:]), t.Root)
	}
	return f, nil
}
