package proof

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate"
)

// referenceBody is the canonical body as encoding/json writes it: what
// appendBody must reproduce byte for byte, since verify re-encodes stored
// bodies that way.
func referenceBody(t testing.TB, c *Canonical, recordedAt time.Time) []byte {
	t.Helper()
	ev := &c.Event
	data, err := marshalCanonical(&body{
		Actor: ev.Actor, ContainerID: ev.ContainerID, CorrelationID: ev.CorrelationID, DecisionID: ev.DecisionID,
		EventID: ev.ID, EventTime: ev.Time.Format(TimeLayout), ExitCode: ev.ExitCode, Node: ev.Node,
		Outcome: ev.Outcome, Payload: c.payload, PolicyRevision: ev.PolicyRevision,
		RecordedAt: CanonicalTime(recordedAt).Format(TimeLayout), RunID: ev.RunID, Team: ev.Team, Type: string(ev.Type),
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// randomText is text that exercises every escaping rule: quotes,
// backslashes, control characters, DEL, HTML characters (not escaped),
// U+2028 and U+2029, other multi-byte runes, NUL and invalid UTF-8.
func randomText(r *rand.Rand) string {
	pieces := []string{"a", "Z", "0", " ", `"`, `\`, "\b", "\f", "\n", "\r", "\t", "\x00", "\x01", "\x1f", "\x7f",
		"<", ">", "&", "\u2028", "\u2029", "é", "日本", "🙂", "\xff", "\xc3", "\xe2\x80", "\ufffd", "/", "run-42"}
	var b strings.Builder
	for range r.IntN(12) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randomNumber(r *rand.Rand) any {
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 1.5e300, -2.5e-300,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 123456789.125, 1.0 / 3}
	switch r.IntN(8) {
	case 0:
		return floats[r.IntN(len(floats))]
	case 1:
		return float32(floats[r.IntN(len(floats))])
	case 2:
		return r.NormFloat64() * math.Pow(10, float64(r.IntN(60)-30))
	case 3:
		return int64(r.Uint64())
	case 4:
		return r.Uint64()
	case 5:
		return int(r.Int32()) - 1<<30
	case 6:
		return uint8(r.Uint32())
	default:
		ns := []json.Number{"0", "-0", "12", "-1.5", "1e10", "1E+3", "2.5e-7", ""}
		return ns[r.IntN(len(ns))]
	}
}

func randomPlain(r *rand.Rand, depth int) any {
	n := 9
	if depth > 3 {
		n = 5 // leaves only
	}
	switch r.IntN(n) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2, 3:
		return randomText(r)
	case 4:
		return randomNumber(r)
	case 5:
		m := map[string]any{}
		for range r.IntN(6) {
			m[randomText(r)] = randomPlain(r, depth+1)
		}
		return m
	case 6:
		s := make([]any, r.IntN(4))
		for i := range s {
			s[i] = randomPlain(r, depth+1)
		}
		return s
	case 7:
		m := map[string]string{}
		for range r.IntN(4) {
			m[randomText(r)] = randomText(r)
		}
		return m
	default:
		s := []string{}
		for range r.IntN(4) {
			s = append(s, randomText(r))
		}
		return s
	}
}

// TestAppendCanonicalMatchesEncodingJSON holds the hand-written encoder to
// marshalCanonical over random plain values, byte for byte.
func TestAppendCanonicalMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	written := 0
	defer func() {
		if written < 5000 {
			t.Errorf("only %d of 20000 random values were written; the comparison needs more", written)
		}
	}()
	for i := range 20000 {
		v := randomPlain(r, 0)
		want, err := marshalCanonical(v)
		got, ok := appendCanonical(nil, v)
		if err != nil {
			if ok {
				t.Fatalf("case %d: encoding/json refuses %#v (%v) but appendCanonical wrote %s", i, v, err, got)
			}
			continue
		}
		if !ok {
			if !bytes.Contains(want, []byte(`\ufffd`)) && !bytes.Contains(want, []byte(`\u0000`)) {
				t.Fatalf("case %d: appendCanonical refused %#v, which encoding/json writes as %s", i, v, want)
			}
			continue // text that would not read back as itself
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: %#v\n got  %s\n want %s", i, v, got, want)
		}
		written++
	}
}

// TestAppendCanonicalRefuses: what appendCanonical leaves to encoding/json
// (and canonicalize then rejects or round-trips) it reports instead of
// writing something different.
func TestAppendCanonicalRefuses(t *testing.T) {
	deep := any("leaf")
	for range maxPlainDepth + 2 {
		deep = []any{deep}
	}
	for name, v := range map[string]any{
		"NaN":             math.NaN(),
		"+Inf":            math.Inf(1),
		"float32 -Inf":    float32(math.Inf(-1)),
		"invalid number":  json.Number("1.e5"),
		"leading zero":    json.Number("012"),
		"struct":          struct{ B, A int }{1, 2},
		"time":            time.Unix(0, 0),
		"map of ints":     map[string]int{"a": 1},
		"nested struct":   map[string]any{"x": []any{struct{}{}}},
		"deeper than 32":  deep,
		"int-keyed map":   map[int]string{1: "a"},
		"pointer to text": new(string),
		"invalid UTF-8":   "a\xffb",
		"NUL":             map[string]any{"k": "a\x00b"},
		"invalid key":     map[string]string{"\xc3": "v"},
	} {
		if got, ok := appendCanonical(nil, v); ok {
			t.Errorf("%s: appendCanonical wrote %s; want it refused", name, got)
		}
	}
	for _, n := range []string{"0", "-0", "1.5", "-12e+3", "1E-2", "10.25"} {
		if !validNumber(n) {
			t.Errorf("validNumber(%q) = false", n)
		}
	}
	for _, n := range []string{"", "-", "+1", "01", "1.", ".5", "1e", "1e+", "0x10", "1 ", "NaN"} {
		if validNumber(n) {
			t.Errorf("validNumber(%q) = true", n)
		}
	}
}

// FuzzAppendJSONString holds string quoting to encoding/json's for any
// bytes.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\\b\f\n\r\t\x00\x1f\x7f", "<&>", "\u2028\u2029", "\xff\xfe", "日本\xe2\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := marshalCanonical(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q:\n got  %s\n want %s", s, got, want)
		}
	})
}

// TestBodyMatchesEncodingJSON holds appendBody to the body struct through
// encoding/json, over random events: every field empty or set, odd text,
// payloads or none, exit codes or none.
func TestBodyMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	text := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		return randomText(r)
	}
	for i := range 5000 {
		ev := sandgate.Event{
			ID: text(), Type: sandgate.EventType(text()), Time: time.Unix(r.Int64N(4e9), r.Int64N(1e9)),
			Outcome: text(), CorrelationID: text(), RunID: text(), DecisionID: text(), ContainerID: text(),
			Actor: text(), Team: text(), Node: text(), PolicyRevision: text(),
		}
		if r.IntN(2) == 0 {
			code := int(r.Int32()) - 1<<30
			ev.ExitCode = &code
		}
		if r.IntN(3) > 0 {
			ev.Payload = map[string]any{text(): randomPlain(r, 1), "n": randomNumber(r)}
		}
		c, err := Canonicalize(ev)
		if err != nil {
			continue // a payload encoding/json refuses too (NaN)
		}
		at := time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(time.FixedZone("x", 3600))
		got, want := c.Body(at), referenceBody(t, &c, at)
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got  %s\n want %s", i, got, want)
		}
		// And what verify checks: the body decodes to the columns and is
		// in canonical form.
		if canon, err := marshalCanonical(jsonNumbers(got)); err != nil || !bytes.Equal(canon, got) {
			t.Fatalf("case %d: body not canonical by verify's measure: %s", i, got)
		}
		if !utf8.Valid(got) {
			t.Fatalf("case %d: body is not UTF-8", i)
		}
	}
}

// BenchmarkEventEncoding times what encoding costs per event, the hand-
// written encoder against encoding/json in the same process: canonicalize
// (the producer's share: the payload) and the body (the writer's share),
// for a lifecycle event and for a decision carrying a run spec.
func BenchmarkEventEncoding(b *testing.B) {
	exit := 0
	lifecycleEv := typicalEvent()
	decisionEv := sandgate.Event{
		ID: "0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b", Type: sandgate.EventAdmissionAllowed, Time: time.Now(),
		Outcome: "allowed", CorrelationID: "corr-1", RunID: "run-1", DecisionID: "dec-1", Actor: "ci-bot",
		Team: "payments", Node: "gw-1", PolicyRevision: "sha256:9f86d081884c7d659a2feaa0c55ad015", ExitCode: &exit,
		Payload: map[string]any{
			"allow": true, "violations": []any{}, "warnings": []any{map[string]any{"rule": "image_digest", "message": "image is not pinned by digest", "controls": []any{"CIS-4.2"}, "action": "warn"}},
			"mutations": []any{}, "policy_revision": "sha256:9f86d081884c7d659a2feaa0c55ad015",
			"spec": map[string]any{
				"image": "sandgate/sandbox:latest", "command": []string{"sh", "-c", "npm test -- --ci"},
				"env":  map[string]string{"CI": "hmac-sha256:1f2e3d", "NODE_ENV": "hmac-sha256:4c5b6a"},
				"user": "10001:10001", "network": "none", "read_only_rootfs": true, "timeout_seconds": 300,
				"resources": map[string]any{"memory_mb": 512, "cpus": 1.0, "pids": 256, "tmpfs_mb": 64, "nofile": 1024},
				"labels":    map[string]string{"ticket": "ENG-1"}, "cap_add": []string{}, "mounts": []any{},
			},
		},
	}
	reference := func(ev sandgate.Event, at time.Time) []byte {
		p, err := marshalCanonical(ev.Payload)
		if err != nil {
			b.Fatal(err)
		}
		c := Canonical{Event: ev, payload: p}
		return referenceBody(b, &c, at)
	}
	// Each case times a fixed number of events, whatever b.N is, so that
	// `make bench` (-benchtime 1x) still measures something.
	const events = 50000
	perEvent := func(b *testing.B, encode func()) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		n := 0
		for b.Loop() {
			for range events {
				encode()
			}
			n += events
		}
		elapsed := time.Since(start)
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), "ns/event")
		b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(n), "allocs/event")
	}
	for _, tc := range []struct {
		name string
		ev   sandgate.Event
	}{{"lifecycle", lifecycleEv}, {"decision", decisionEv}} {
		at := time.Now()
		b.Run(tc.name+"/hand", func(b *testing.B) {
			perEvent(b, func() {
				c, err := Canonicalize(tc.ev)
				if err != nil {
					b.Fatal(err)
				}
				_ = c.Body(at)
			})
		})
		b.Run(tc.name+"/encoding-json", func(b *testing.B) {
			perEvent(b, func() { _ = reference(tc.ev, at) })
		})
	}
}

// TestCanonicalizeFallbacks: payloads the hand-written encoder leaves to
// encoding/json still come out canonical (structs, time.Time, invalid
// text), and one that cannot be encoded at all is stored with a
// payload_error instead, so that the event itself is kept.
func TestCanonicalizeFallbacks(t *testing.T) {
	type limits struct {
		Memory int    `json:"memory_mb"`
		Note   string `json:"note"`
	}
	at := time.Date(2026, 11, 22, 16, 0, 0, 123456789, time.UTC)
	ev := sandgate.Event{ID: "0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b", Type: sandgate.EventContainerExited, Time: at}
	for name, tc := range map[string]struct {
		payload map[string]any
		want    string
	}{
		"struct":        {map[string]any{"limits": limits{512, "a<b"}}, `{"limits":{"memory_mb":512,"note":"a<b"}}`},
		"time":          {map[string]any{"at": at}, `{"at":"2026-11-22T16:00:00.123456789Z"}`},
		"invalid UTF-8": {map[string]any{"s": "a\xffb", "n": 1}, `{"n":1,"s":"a` + "\uFFFD" + `b"}`},
		"NUL in a key":  {map[string]any{"k\x00": true}, `{"k` + "\uFFFD" + `":true}`},
	} {
		ev.Payload = tc.payload
		c := MustCanonicalize(ev, slog.New(slog.DiscardHandler))
		if string(c.payload) != tc.want {
			t.Errorf("%s: payload %s, want %s", name, c.payload, tc.want)
		}
		body := c.Body(at)
		if canon, err := marshalCanonical(jsonNumbers(body)); err != nil || !bytes.Equal(canon, body) {
			t.Errorf("%s: body not canonical: %s", name, body)
		}
	}
	ev.Payload = map[string]any{"ratio": math.NaN()}
	c := MustCanonicalize(ev, slog.New(slog.DiscardHandler))
	if !bytes.HasPrefix(c.payload, []byte(`{"payload_error":"encode payload: json: unsupported value: NaN"`)) {
		t.Errorf("NaN payload: %s, want a payload_error", c.payload)
	}
}

// typicalEvent is a typical lifecycle event: identities, exit code and an
// output summary.
func typicalEvent() sandgate.Event {
	code := 1
	return sandgate.Event{
		Type: sandgate.EventContainerExited, RunID: "run-1", CorrelationID: "corr-1",
		ContainerID: "3f2a9c", Actor: "ci-bot", Team: "payments", Outcome: "succeeded", ExitCode: &code,
		Payload: map[string]any{"stdout": map[string]any{"bytes": 1024, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "truncated": false}, "duration_ms": 1200},
	}
}
