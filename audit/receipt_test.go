package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// runReceipt records a run's events on two chains (decisions apart),
// closes the writers and returns the run's receipt and the node's key.
func runReceipt(t *testing.T) (Receipt, ed25519.PublicKey) {
	t.Helper()
	dsn, _ := newDB(t)
	s := testStore(t, dsn, func(c *Config) { c.DecisionChain = true; c.CheckpointEvery = 4 })
	ctx := context.Background()
	run := "run-receipt-1"
	code := 3
	if err := s.Record(ctx,
		sandgate.Event{Type: sandgate.EventRunRequested, RunID: run, Actor: "alice", Team: "payments"},
		sandgate.Event{Type: sandgate.EventAdmissionAllowed, RunID: run, DecisionID: "dec-1", Outcome: "allowed", PolicyRevision: "sha256:abc"},
	); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		s.Emit(lifecycle(i, "other-run"))
	}
	s.Emit(sandgate.Event{Type: sandgate.EventContainerCreated, RunID: run, ContainerID: "c1"})
	s.Emit(sandgate.Event{Type: sandgate.EventContainerStarted, RunID: run, ContainerID: "c1"})
	s.Emit(sandgate.Event{Type: sandgate.EventContainerExited, RunID: run, ContainerID: "c1", Outcome: "failed", ExitCode: &code})
	s.Emit(sandgate.Event{Type: sandgate.EventArtifactsCollected, RunID: run,
		Payload: map[string]any{"artifacts": []any{map[string]any{"path": "out/a.txt", "sha256": strings.Repeat("ab", 32), "size": 3}}}})
	pub := s.PublicKey()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := readOnly(t, dsn, nil).Proofs().Receipt(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	return rec, pub
}

// TestReceiptVerifiesOfflineAndIndependently: a run's receipt checks with
// VerifyReceipt, and each of its proofs and notes with x/mod's tlog and
// note alone; after a JSON round trip (what a file gives).
func TestReceiptVerifiesOfflineAndIndependently(t *testing.T) {
	rec, pub := runReceipt(t)
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back Receipt
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	pinned := proof.ReceiptOptions{Anchors: proof.Anchors{Pinned: []ed25519.PublicKey{pub}}}
	rep := proof.VerifyReceipt(back, pinned)
	if !rep.OK {
		t.Fatalf("receipt does not verify: %+v", rep.Problems)
	}
	if rep.End == nil || rep.End.Type != "container.exited" || rep.End.ExitCode == nil || *rep.End.ExitCode != 3 ||
		rep.Decision == nil || rep.Decision.PolicyRevision != "sha256:abc" || len(rep.Proves) != len(back.Events) || rep.Statement == "" {
		t.Errorf("what the receipt proves: decision %+v, end %+v, %d proven, %q", rep.Decision, rep.End, len(rep.Proves), rep.Statement)
	}
	want := []string{"run.requested", "admission.allowed", "container.created", "container.started", "container.exited", "artifacts.collected"}
	if strings.Join(rep.Types, ",") != strings.Join(want, ",") {
		t.Errorf("types %v, want %v", rep.Types, want)
	}
	if len(back.Checkpoints) != 2 {
		t.Errorf("%d checkpoints, want one per chain (2)", len(back.Checkpoints))
	}
	// Independently: x/mod's note and tlog, and the chain hash written out.
	roots := map[string]tlog.Hash{}
	sizes := map[string]int64{}
	for _, cp := range back.Checkpoints {
		origin := strings.SplitN(cp.Note, "\n", 2)[0]
		vkey, _ := note.NewEd25519VerifierKey(origin, pub)
		v, _ := note.NewVerifier(vkey)
		n, err := note.Open([]byte(cp.Note), note.VerifierList(v))
		if err != nil {
			t.Fatalf("x/mod note.Open: %v", err)
		}
		lines := strings.Split(n.Text, "\n")
		root, _ := base64.StdEncoding.DecodeString(lines[2])
		roots[cp.ChainID] = tlog.Hash(root)
		var size int64
		json.Unmarshal([]byte(lines[1]), &size)
		sizes[cp.ChainID] = size
	}
	for _, e := range back.Events {
		h, _ := hex.DecodeString(e.Hash)
		var proof tlog.RecordProof
		for _, p := range e.Proof {
			b, _ := base64.StdEncoding.DecodeString(p)
			proof = append(proof, tlog.Hash(b))
		}
		if err := tlog.CheckRecord(proof, sizes[e.ChainID], roots[e.ChainID], e.Seq-1, tlog.RecordHash(h)); err != nil {
			t.Errorf("tlog.CheckRecord %s: %v", e.Type, err)
		}
	}
	// Pinning the node's key as a note verifier key passes, as does the
	// node's key as the local key; another key fails, and with nothing
	// pinned the receipt's own keys vouch for nothing.
	vkeys := proof.ReceiptOptions{VerifierKeys: back.Keys}
	if rep := proof.VerifyReceipt(back, vkeys); !rep.OK {
		t.Errorf("pinned verifier keys: %+v", rep.Problems)
	}
	local := proof.ReceiptOptions{Anchors: proof.Anchors{Local: &proof.LocalKey{Node: "test-node", Key: pub}}}
	if rep := proof.VerifyReceipt(back, local); !rep.OK {
		t.Errorf("the local key: %+v", rep.Problems)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	if rep := proof.VerifyReceipt(back, proof.ReceiptOptions{Anchors: proof.Anchors{Pinned: []ed25519.PublicKey{other}}}); rep.OK || rep.Problems[0].Kind != proof.ReceiptUntrustedKey {
		t.Errorf("pinned other key: %+v", rep)
	}
	if rep := proof.VerifyReceipt(back, proof.ReceiptOptions{}); rep.OK || rep.Problems[0].Kind != proof.ReceiptUnpinnedKeys || len(rep.Proves) != len(back.Events) {
		t.Errorf("nothing pinned: %+v", rep)
	}
}

// TestReceiptTampering: each kind of change to a receipt is found and
// named: its events changed, re-hashed or taken out (the end, the
// decision: issue #29 item 5), its notes re-signed, and a receipt made
// larger than a receipt holds (checked in time linear in its size, each
// note's key looked up by its hash; BenchmarkVerifyCraftedReceipt).
func TestReceiptTampering(t *testing.T) {
	rec, pub := runReceipt(t)
	pinned := proof.ReceiptOptions{Anchors: proof.Anchors{Pinned: []ed25519.PublicKey{pub}}}
	drop := func(types ...string) func(r *Receipt) {
		return func(r *Receipt) {
			r.Events = slices.DeleteFunc(r.Events, func(e ReceiptEvent) bool { return slices.Contains(types, e.Type) })
		}
	}
	clone := func() Receipt {
		data, _ := json.Marshal(rec)
		var r Receipt
		json.Unmarshal(data, &r)
		return r
	}
	_, evil, _ := ed25519.GenerateKey(nil)
	tests := []struct {
		name   string
		change func(r *Receipt)
		kind   string
	}{
		{"exit code changed in a body", func(r *Receipt) {
			r.Events[4].Body = strings.Replace(r.Events[4].Body, `"exit_code":3`, `"exit_code":0`, 1)
		}, proof.ReceiptHashMismatch},
		{"body re-hashed", func(r *Receipt) {
			e := &r.Events[4]
			e.Body = strings.Replace(e.Body, `"exit_code":3`, `"exit_code":0`, 1)
			prev, _ := hex.DecodeString(e.PrevHash)
			e.Hash = hex.EncodeToString(proof.ChainHash(prev, e.ChainID, e.Seq, []byte(e.Body)))
		}, proof.ReceiptBadProof},
		{"body not canonical", func(r *Receipt) { r.Events[0].Body = " " + r.Events[0].Body }, proof.ReceiptBadBody},
		{"another run's event", func(r *Receipt) { r.RunID = "run-2" }, proof.ReceiptBadBody},
		{"proof hash changed", func(r *Receipt) {
			r.Events[2].Proof[0] = base64.StdEncoding.EncodeToString(make([]byte, 32))
		}, proof.ReceiptBadProof},
		{"note re-signed by another key", func(r *Receipt) {
			cp := &r.Checkpoints[0]
			c, _ := proof.ParseNoteText(strings.SplitN(cp.Note, "\n\n", 2)[0] + "\n")
			cp.Note, _ = proof.SignNote(evil, c.Origin, c.Size, c.Root)
		}, proof.ReceiptUntrustedKey},
		{"the end taken out", drop("container.exited"), proof.ReceiptMissingEnd},
		{"the decision taken out", drop("admission.allowed"), proof.ReceiptMissingDecision},
		{"more checkpoints than a receipt holds", func(r *Receipt) {
			for range 100 {
				r.Checkpoints = append(r.Checkpoints, r.Checkpoints[0])
			}
		}, proof.ReceiptTooLarge},
		{"note root changed", func(r *Receipt) {
			r.Checkpoints[0].Note = strings.Replace(r.Checkpoints[0].Note, "\n\n", "x\n\n", 1)
		}, proof.ReceiptBadNote},
		{"format", func(r *Receipt) { r.Format = "v0" }, proof.ReceiptBadFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := clone()
			tt.change(&r)
			rep := proof.VerifyReceipt(r, pinned)
			if rep.OK {
				t.Fatal("tampered receipt verifies")
			}
			found := false
			for _, p := range rep.Problems {
				found = found || p.Kind == tt.kind
			}
			if !found {
				t.Errorf("problems %+v, want one %s", rep.Problems, tt.kind)
			}
		})
	}
	_ = time.Second
}
