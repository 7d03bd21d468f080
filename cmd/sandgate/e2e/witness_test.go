package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The witness and the gateway's cosignatures under attack (issue #29
// items 2 and 4), by the adversary docs/audit.md names: a database
// superuser holding a node's checkpoint key.

// witnessFixture is a gateway whose key file the test holds, with a
// witness that has cosigned one of its checkpoints.
type witnessFixture struct {
	s                   *testServer
	keyFile, gwKey      string
	state, wkey         string
	seen                api.CheckpointView
	node                ed25519.PrivateKey
	witnessName, witKey string
}

// newWitnessFixture starts a gateway, records some reviews, waits for a
// checkpoint note covering them and has a witness cosign it.
func newWitnessFixture(t *testing.T, opts ...serverOption) *witnessFixture {
	t.Helper()
	dir := t.TempDir()
	f := &witnessFixture{keyFile: filepath.Join(dir, "checkpoint.key"), gwKey: filepath.Join(dir, "gw.pub"),
		state: filepath.Join(dir, "witness"), wkey: filepath.Join(dir, "witness.key"), witnessName: "witness.test"}
	wpriv, err := proof.LoadSigningKey(f.wkey, true)
	if err != nil {
		t.Fatal(err)
	}
	f.witKey = proof.NewCosigner(f.witnessName, wpriv).VerifierKey()
	pins := filepath.Join(dir, "witnesses")
	if err := os.WriteFile(pins, []byte(f.witKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts = append([]serverOption{withEnv("SANDGATE_SIGNING_KEY_FILE", f.keyFile), withEnv("SANDGATE_CHECKPOINT_EVERY", "2"),
		withEnv("SANDGATE_AUDIT_WITNESS_KEYS_FILE", pins)}, opts...)
	f.s = startServer(t, opts...)
	reviews(t, f.s, 7)
	out, err := auditCLI(f.s.Env, "audit", "public-key")
	if err != nil || os.WriteFile(f.gwKey, []byte(out), 0o600) != nil {
		t.Fatalf("public-key: %v\n%s", err, out)
	}
	if f.node, err = proof.LoadSigningKey(f.keyFile, false); err != nil {
		t.Fatal(err)
	}
	sandgatetest.WaitFor(t, "a checkpoint note over the reviews", 30*time.Second, func() bool {
		cp, err := f.s.Client.Checkpoint(context.Background(), "")
		return err == nil && cp.TreeSize >= 7
	})
	if out, err := witness(t, f.s, f.state, f.wkey, f.gwKey); err != nil {
		t.Fatalf("first look: %v\n%s", err, out)
	}
	if f.seen, err = f.s.Client.Checkpoint(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	return f
}

// insertNote inserts, as a superuser, a checkpoint of chain at size
// whose note is msg: the newest, so the gateway serves it.
func insertNote(t *testing.T, dsn, chain string, size int64, msg string, key ed25519.PrivateKey) {
	t.Helper()
	db := audittest.OpenDB(t, dsn)
	pub := key.Public().(ed25519.PublicKey)
	head := make([]byte, proof.HashSize)
	if _, err := db.Exec(`INSERT INTO audit_checkpoints (chain_id, seq, head_hash, created_at, final, signature, key_id, public_key, note)
		VALUES ($1, $2, $3, now(), false, $4, $5, $6, $7)`, chain, size, head, make([]byte, 64), proof.KeyID(pub), []byte(pub), msg); err != nil {
		t.Fatalf("insert a checkpoint note: %v", err)
	}
}

// renamedRollback is the adversary's note: chain's tree at a size smaller
// than the witness saw, with another root, under a renamed origin, signed
// with the node's real key.
func renamedRollback(t *testing.T, f *witnessFixture) (origin, msg string) {
	t.Helper()
	origin = strings.Replace(f.seen.Origin, "/", ".rewritten/", 1)
	var root tlog.Hash
	if _, err := rand.Read(root[:]); err != nil {
		t.Fatal(err)
	}
	msg, err := proof.SignNote(f.node, origin, f.seen.TreeSize-1, root)
	if err != nil {
		t.Fatal(err)
	}
	return origin, msg
}

// TestWitnessRenamedOrigin is issue #29 item 2: the adversary inserts a
// signed note for the witnessed chain, smaller and with another root,
// under a renamed origin. The witness keyed its view by the offered
// origin, so it saw a new log, said "consistent; cosigned", and the
// gateway served the rolled-back note with the witness's cosignature.
// Now the witness's view is the chain's, with the origin and key it first
// saw: it raises ALARM origin, cosigns nothing, and its view stays.
func TestWitnessRenamedOrigin(t *testing.T) {
	f := newWitnessFixture(t)
	origin, msg := renamedRollback(t, f)
	// The gateway re-signs its head every few seconds, which makes its own
	// note the newest again: the adversary inserts theirs just before
	// each look, until the witness has been offered it.
	var out string
	var err error
	for attempt := 0; ; attempt++ {
		insertNote(t, f.s.DSN, f.seen.ChainID, f.seen.TreeSize-1, msg, f.node)
		out, err = witness(t, f.s, f.state, f.wkey, f.gwKey)
		if strings.Contains(out, origin) || attempt == 4 {
			break
		}
	}
	var exit *cli.ExitError
	if !errors.As(err, &exit) || exit.Code != exitWitnessAlarm || !strings.Contains(out+err.Error(), "ALARM "+proof.AlarmOrigin) {
		t.Fatalf("witness offered the rolled-back note under %s: %v\n%s", origin, err, out)
	}
	cp, err := f.s.Client.Checkpoint(context.Background(), f.seen.ChainID)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Origin == origin && len(cp.Cosignatures) > 0 {
		t.Errorf("the gateway serves the rolled-back note with cosignatures %q", cp.Cosignatures)
	}
	view, ok, err := witnessView(t, f.state, f.seen.ChainID)
	if err != nil || !ok || view.Origin != f.seen.Origin || view.Size != f.seen.TreeSize {
		t.Errorf("the witness's view = %+v (%t, %v), want the origin and size it saw: %s %d", view, ok, err, f.seen.Origin, f.seen.TreeSize)
	}
}

// TestCosignatureOfRenamedOrigin is the gateway's side of item 2, a
// variant: a witness key the operator pinned posts a cosignature of the
// renamed note directly. The gateway refuses it: the note's origin is
// not its chain's.
func TestCosignatureOfRenamedOrigin(t *testing.T) {
	f := newWitnessFixture(t)
	_, msg := renamedRollback(t, f)
	insertNote(t, f.s.DSN, f.seen.ChainID, f.seen.TreeSize-1, msg, f.node)
	wpriv, err := proof.LoadSigningKey(f.wkey, false)
	if err != nil {
		t.Fatal(err)
	}
	n, err := proof.Cosign(msg, proof.NewCosigner(f.witnessName, wpriv))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.s.Client.Cosign(context.Background(), api.CosignatureRequest{Note: n, WitnessKey: f.witKey})
	if !isCode(err, "SANDGATE-INVALID-REQUEST") {
		t.Fatalf("cosignature of a note under another origin = %v, want INVALID-REQUEST", err)
	}
}

// witnessView reads the witness's view of chain in state.
func witnessView(t *testing.T, state, chain string) (proof.WitnessView, bool, error) {
	t.Helper()
	st, err := proof.OpenWitnessState(state)
	if err != nil {
		t.Fatal(err)
	}
	return st.View(chain)
}

// TestWitnessTrustsRoot: a witness given the cluster's root key (no
// gateway key) trusts a node's notes through the endorsement the gateway
// serves with its checkpoint (the same notion of trust as verify and
// verify-receipt), and refuses them with another root.
func TestWitnessTrustsRoot(t *testing.T) {
	dir := t.TempDir()
	keyFile, root, rootPub := filepath.Join(dir, "checkpoint.key"), filepath.Join(dir, "root.key"), filepath.Join(dir, "root.pub")
	node := "gw-root-" + sandgatetest.RandomHex(t, 3)
	endorsement := filepath.Join(dir, "endorsement.json")
	env := map[string]string{"SANDGATE_SIGNING_KEY_FILE": keyFile, "SANDGATE_NODE": node}
	if out, err := auditCLI(env, "audit", "endorse-key", "--root-key-file", root, "-o", endorsement); err != nil {
		t.Fatalf("endorse-key: %v\n%s", err, out)
	}
	out, err := auditCLI(map[string]string{}, "audit", "public-key", "--signing-key-file", root)
	if err != nil || os.WriteFile(rootPub, []byte(out), 0o600) != nil {
		t.Fatalf("root public key: %v\n%s", err, out)
	}
	wpriv, err := proof.LoadSigningKey(filepath.Join(dir, "witness.key"), true)
	if err != nil {
		t.Fatal(err)
	}
	pins := filepath.Join(dir, "witnesses")
	if err := os.WriteFile(pins, []byte(proof.NewCosigner("witness.test", wpriv).VerifierKey()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withEnv("SANDGATE_SIGNING_KEY_FILE", keyFile), withEnv("SANDGATE_NODE", node),
		withEnv("SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE", endorsement), withEnv("SANDGATE_CHECKPOINT_EVERY", "2"),
		withEnv("SANDGATE_AUDIT_WITNESS_KEYS_FILE", pins))
	reviews(t, s, 3)
	sandgatetest.WaitFor(t, "a checkpoint note with its key's endorsement", 30*time.Second, func() bool {
		cp, err := s.Client.Checkpoint(context.Background(), "")
		return err == nil && len(cp.Endorsements) == 1
	})
	look := func(state, rootFile string) (string, error) {
		var out bytes.Buffer
		err := runApp(context.Background(), []string{"audit", "witness", "--once", "--gateway", s.URL, "--token", s.Token,
			"--state", state, "--key", filepath.Join(dir, "witness.key"), "--root-key", rootFile, "--name", "witness.test"}, map[string]string{}, &out, nil)
		return out.String(), err
	}
	if out, err := look(filepath.Join(dir, "w1"), rootPub); err != nil || !strings.Contains(out, "consistent") {
		t.Fatalf("witness trusting the root: %v\n%s", err, out)
	}
	other := filepath.Join(dir, "other.pub")
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	if err := os.WriteFile(other, proof.EncodePublicKey(otherKey.Public().(ed25519.PublicKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = look(filepath.Join(dir, "w2"), other)
	var exit *cli.ExitError
	if !errors.As(err, &exit) || exit.Code != exitWitnessAlarm || !strings.Contains(out+err.Error(), "ALARM "+proof.AlarmBadSignature) {
		t.Fatalf("witness trusting another root: %v\n%s", err, out)
	}
}
