package proof

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// TestBodyCheckPaths: a row whose columns or body were changed is caught
// by the body check, whatever the kind of what changed (text, time, exit
// code, payload string, number, array, member), and the fast path
// (bodyMatches) never vouches for a row the full decoding check
// (checkBodyFull) faults: both judge every case alike. Body changes come
// with the hash recomputed, as an attacker who rewrites a row would, so
// that only the body check can see them.
func TestBodyCheckPaths(t *testing.T) {
	rows := trailRows(t, 4)
	spec, bare := rows[0], rows[3] // a nested payload with escapes; none
	if len(spec.Event.Payload) == 0 || len(bare.Event.Payload) != 0 {
		t.Fatal("trailRows: want a row with a payload and one without")
	}
	col := func(f func(ev *sandgate.Event)) func(*testing.T, *Row) {
		return func(_ *testing.T, r *Row) { f(&r.Event) }
	}
	pay := func(f func(p map[string]any)) func(*testing.T, *Row) {
		return func(t *testing.T, r *Row) {
			p := decodePayload(t, mustJSON(r.Event.Payload))
			f(p)
			r.Event.Payload = p
		}
	}
	body := func(old, new string) func(*testing.T, *Row) {
		return func(t *testing.T, r *Row) {
			if !bytes.Contains(r.Body, []byte(old)) {
				t.Fatalf("body has no %s: %s", old, r.Body)
			}
			r.Body = bytes.Replace(r.Body, []byte(old), []byte(new), 1)
			r.Hash = ChainHash(r.PrevHash, r.ChainID, r.Seq, r.Body)
		}
	}
	mismatch := map[string]int{ProblemBodyMismatch: 1}
	bad := map[string]int{ProblemBadBody: 1}
	tests := []struct {
		name   string
		row    *Row
		change func(*testing.T, *Row)
		want   map[string]int
	}{
		{"untouched", spec, func(*testing.T, *Row) {}, nil},
		{"untouched without payload", bare, func(*testing.T, *Row) {}, nil},
		{"event_id", spec, col(func(ev *sandgate.Event) { ev.ID = "0190f5d2-0000-7000-8000-999999999999" }), mismatch},
		{"type", spec, col(func(ev *sandgate.Event) { ev.Type = sandgate.EventContainerStarted }), mismatch},
		{"outcome", spec, col(func(ev *sandgate.Event) { ev.Outcome = "failed" }), mismatch},
		{"correlation_id", spec, col(func(ev *sandgate.Event) { ev.CorrelationID = "run-2" }), mismatch},
		{"run_id", spec, col(func(ev *sandgate.Event) { ev.RunID = "run-2" }), mismatch},
		{"decision_id", spec, col(func(ev *sandgate.Event) { ev.DecisionID = "dec-2" }), mismatch},
		{"container_id", spec, col(func(ev *sandgate.Event) { ev.ContainerID = "ffffff" }), mismatch},
		{"actor", spec, col(func(ev *sandgate.Event) { ev.Actor = "mallory" }), mismatch},
		{"actor emptied", spec, col(func(ev *sandgate.Event) { ev.Actor = "" }), mismatch},
		{"actor with a quote", spec, col(func(ev *sandgate.Event) { ev.Actor = `alice"` }), mismatch},
		{"team", spec, col(func(ev *sandgate.Event) { ev.Team = "t2" }), mismatch},
		{"node", spec, col(func(ev *sandgate.Event) { ev.Node = "node-b" }), mismatch},
		{"policy_revision", spec, col(func(ev *sandgate.Event) { ev.PolicyRevision = "sha256:0" }), mismatch},
		{"event_time", spec, col(func(ev *sandgate.Event) { ev.Time = ev.Time.Add(time.Microsecond) }), mismatch},
		{"event_time below a microsecond", spec, col(func(ev *sandgate.Event) { ev.Time = ev.Time.Add(time.Nanosecond) }), nil},
		{"exit_code", spec, col(func(ev *sandgate.Event) { c := 7; ev.ExitCode = &c }), mismatch},
		{"exit_code removed", spec, col(func(ev *sandgate.Event) { ev.ExitCode = nil }), mismatch},
		{"payload string", spec, pay(func(p map[string]any) { p["via"] = "cli" }), mismatch},
		{"payload nested number", spec, pay(func(p map[string]any) {
			p["input"].(map[string]any)["request"].(map[string]any)["resources"].(map[string]any)["memory_mb"] = json.Number("513")
		}), mismatch},
		{"payload array element", spec, pay(func(p map[string]any) {
			p["principal"].(map[string]any)["roles"] = []any{"admin"}
		}), mismatch},
		{"payload member added", spec, pay(func(p map[string]any) { p["zz"] = true }), mismatch},
		{"payload member removed", spec, pay(func(p map[string]any) { delete(p, "via") }), mismatch},
		{"payload removed", spec, col(func(ev *sandgate.Event) { ev.Payload = nil }), mismatch},
		{"payload added", bare, col(func(ev *sandgate.Event) { ev.Payload = map[string]any{"a": "b"} }), mismatch},
		{"payload number spelled otherwise", spec, pay(func(p map[string]any) {
			p["input"].(map[string]any)["request"].(map[string]any)["timeout_seconds"] = json.Number("1800.0")
		}), nil},
		{"empty payload column, none in the body", bare, col(func(ev *sandgate.Event) { ev.Payload = map[string]any{} }), nil},
		{"body: a space", spec, body(`","`, `", "`), bad},
		{"body: members swapped", bare, body(`"node":"node-a","outcome":"succeeded"`, `"outcome":"succeeded","node":"node-a"`), bad},
		{"body: payload members swapped", spec, body(`"method":"token","name":"alice"`, `"name":"alice","method":"token"`), bad},
		{"body: needless escape", spec, body(`"actor":"alice"`, `"actor":"\u0061lice"`), bad},
		{"body: escaped key", spec, body(`"actor":"alice"`, `"\u0061ctor":"alice"`), bad},
		{"body: duplicate member", spec, body(`"actor":"alice"`, `"actor":"mallory","actor":"alice"`), bad},
		{"body: trailing bytes", spec, body(`"type":"container.exited"}`, `"type":"container.exited"} `), bad},
		{"body: invalid UTF-8", spec, body(`"team":"t1"`, "\"team\":\"t\xff\""), map[string]int{ProblemBadBody: 1, ProblemBodyMismatch: 1}},
		{"body: raw U+2028", spec, body(`"team":"t1"`, "\"team\":\"t\u20281\""), map[string]int{ProblemBadBody: 1, ProblemBodyMismatch: 1}},
		{"body: exit code as a fraction", spec, body(`"exit_code":0`, `"exit_code":0.0`), bad},
		{"body: exit code null, column none", bare, func(t *testing.T, r *Row) {
			r.Event.ExitCode = nil
			body(`"exit_code":0,`, `"exit_code":null,`)(t, r)
		}, nil},
		{"body: an unknown member", spec, body(`"actor":"alice"`, `"Actor":"mallory","actor":"alice"`), nil},
		{"body: a member in another case", spec, body(`"actor":"alice"`, `"Actor":"alice"`), nil},
		{"body: payload number as an exponent", spec, body(`"timeout_seconds":1800`, `"timeout_seconds":1.8e3`), nil},
		{"body: payload text changed", spec, body(`"via":"api"`, `"via":"cli"`), mismatch},
		{"body: payload with a recorded_at", spec, body(`"via":"api"`, `"recorded_at":"x","via":"api"`), mismatch},
		{"body: payload null", bare, body(`"outcome":"succeeded"`, `"outcome":"succeeded","payload":null`), nil},
		{"body: payload an array", bare, body(`"outcome":"succeeded"`, `"outcome":"succeeded","payload":[]`), mismatch},
		{"body: recorded_at not a string", spec, body(`"recorded_at":"`, `"recorded_at":1,"s":"`), bad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cloneRow(tt.row)
			tt.change(t, r)
			// As the online verifier reads it: the payload column as
			// Postgres spells it, decoded only when needed.
			text := cloneRow(r)
			if text.Event.Payload != nil {
				text.PayloadJSON, _ = json.MarshalIndent(text.Event.Payload, "", " ")
				text.Event.Payload = nil
			}
			fast := newVerifier(Anchors{}, time.Now(), 0)
			fast.checkBody(r)
			full := newVerifier(Anchors{}, time.Now(), 0)
			full.checkBodyFull(r)
			if diff := cmp.Diff(fast.report.Problems, full.report.Problems); diff != "" {
				t.Errorf("checkBody and checkBodyFull disagree (-checkBody +full):\n%s", diff)
			}
			fromText := newVerifier(Anchors{}, time.Now(), 0)
			fromText.checkBody(text)
			if diff := cmp.Diff(fast.report.Problems, fromText.report.Problems); diff != "" {
				t.Errorf("the payload as text and as values judged otherwise (-values +text):\n%s", diff)
			}
			got := map[string]int{}
			for _, p := range fast.report.Problems {
				got[p.Kind]++
				if p.Seq != r.Seq || p.ChainID != r.ChainID {
					t.Errorf("problem at %s/%d, want %s/%d", p.ChainID, p.Seq, r.ChainID, r.Seq)
				}
			}
			if tt.want == nil {
				tt.want = map[string]int{}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%+v\nbody %s", diff, fast.report.Problems, r.Body)
			}
			if len(got) == 0 && !bytes.Equal(r.Hash, ChainHash(r.PrevHash, r.ChainID, r.Seq, r.Body)) {
				t.Error("the case changed the body without rehashing it")
			}
		})
	}
}

// TestBodyFastPathTaken: the rows writers make are vouched for by the
// fast path alone, allocating nothing once its scratch has grown.
func TestBodyFastPathTaken(t *testing.T) {
	rows := trailRows(t, 10)
	v := newVerifier(Anchors{}, time.Now(), 0)
	for _, r := range rows {
		if !v.bodyMatches(r) {
			t.Fatalf("row %d: the fast path does not vouch for it: %s", r.Seq, r.Body)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, r := range rows {
			v.bodyMatches(r)
		}
	})
	if allocs != 0 {
		t.Errorf("bodyMatches allocates %v times for %d rows", allocs, len(rows))
	}
	texts := textRows(t, rows)
	for _, r := range texts {
		if !v.bodyMatches(r) || r.Event.Payload != nil {
			t.Fatalf("row %d, its payload as text: the fast path does not vouch for it without decoding it: %s", r.Seq, r.Body)
		}
	}
	allocs = testing.AllocsPerRun(100, func() {
		for _, r := range texts {
			v.bodyMatches(r)
		}
	})
	if allocs > float64(len(texts)) {
		t.Errorf("bodyMatches allocates %v times for %d rows with their payloads as text", allocs, len(texts))
	}
}

func cloneRow(r *Row) *Row {
	c := *r
	c.Body = bytes.Clone(r.Body)
	if r.Event.Payload != nil {
		c.Event.Payload = map[string]any{}
		for k, v := range r.Event.Payload {
			c.Event.Payload[k] = v
		}
	}
	return &c
}

func decodePayload(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var p map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCanonScannerStrings: the scanner takes a JSON string as canonical
// exactly when decoding it and encoding it again (what the full check
// does) gives it back: every escape JSON has, every \u00xx in either
// case, surrogates, and every byte raw.
func TestCanonScannerStrings(t *testing.T) {
	var toks []string
	for c := range 128 {
		toks = append(toks, `"a\`+string(rune(c))+`b"`)
	}
	for c := range 256 {
		for _, f := range []string{"%02x", "%02X"} {
			toks = append(toks, `"\u00`+fmt.Sprintf(f, c)+`"`)
		}
		toks = append(toks, "\"x"+string([]byte{byte(c)})+"y\"")
	}
	toks = append(toks, `"\u2028"`, `"\u2029"`, `"\u202A"`, `"\u202a"`, `"\u2027"`, `"\ufffd"`, `"\ud83d\ude00"`, `"\ud83d"`,
		"\"\u2028\"", "\"\u2029\"", "\"\ufffd\"", "\"😀\"", "\"\xed\xa0\x80\"", `"\u00"`, `"\u"`, `"\"`, `"`, `""`, `"ends \`)
	for _, tok := range toks {
		sc := canonScanner{data: []byte(tok)}
		got := sc.str() && sc.pos == len(tok)
		var text string
		want := json.Unmarshal([]byte(tok), &text) == nil && string(appendJSONString(nil, text)) == tok
		if got != want {
			t.Errorf("%q: scanner says canonical %t, decoding and encoding again says %t", tok, got, want)
		}
	}
}

// FuzzBodyCheckPaths: for any body stored beside a row's columns, the
// fast path and the full check report the same problems.
func FuzzBodyCheckPaths(f *testing.F) {
	rows := trailRows(f, 5)
	for _, r := range rows {
		f.Add(r.Body)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, base := range rows {
			r := *base
			r.Body = data
			fast := newVerifier(Anchors{}, time.Now(), 0)
			fast.checkBody(&r)
			full := newVerifier(Anchors{}, time.Now(), 0)
			full.checkBodyFull(&r)
			if diff := cmp.Diff(fast.report.Problems, full.report.Problems); diff != "" {
				t.Fatalf("checkBody and checkBodyFull disagree on %q (-checkBody +full):\n%s", data, diff)
			}
		}
	})
}

// textRows returns rows as the online verifier reads them: the payload
// column as Postgres spells jsonb (spaces after colons and commas), not
// decoded.
func textRows(t testing.TB, rows []*Row) []*Row {
	out := make([]*Row, len(rows))
	for i, r := range rows {
		c := *r
		if c.Event.Payload != nil {
			data, err := json.Marshal(c.Event.Payload)
			if err != nil {
				t.Fatal(err)
			}
			c.PayloadJSON = bytes.ReplaceAll(bytes.ReplaceAll(data, []byte(`,"`), []byte(`, "`)), []byte(`":`), []byte(`": `))
			c.Event.Payload = nil
		}
		out[i] = &c
	}
	return out
}
