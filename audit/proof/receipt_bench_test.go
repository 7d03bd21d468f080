package proof

import (
	"crypto/ed25519"
	"fmt"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
)

// craftedReceipt is a receipt of n checkpoint notes, each of its own
// chain and signed by a key of its own, all named in the receipt's keys:
// the shape that made verification quadratic when each note was tried
// against every key.
func craftedReceipt(b *testing.B, n int) (sandgate.Receipt, []ed25519.PublicKey) {
	b.Helper()
	r := sandgate.Receipt{Format: sandgate.ReceiptFormat, RunID: "run-crafted"}
	var pubs []ed25519.PublicKey
	for i := range n {
		pub, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			b.Fatal(err)
		}
		chain := fmt.Sprintf("gw-%d", i)
		origin := Origin("gw", chain)
		msg, err := SignNote(priv, origin, 1, tlog.Hash{})
		if err != nil {
			b.Fatal(err)
		}
		vkey, _ := NoteVerifierKey(origin, pub)
		r.Checkpoints = append(r.Checkpoints, sandgate.ReceiptCheckpoint{ChainID: chain, Note: msg})
		r.Keys = append(r.Keys, vkey)
		pubs = append(pubs, pub)
	}
	return r, pubs
}

// BenchmarkVerifyCraftedReceipt measures VerifyReceipt of crafted receipts
// by their number of notes, every key pinned: up to the bound (64) each
// note's signature is looked up by its key hash, so the time grows
// linearly; past it the receipt is refused at once (ns/op and
// ns/note reported). Before: 1,000, 2,000 and 4,000 notes took 0.76 s,
// 2.43 s and 10 s (issue #29).
func BenchmarkVerifyCraftedReceipt(b *testing.B) {
	for _, n := range []int{16, 32, 64, 1000, 4000} {
		b.Run(fmt.Sprintf("notes=%d", n), func(b *testing.B) {
			r, pubs := craftedReceipt(b, n)
			o := ReceiptOptions{Anchors: Anchors{Pinned: pubs[:min(len(pubs), 64)]}}
			b.ResetTimer()
			for b.Loop() {
				rep := VerifyReceipt(r, o)
				if n > maxReceiptChains && (rep.OK || rep.Problems[0].Kind != ReceiptTooLarge) {
					b.Fatalf("%d notes: %+v", n, rep.Problems[:1])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/note")
		})
	}
}
