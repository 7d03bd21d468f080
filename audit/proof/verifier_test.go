package proof

import (
	"crypto/ed25519"
	"encoding/hex"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// chainRows returns rows of chain recorded at the times given, hashed and
// linked, and a checkpoint by key over the first signed of them (none
// when signed is 0).
func chainRows(t *testing.T, chain string, at []time.Time, signed int, key ed25519.PrivateKey) ([]*Row, []Checkpoint) {
	t.Helper()
	prev := make([]byte, HashSize)
	var rows []*Row
	var cps []Checkpoint
	for i, ts := range at {
		ev, body, err := canonicalEvent(sandgate.Event{ID: "0190f5d2-0000-7000-8000-00000000000" + string(rune('1'+i)),
			Type: sandgate.EventContainerStarted, Time: ts}, ts)
		if err != nil {
			t.Fatal(err)
		}
		seq := int64(i + 1)
		h := ChainHash(prev, chain, seq, body)
		rows = append(rows, &Row{ChainID: chain, Seq: seq, RecordedAt: ts, Event: ev, Body: body, PrevHash: prev, Hash: h})
		if int(seq) == signed {
			cps = append(cps, SignCheckpoint(key, chain, seq, h, ts, false, nil))
		}
		prev = h
	}
	return rows, cps
}

// TestVerifierJudgesRowsAtTheEnd: online, rows a live writer commits
// while verify reads the trail are later than the clock when it began but
// not than the clock when it ended: neither in the future nor unsigned.
// Rows after the end are future_row, and vouched for by nothing.
func TestVerifierJudgesRowsAtTheEnd(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	end := start.Add(2 * time.Second)
	tests := []struct {
		name string
		at   []time.Time
		want map[string]int
	}{
		{"rows committed during verification", []time.Time{start.Add(-time.Second), start.Add(time.Second)}, map[string]int{}},
		{"a row after the end", []time.Time{start.Add(-time.Second), end.Add(time.Hour)}, map[string]int{ProblemFutureRow: 1, ProblemUnsignedTail: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, cps := chainRows(t, "c", tt.at, 1, key)
			keys := []KeyRecord{{Node: "n", KeyID: KeyID(pub), PublicKey: hex.EncodeToString(pub), Source: KeySourceWriter}}
			v := NewOnlineVerifier(Anchors{Pinned: []ed25519.PublicKey{pub}}, keys, nil, start, start, 10*time.Second)
			v.Checkpoints("c", cps)
			for _, r := range rows {
				v.Row(r)
			}
			rep := v.Finish(end)
			if diff := cmp.Diff(tt.want, problemKinds(rep)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%+v", diff, rep.Problems)
			}
		})
	}
}

// canonicalEvent returns ev as the writer would seal it at recordedAt:
// the event in canonical form and its body.
func canonicalEvent(ev sandgate.Event, recordedAt time.Time) (sandgate.Event, []byte, error) {
	c, err := Canonicalize(ev)
	if err != nil {
		return c.Event, nil, err
	}
	return c.Event, c.Body(recordedAt), nil
}

// problemKinds counts a report's problems by kind.
func problemKinds(rep Report) map[string]int {
	kinds := map[string]int{}
	for _, p := range rep.Problems {
		kinds[p.Kind]++
	}
	return kinds
}
