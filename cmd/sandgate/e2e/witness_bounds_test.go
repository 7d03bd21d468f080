package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/gateway/api"
)

// Witnesses as an auditor's token can fake them (issue #29 items 3 and
// 4): a witness is known only when the gateway's operator pinned its key
// (SANDGATE_AUDIT_WITNESS_KEYS_FILE), its cosignatures are taken only
// then, one per checkpoint, and alarms are bounded per principal and per
// witness, their repeats aggregated.

// alarmer signs alarms as a witness named name with a key of its own.
func alarmer(t *testing.T, f *witnessFixture, name string, key ed25519.PrivateKey) *proof.Witness {
	t.Helper()
	w, err := proof.NewWitness(t.TempDir(), proof.Anchors{Pinned: []ed25519.PublicKey{f.node.Public().(ed25519.PublicKey)}}, proof.NewCosigner(name, key))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// postAlarm posts a fork alarm of f's chain offered at size, signed by w.
func postAlarm(t *testing.T, f *witnessFixture, w *proof.Witness, size int64) (api.WitnessAlarmView, error) {
	t.Helper()
	msg, err := w.AlarmNote(&proof.WitnessAlarm{Kind: proof.AlarmFork, ChainID: f.seen.ChainID, Origin: f.seen.Origin,
		Detail: fmt.Sprintf("made up, %d", size), SeenSize: f.seen.TreeSize, SeenRoot: f.seen.RootHash, OfferedSize: size, OfferedRoot: f.seen.RootHash})
	if err != nil {
		t.Fatal(err)
	}
	return f.s.Client.WitnessAlarm(context.Background(), api.WitnessAlarmRequest{Alarm: msg, WitnessKey: w.VerifierKey()})
}

// TestWitnessAlarmFlood is item 3: an auditor's token makes a key named
// like the real witness, cosigns a checkpoint with it, and posts made-up
// fork alarms. They were all recorded, each saying known_witness: true.
// Now the cosignature is refused (its key is not pinned), the alarms are
// recorded as an unknown witness's up to the bound per principal and
// per witness, and the rest refused with RATE-LIMITED.
func TestWitnessAlarmFlood(t *testing.T) {
	f := newWitnessFixture(t)
	_, mallory, _ := ed25519.GenerateKey(rand.Reader)
	fake := alarmer(t, f, f.witnessName, mallory)
	cosigned, err := proof.Cosign(f.seen.Note, proof.NewCosigner(f.witnessName, mallory))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Client.Cosign(context.Background(), api.CosignatureRequest{Note: cosigned, WitnessKey: fake.VerifierKey()}); !isCode(err, "SANDGATE-INVALID-REQUEST") {
		t.Errorf("a cosignature by a key no operator pinned = %v, want INVALID-REQUEST", err)
	}
	recorded, limited := 0, 0
	for i := range 30 {
		v, err := postAlarm(t, f, fake, f.seen.TreeSize+int64(i))
		switch {
		case err == nil:
			recorded++
			if v.KnownWitness {
				t.Errorf("alarm %d by a key named like the witness recorded as a known witness's", i)
			}
		case isCode(err, "SANDGATE-RATE-LIMITED"):
			limited++
		default:
			t.Fatalf("alarm %d: %v", i, err)
		}
	}
	events := f.s.auditEvents(t, f.s.Token, url.Values{"type": {"audit.witness_alarm"}, "limit": {"1000"}})
	if recorded > alarmBound || len(events) != recorded || limited != 30-recorded {
		t.Errorf("30 made-up alarms: %d recorded (%d events), %d refused; want at most %d recorded, the rest RATE-LIMITED",
			recorded, len(events), limited, alarmBound)
	}
	for _, e := range events {
		if e.Payload["known_witness"] != false {
			t.Errorf("recorded alarm %s: known_witness %v", e.ID, e.Payload["known_witness"])
		}
	}
}

// alarmBound is how many alarms a principal, or a witness, may have
// recorded in an hour.
const alarmBound = 10

// TestWitnessAlarmRepeats, the variant: the real, pinned witness posts the
// same alarm again and again (a witness that restarts on a rewritten
// log): it is recorded once, as a known witness's, and the repeats are
// aggregated into it.
func TestWitnessAlarmRepeats(t *testing.T) {
	f := newWitnessFixture(t)
	wpriv, err := proof.LoadSigningKey(f.wkey, false)
	if err != nil {
		t.Fatal(err)
	}
	real := alarmer(t, f, f.witnessName, wpriv)
	var first api.WitnessAlarmView
	for i := range 5 {
		v, err := postAlarm(t, f, real, f.seen.TreeSize)
		if err != nil {
			t.Fatalf("alarm %d of the pinned witness: %v", i, err)
		}
		if !v.KnownWitness {
			t.Errorf("the pinned witness's alarm: known_witness false")
		}
		if i == 0 {
			first = v
		} else if v.EventID != first.EventID || !v.Repeat {
			t.Errorf("repeat %d answered event %s (repeat %t), want %s, a repeat", i, v.EventID, v.Repeat, first.EventID)
		}
	}
	events := f.s.auditEvents(t, f.s.Token, url.Values{"type": {"audit.witness_alarm"}})
	if len(events) != 1 {
		t.Errorf("the same alarm five times: %d events, want 1", len(events))
	}
	if _, _, body := f.s.do(t, "GET", "/metrics", ""); !strings.Contains(string(body), "sandgate_audit_witness_alarm_repeats_total 4") {
		t.Errorf("/metrics counts no 4 repeats")
	}
}

// TestCosignaturesBounded is item 4: cosignatures from any number of
// self-made keys were all stored, and each was served with every
// checkpoint and receipt. Now only pinned witnesses' are taken, one per
// witness per checkpoint.
func TestCosignaturesBounded(t *testing.T) {
	f := newWitnessFixture(t)
	refused := 0
	for i := range 20 {
		_, k, _ := ed25519.GenerateKey(rand.Reader)
		c := proof.NewCosigner(fmt.Sprintf("self-made-%d", i), k)
		n, err := proof.Cosign(f.seen.Note, c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.Client.Cosign(context.Background(), api.CosignatureRequest{Note: n, WitnessKey: c.VerifierKey()}); isCode(err, "SANDGATE-INVALID-REQUEST") {
			refused++
		}
	}
	// The pinned witness cosigns the same checkpoint again, later.
	wpriv, err := proof.LoadSigningKey(f.wkey, false)
	if err != nil {
		t.Fatal(err)
	}
	again, err := proof.Cosign(f.seen.Note, proof.NewCosigner(f.witnessName, wpriv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Client.Cosign(context.Background(), api.CosignatureRequest{Note: again, WitnessKey: f.witKey}); err != nil {
		t.Errorf("the pinned witness cosigning again: %v", err)
	}
	cp, err := f.s.Client.Checkpoint(context.Background(), f.seen.ChainID)
	if err != nil {
		t.Fatal(err)
	}
	if refused != 20 {
		t.Errorf("%d of 20 cosignatures by self-made keys refused, want all", refused)
	}
	if cp.TreeSize == f.seen.TreeSize && len(cp.Cosignatures) != 1 {
		t.Errorf("checkpoint served with %d cosignatures, want the pinned witness's one: %q", len(cp.Cosignatures), cp.Cosignatures)
	}
}

// isCode reports whether err is a sandgate error with code.
func isCode(err error, code string) bool {
	return err != nil && string(sandgate.ErrorCodeOf(err)) == code
}
