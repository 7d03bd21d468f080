package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// rfc6962Root is the Merkle tree hash of RFC 6962 section 2.1 over leaf
// data, written from the RFC and nothing of sandgate's or tlog's.
func rfc6962Root(leaves [][]byte) []byte {
	switch len(leaves) {
	case 0:
		h := sha256.Sum256(nil)
		return h[:]
	case 1:
		h := sha256.Sum256(append([]byte{0}, leaves[0]...))
		return h[:]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	h := sha256.New()
	h.Write([]byte{1})
	h.Write(rfc6962Root(leaves[:k]))
	h.Write(rfc6962Root(leaves[k:]))
	return h.Sum(nil)
}

// chainHashes returns the hashes of chainID's events in seq order.
func chainHashes(t testing.TB, db *sql.DB, chainID string) [][]byte {
	t.Helper()
	rows, err := db.Query(`SELECT hash FROM audit_events WHERE chain_id = $1 ORDER BY seq`, chainID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var h []byte
		if err := rows.Scan(&h); err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

// TestTreeAndProofsAgainstIndependentVerifiers: every checkpoint note the
// writer signs verifies with x/mod's note verifier, its root is the
// RFC 6962 tree hash of the chain's event hashes computed from the RFC,
// and the inclusion and consistency proofs the Store answers check with
// tlog.CheckRecord and tlog.CheckTree.
func TestTreeAndProofsAgainstIndependentVerifiers(t *testing.T) {
	dsn, db := newDB(t)
	s := testStore(t, dsn, func(c *Config) { c.CheckpointEvery = 7; c.MaxBatch = 3; c.CheckpointInterval = time.Minute })
	ctx := context.Background()
	for i := range 60 {
		if i%10 == 0 {
			if err := s.Record(ctx, lifecycle(i, fmt.Sprintf("run-%d", i))); err != nil {
				t.Fatal(err)
			}
			continue
		}
		s.Emit(lifecycle(i, fmt.Sprintf("run-%d", i)))
	}
	chain, pub := s.ChainID(), s.PublicKey()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r := readOnly(t, dsn, nil)
	leaves := chainHashes(t, db, chain)
	origin := proof.Origin("test-node", chain)
	vkey, err := proof.NoteVerifierKey(origin, pub)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}

	rows, err := db.Query(`SELECT seq, note FROM audit_checkpoints WHERE chain_id = $1 AND note IS NOT NULL ORDER BY id`, chain)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[int64]tlog.Hash{}
	for rows.Next() {
		var seq int64
		var msg string
		if err := rows.Scan(&seq, &msg); err != nil {
			t.Fatal(err)
		}
		n, err := note.Open([]byte(msg), note.VerifierList(verifier))
		if err != nil {
			t.Fatalf("note at %d: %v\n%s", seq, err, msg)
		}
		c, err := proof.ParseNoteText(n.Text)
		if err != nil {
			t.Fatal(err)
		}
		if c.Origin != origin || c.Size != seq {
			t.Errorf("note at %d states %q size %d", seq, c.Origin, c.Size)
		}
		if want := rfc6962Root(leaves[:seq]); !bytes.Equal(c.Root[:], want) {
			t.Errorf("note at %d: root %x, RFC 6962 says %x", seq, c.Root, want)
		}
		sizes[seq] = c.Root
	}
	rows.Close()
	if len(sizes) < 5 {
		t.Fatalf("only %d checkpoint notes over %d events", len(sizes), len(leaves))
	}

	cp, err := r.Proofs().Checkpoint(ctx, chain)
	if err != nil {
		t.Fatal(err)
	}
	if cp.TreeSize != int64(len(leaves)) || cp.Origin != origin {
		t.Fatalf("newest checkpoint: size %d origin %q, want %d %q", cp.TreeSize, cp.Origin, len(leaves), origin)
	}

	var ids []string
	idRows, _ := db.Query(`SELECT event_id::text FROM audit_events WHERE chain_id = $1 ORDER BY seq`, chain)
	for idRows.Next() {
		var id string
		idRows.Scan(&id)
		ids = append(ids, id)
	}
	idRows.Close()
	for size, root := range sizes {
		for _, seq := range []int64{1, size / 2, size} {
			if seq < 1 {
				continue
			}
			p, err := r.Proofs().InclusionProof(ctx, ids[seq-1], size)
			if err != nil {
				t.Fatalf("inclusion of seq %d in %d: %v", seq, size, err)
			}
			if p.LeafIndex != seq-1 || p.TreeSize != size || !bytes.Equal(p.EventHash, leaves[seq-1]) {
				t.Errorf("inclusion of seq %d in %d: index %d size %d", seq, size, p.LeafIndex, p.TreeSize)
			}
			if err := tlog.CheckRecord(toHashes(p.Hashes), size, root, seq-1, tlog.RecordHash(leaves[seq-1])); err != nil {
				t.Errorf("tlog.CheckRecord seq %d in %d: %v", seq, size, err)
			}
		}
		for from := range sizes {
			if from > size {
				continue
			}
			p, err := r.Proofs().ConsistencyProof(ctx, chain, from, size)
			if err != nil {
				t.Fatalf("consistency %d→%d: %v", from, size, err)
			}
			if err := tlog.CheckTree(toHashes(p.Hashes), size, root, from, sizes[from]); err != nil {
				t.Errorf("tlog.CheckTree %d→%d: %v", from, size, err)
			}
		}
	}

	// A tampered proof or a wrong leaf fails the independent check.
	p, err := r.Proofs().InclusionProof(ctx, ids[3], 0)
	if err != nil {
		t.Fatal(err)
	}
	root := tlog.Hash(cp.RootHash)
	if err := tlog.CheckRecord(toHashes(p.Hashes), p.TreeSize, root, 3, tlog.RecordHash(leaves[4])); err == nil {
		t.Error("a proof checked for another leaf")
	}

	for _, tc := range []struct {
		name string
		err  error
		code sandgate.ErrorCode
	}{
		{"bad event id", second(r.Proofs().InclusionProof(ctx, "nope", 0)), sandgate.CodeInvalidRequest},
		{"unknown event", second(r.Proofs().InclusionProof(ctx, "0193a000-0000-7000-8000-000000000000", 0)), sandgate.CodeNotFound},
		{"size below seq", second(r.Proofs().InclusionProof(ctx, ids[20], 3)), sandgate.CodeInvalidRequest},
		{"unsigned size", second(r.Proofs().InclusionProof(ctx, ids[0], int64(len(leaves)+5))), sandgate.CodeNotFound},
		{"from zero", second(r.Proofs().ConsistencyProof(ctx, chain, 0, 0)), sandgate.CodeInvalidRequest},
		{"from above to", second(r.Proofs().ConsistencyProof(ctx, chain, 9, 7)), sandgate.CodeInvalidRequest},
		{"unknown chain", second(r.Proofs().ConsistencyProof(ctx, "nope", 1, 0)), sandgate.CodeNotFound},
		{"chain needed read-only", second(r.Proofs().Checkpoint(ctx, "")), sandgate.CodeInvalidRequest},
	} {
		if got := sandgate.ErrorCodeOf(tc.err); got != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, tc.err, tc.code)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func toHashes(b [][]byte) []tlog.Hash {
	out := make([]tlog.Hash, len(b))
	for i := range b {
		out[i] = tlog.Hash(b[i])
	}
	return out
}

// TestTreeCatchesUpFromEvents: a chain whose tree was never stored (a
// trail from before migration 9, or with the tree off) gets it at its next
// checkpoint, read from audit_events.
func TestTreeCatchesUpFromEvents(t *testing.T) {
	dsn, db := newDB(t)
	dir := t.TempDir()
	mod := func(c *Config) {
		c.SpoolDir, c.SigningKeyFile = dir+"/spool", dir+"/key"
		c.CheckpointEvery = 1000
	}
	s := testStore(t, dsn, func(c *Config) { mod(c); c.noTree = true })
	for i := range 40 {
		s.Emit(lifecycle(i, "r"))
	}
	chain := s.ChainID()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM audit_tree_hashes`); n != 0 {
		t.Fatalf("%d tree hashes with the tree off", n)
	}
	s = testStore(t, dsn, mod)
	s.Emit(lifecycle(41, "r"))
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	leaves := chainHashes(t, db, chain)
	cp, err := readOnly(t, dsn, nil).Proofs().Checkpoint(context.Background(), chain)
	if err != nil {
		t.Fatal(err)
	}
	if cp.TreeSize != int64(len(leaves)) || !bytes.Equal(cp.RootHash, rfc6962Root(leaves)) {
		t.Fatalf("after catch-up: size %d root %x, want %d %x", cp.TreeSize, cp.RootHash, len(leaves), rfc6962Root(leaves))
	}
	if n := count(t, db, `SELECT sum(end_index - start_index) FROM audit_tree_hashes WHERE chain_id = $1`, chain); n != tlog.StoredHashCount(int64(len(leaves))) {
		t.Fatalf("%d stored hashes, want %d", n, tlog.StoredHashCount(int64(len(leaves))))
	}
}

// TestNoteSignerMatchesXMod: the signer built from the checkpoint key
// signs notes x/mod's verifier accepts, and cosignatures check with the
// cosignature verifier only over the same text.
func TestNoteSignerMatchesXMod(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	msg, err := proof.SignNote(key, "sandgate.gw1/gw1-abc", 5, tlog.RecordHash([]byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	vkey, _ := note.NewEd25519VerifierKey("sandgate.gw1/gw1-abc", key.Public().(ed25519.PublicKey))
	if _, _, err := proof.OpenNote(msg, vkey); err != nil {
		t.Fatalf("x/mod verifier refuses the note: %v\n%s", err, msg)
	}
	_, wkey, _ := ed25519.GenerateKey(nil)
	cs := proof.NewCosigner("witness.example", wkey)
	n, _ := note.Open([]byte(msg), note.VerifierList())
	if n != nil {
		t.Fatal("opened without a verifier")
	}
	gw, _ := note.NewVerifier(vkey)
	opened, err := note.Open([]byte(msg), note.VerifierList(gw))
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := note.Sign(opened, cs)
	if err != nil {
		t.Fatal(err)
	}
	wv, err := proof.NewCosignatureVerifier(cs.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(cosigned, note.VerifierList(gw, wv)); err != nil {
		t.Fatalf("cosigned note: %v\n%s", err, cosigned)
	}
	forged := bytes.Replace(cosigned, []byte("\n5\n"), []byte("\n6\n"), 1)
	if _, err := note.Open(forged, note.VerifierList(wv)); err == nil {
		t.Fatal("a cosignature verified over changed text")
	}
}

// TestVerifyChecksNotes: verify follows each chain's tree and reports a
// note whose root is not the tree of the chain's rows, even when it is
// signed with the node's real key, and a note signed by another key.
func TestVerifyChecksNotes(t *testing.T) {
	dsn, db := newDB(t)
	s := testStore(t, dsn, func(c *Config) { c.CheckpointEvery = 5 })
	for i := range 12 {
		s.Emit(lifecycle(i, "r"))
	}
	chain, key := s.ChainID(), s.key
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	verify := func() map[string]int {
		t.Helper()
		rep, err := readOnly(t, dsn, trusting(key.Public().(ed25519.PublicKey))).Verifier().Verify(context.Background(), sandgate.VerifyRange{})
		if err != nil {
			t.Fatal(err)
		}
		return problemKinds(rep)
	}
	if got := verify(); len(got) != 0 {
		t.Fatalf("clean trail: %v", got)
	}
	var id, seq int64
	if err := db.QueryRow(`SELECT id, seq FROM audit_checkpoints WHERE chain_id = $1 AND note IS NOT NULL ORDER BY id LIMIT 1`, chain).Scan(&id, &seq); err != nil {
		t.Fatal(err)
	}
	wrong, err := proof.SignNote(key, proof.Origin("test-node", chain), seq, tlog.RecordHash([]byte("not the tree")))
	if err != nil {
		t.Fatal(err)
	}
	tamper(t, db, fmt.Sprintf(`UPDATE audit_checkpoints SET note = $n$%s$n$ WHERE id = %d`, wrong, id))
	if got := verify(); got[proof.ProblemNoteMismatch] != 1 {
		t.Fatalf("a note with another root, signed with the real key: %v", got)
	}
	_, other, _ := ed25519.GenerateKey(nil)
	leaves := chainHashes(t, db, chain)
	forged, _ := proof.SignNote(other, proof.Origin("test-node", chain), seq, tlog.Hash(rfc6962Root(leaves[:seq])))
	tamper(t, db, fmt.Sprintf(`UPDATE audit_checkpoints SET note = $n$%s$n$ WHERE id = %d`, forged, id))
	if got := verify(); got[proof.ProblemNoteMismatch] != 1 {
		t.Fatalf("a note signed by another key: %v", got)
	}
}
