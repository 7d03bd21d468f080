package proof

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

var updateVectors = flag.Bool("update-vectors", false, "write testdata/canonical_vectors.json from the encoder")

// canonicalVector is one worked example of the canonical form: an event,
// the body it is sealed into at recorded_at, and its hash at its place in
// a chain. The file is for people who write a verifier of their own.
type canonicalVector struct {
	Name       string         `json:"name"`
	Event      sandgate.Event `json:"event"`
	RecordedAt time.Time      `json:"recorded_at"`
	ChainID    string         `json:"chain_id"`
	Seq        int64          `json:"seq"`
	PrevHash   string         `json:"prev_hash"`
	Body       string         `json:"body"`
	Hash       string         `json:"hash"`
}

// vectorEvents are the examples: every member, the smallest event, text
// that needs escaping or cleaning, nested payloads and numbers.
func vectorEvents() []canonicalVector {
	at := time.Date(2026, 11, 25, 13, 29, 26, 123456789, time.UTC)
	exit := 3
	zero := 0
	return []canonicalVector{
		{Name: "smallest", Event: sandgate.Event{ID: "0193a1b2-0000-7000-8000-000000000001", Type: sandgate.EventPolicyLoaded, Time: at}},
		{Name: "every member", Event: sandgate.Event{
			ID: "0193a1b2-0000-7000-8000-000000000002", Type: sandgate.EventContainerExited, Time: at, Outcome: "failed",
			CorrelationID: "corr-1", RunID: "run-1", DecisionID: "dec-1", ContainerID: "c0ffee", Actor: "alice",
			Team: "payments", Node: "gw-1", PolicyRevision: "sha256:ab", ExitCode: &exit,
			Payload: map[string]any{"duration_ms": json.Number("1500"), "oom_killed": false, "stdout_bytes": json.Number("12")},
		}},
		{Name: "exit code zero", Event: sandgate.Event{ID: "0193a1b2-0000-7000-8000-000000000003", Type: sandgate.EventContainerExited, Time: at, ExitCode: &zero}},
		{Name: "text to escape and clean", Event: sandgate.Event{
			ID: "0193a1b2-0000-7000-8000-000000000004", Type: sandgate.EventRunFailed, Time: at,
			Actor: "quote\" backslash\\ tab\t nl\n <&> \u2028 \x01", Team: "invalid \xff utf-8 and nul \x00",
			Payload: map[string]any{"message": "é ✓ 😀 \x7f"},
		}},
		{Name: "nested payload, sorted keys, numbers", Event: sandgate.Event{
			ID: "0193a1b2-0000-7000-8000-000000000005", Type: sandgate.EventAdmissionDenied, Time: at,
			Payload: map[string]any{
				"zeta":  []any{json.Number("1"), json.Number("-2.5"), json.Number("1e21"), "b", nil, true},
				"alpha": map[string]any{"b": json.Number("0.1"), "a": map[string]any{"y": []any{}, "x": map[string]any{}}},
				"Mixed": "upper case sorts first",
			},
		}},
	}
}

// TestCanonicalVectors holds the encoder, the chain hash and verify's
// body check to testdata/canonical_vectors.json: each event is sealed into
// exactly its body, the body hashes to its hash, and verify finds the
// body canonical and in agreement with its columns. A body changed by one
// byte of layout is reported.
func TestCanonicalVectors(t *testing.T) {
	path := filepath.Join("testdata", "canonical_vectors.json")
	var vectors []canonicalVector
	if *updateVectors {
		prev := make([]byte, HashSize)
		for i, v := range vectorEvents() {
			c, err := Canonicalize(v.Event)
			if err != nil {
				t.Fatal(err)
			}
			v.RecordedAt = v.Event.Time.Add(time.Millisecond).Truncate(time.Microsecond)
			v.ChainID, v.Seq, v.PrevHash = "gw-1-0193a1b2", int64(i+1), hex.EncodeToString(prev)
			body := c.appendBody(nil, v.RecordedAt)
			v.Body = string(body)
			hash := ChainHash(prev, v.ChainID, v.Seq, body)
			v.Hash = hex.EncodeToString(hash)
			prev = hash
			vectors = append(vectors, v)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(vectors); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 5 {
		t.Fatalf("%d vectors", len(vectors))
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			c, err := Canonicalize(v.Event)
			if err != nil {
				t.Fatal(err)
			}
			body := c.appendBody(nil, v.RecordedAt)
			if string(body) != v.Body {
				t.Fatalf("body:\n got %s\nwant %s", body, v.Body)
			}
			prev, _ := hex.DecodeString(v.PrevHash)
			if got := hex.EncodeToString(ChainHash(prev, v.ChainID, v.Seq, body)); got != v.Hash {
				t.Errorf("hash = %s, want %s", got, v.Hash)
			}
			// Verify reads the body back against the columns, which hold
			// the payload decoded.
			cols := c.Event
			if len(c.payload) > 0 {
				d := json.NewDecoder(bytes.NewReader(c.payload))
				d.UseNumber()
				if err := d.Decode(&cols.Payload); err != nil {
					t.Fatal(err)
				}
			}
			ver := newVerifier(Anchors{}, time.Now(), 0)
			ver.checkBody(&Row{ChainID: v.ChainID, Seq: v.Seq, RecordedAt: v.RecordedAt, Event: cols, Body: body})
			if len(ver.report.Problems) != 0 {
				t.Errorf("verify: %+v", ver.report.Problems)
			}
			spaced := bytes.Replace(body, []byte(`","`), []byte(`", "`), 1)
			ver = newVerifier(Anchors{}, time.Now(), 0)
			ver.checkBody(&Row{ChainID: v.ChainID, Seq: v.Seq, Event: cols, Body: spaced})
			if bytes.Equal(spaced, body) || len(ver.report.Problems) == 0 || ver.report.Problems[0].Kind != ProblemBadBody {
				t.Errorf("verify of a body with a space added: %+v", ver.report.Problems)
			}
		})
	}
}
