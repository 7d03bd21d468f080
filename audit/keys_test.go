package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// TestKeyRegisteredOnFirstUse: a writer registers its key for its node
// before its first checkpoint, at the database's clock, and records the
// registration in its chain under that checkpoint; another writer of the
// same node and key (serve's decision chain, a restart) records nothing
// new.
func TestKeyRegisteredOnFirstUse(t *testing.T) {
	dsn, db := newDB(t)
	ctx := context.Background()
	dir := t.TempDir()
	key := filepath.Join(dir, "checkpoint.key")
	var before time.Time
	if err := db.QueryRow(`SELECT now()`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	s := testStore(t, dsn, func(c *Config) { c.SigningKeyFile = key; c.DecisionChain = true })
	if got := count(t, db, `SELECT count(*) FROM audit_keys`); got != 0 {
		t.Fatalf("keys registered before any checkpoint = %d, want 0", got)
	}
	if err := s.Record(ctx, lifecycle(0, "r")); err != nil {
		t.Fatal(err)
	}
	s.Emit(lifecycle(1, "r"))
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again := testStore(t, dsn, func(c *Config) { c.SigningKeyFile = key })
	again.Emit(lifecycle(2, "r"))
	if err := again.Close(ctx); err != nil {
		t.Fatal(err)
	}

	keys, err := readOnly(t, dsn, nil).Reader().Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pub := s.PublicKey()
	want := []proof.KeyRecord{{Node: "test-node", KeyID: proof.KeyID(pub), PublicKey: hex.EncodeToString(pub), Source: proof.KeySourceWriter}}
	if diff := cmp.Diff(want, keys, cmpopts.IgnoreFields(proof.KeyRecord{}, "FirstUsedAt", "ChainID")); diff != "" {
		t.Fatalf("registry (-want +got):\n%s", diff)
	}
	if keys[0].FirstUsedAt.Before(before) || keys[0].ChainID == "" {
		t.Errorf("registered at %s by chain %q; want the database's clock after %s and the registering chain", keys[0].FirstUsedAt, keys[0].ChainID, before)
	}
	var chain string
	var seq, signedAt int64
	if err := db.QueryRow(`SELECT chain_id, seq FROM audit_events WHERE type = 'audit.key_registered' AND payload->>'key_id' = $1`, proof.KeyID(pub)).Scan(&chain, &seq); err != nil {
		t.Fatalf("the registration event: %v", err)
	}
	if got := count(t, db, `SELECT count(*) FROM audit_events WHERE type IN ('audit.key_registered', 'audit.key_rotated')`); got != 1 {
		t.Errorf("key events = %d, want 1", got)
	}
	if err := db.QueryRow(`SELECT min(seq) FROM audit_checkpoints WHERE chain_id = $1`, chain).Scan(&signedAt); err != nil || signedAt != seq {
		t.Errorf("the chain's first checkpoint signs seq %d (%v), want the registration's, %d", signedAt, err, seq)
	}
	// On the node's host: its key, registered for it, is the anchor.
	rep, err := readOnly(t, dsn, func(c *Config) { c.Anchors.Local = &proof.LocalKey{Node: "test-node", Key: pub} }).Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
	if err != nil || !rep.OK {
		t.Fatalf("VerifyTrail = %+v, %v", rep, err)
	}
}

// TestKeyRotation: a node's new key is a rotation. Endorsed by the key it
// replaces (sandgate audit rotate-key), the registry vouches for it and
// the trail verifies without pinned keys; not endorsed (a node started
// with a new key, or anyone with the application role), verify reports it
// until the key is pinned.
func TestKeyRotation(t *testing.T) {
	dsn, _ := newDB(t)
	ctx := context.Background()
	dir := t.TempDir()
	first, second, third := filepath.Join(dir, "first.key"), filepath.Join(dir, "second.key"), filepath.Join(dir, "third.key")
	write := func(key string, mod func(*Config)) *Store {
		t.Helper()
		s := testStore(t, dsn, func(c *Config) {
			c.SigningKeyFile = key
			if mod != nil {
				mod(c)
			}
		})
		s.Emit(lifecycle(0, "r"))
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := write(first, nil)
	// The operator rotates: the new key is registered, endorsed by the old.
	rot := testStore(t, dsn, func(c *Config) { c.SigningKeyFile = second; c.PreviousSigningKeyFile = first })
	reg, err := rot.RegisterKey(ctx)
	if err != nil {
		t.Fatalf("RegisterKey: %v", err)
	}
	if reg.Replaces != proof.KeyID(a.PublicKey()) || reg.Endorsement == "" {
		t.Fatalf("rotation = %+v, want it to replace %s with an endorsement", reg, proof.KeyID(a.PublicKey()))
	}
	if err := rot.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b := write(second, nil)
	// The first key pinned: its endorsed successor is trusted too. The
	// node's host, holding the second: the key it replaced, registered
	// for the node, too.
	for name, mod := range map[string]func(*Config){
		"the first key pinned": trusting(a.PublicKey()),
		"the local key":        func(c *Config) { c.Anchors.Local = &proof.LocalKey{Node: "test-node", Key: b.PublicKey()} },
	} {
		rep, err := readOnly(t, dsn, mod).Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
		if err != nil || !rep.OK {
			t.Fatalf("%s: VerifyTrail after an endorsed rotation = %+v, %v", name, rep, err)
		}
		if len(rep.Keys) != 2 || !rep.Keys[1].Known || !rep.Keys[1].Trusted || rep.Keys[1].Replaces != rep.Keys[0].KeyID {
			t.Fatalf("%s: keys = %+v, want the first and its endorsed successor, both trusted", name, rep.Keys)
		}
	}

	// A node started with a key of its own, nothing endorsing it.
	c := write(third, nil)
	tests := []struct {
		name    string
		trusted []ed25519.PublicKey
		want    map[string]int
	}{
		{"the registry alone", nil, map[string]int{proof.ProblemUnendorsedKey: 1, proof.ProblemUnknownKey: 1, proof.ProblemUnsignedChain: 1, proof.ProblemUnpinnedKeys: 1}},
		{"the first key pinned", []ed25519.PublicKey{a.PublicKey()}, map[string]int{proof.ProblemUnendorsedKey: 1, proof.ProblemUntrustedKey: 1, proof.ProblemUnsignedChain: 1}},
		{"the new key pinned", []ed25519.PublicKey{a.PublicKey(), b.PublicKey(), c.PublicKey()}, map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := readOnly(t, dsn, func(cfg *Config) {
				cfg.Anchors.Pinned = tt.trusted
				later := time.Now().Add(time.Hour)
				cfg.Clock = func() time.Time { return later }
			}).Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, problemKinds(rep)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%+v", diff, rep.Problems)
			}
		})
	}
}

// TestPreviousSigningKeyFileMissing: a previous key that cannot be read
// stops Open, instead of registering an unendorsed rotation.
func TestPreviousSigningKeyFileMissing(t *testing.T) {
	dsn, _ := newDB(t)
	dir := t.TempDir()
	_, err := Open(context.Background(), Config{DSN: dsn, SpoolDir: filepath.Join(dir, "spool"),
		SigningKeyFile: filepath.Join(dir, "k"), PreviousSigningKeyFile: filepath.Join(dir, "missing"), Logger: testLogger()})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open with a missing previous key = %v, want the file's absence", err)
	}
}

// TestParsePublicKeys: a trusted-keys file holds PEM blocks, or hex keys
// one a line with blanks and comments; nothing else.
func TestParsePublicKeys(t *testing.T) {
	var pubs []ed25519.PublicKey
	for range 2 {
		pub, _, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, pub)
	}
	tests := []struct {
		name    string
		data    string
		want    []ed25519.PublicKey
		wantErr bool
	}{
		{"PEM blocks", string(proof.EncodePublicKey(pubs[0])) + "\n" + string(proof.EncodePublicKey(pubs[1])), pubs, false},
		{"hex lines", "# gw-1\n" + hex.EncodeToString(pubs[0]) + "\n\n  " + hex.EncodeToString(pubs[1]) + "  \n", pubs, false},
		{"bad hex line", hex.EncodeToString(pubs[0]) + "\nnot a key\n", nil, true},
		{"empty", "\n# nothing\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := proof.ParsePublicKeys([]byte(tt.data))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParsePublicKeys error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParsePublicKeys (-want +got):\n%s", diff)
			}
		})
	}
}
