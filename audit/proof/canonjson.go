package proof

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate"
)

// The canonical JSON of payloads and bodies, written straight into one
// buffer. Every event is encoded once by its producer and its body once by
// the writer; through encoding/json (reflection, a map sort and a buffer
// per call) that was the largest share of the gateway's CPU per lifecycle
// event and of its garbage. The output is byte for byte what
// marshalCanonical writes (tests hold it to that), since verify re-encodes
// each stored body to check that it is canonical.
//
// The canonical form, for anyone who writes a verifier of their own
// (testdata/canonical_vectors.json holds worked examples, checked by
// TestCanonicalVectors against this encoder, the chain hash and verify):
//
//   - A body is one JSON object with no whitespace. Its members, in this
//     order (byte order of the keys): actor, container_id, correlation_id,
//     decision_id, event_id, event_time, exit_code, node, outcome, payload,
//     policy_revision, recorded_at, run_id, team, type. event_id,
//     event_time, recorded_at and type are always there; a text member
//     that is empty is left out, exit_code is there when the event has an
//     exit code (an integer), payload when the event has one.
//   - Times are UTC with microseconds: 2026-11-25T13:29:26.000001Z.
//   - Text is what was recorded with invalid UTF-8 and NUL replaced by
//     U+FFFD, as a JSON string: '"' and '\' escaped with a backslash,
//     \b \f \n \r \t for those, \u00xx (lower-case hex) for the other
//     control characters, \u2028 and \u2029 for those two; nothing else
//     escaped ('<', '>' and '&' are themselves).
//   - A payload is a JSON object whose keys are sorted in byte order at
//     every depth, with no whitespace; arrays keep their order; numbers
//     are written as Go's encoding/json writes them (integers in decimal,
//     other numbers in the shortest form that reads back the same).
//   - An entry's hash is SHA-256(prev_hash ‖ uint16be(len(chain_id)) ‖
//     chain_id ‖ uint64be(seq) ‖ body), prev_hash being the previous
//     entry's hash, or 32 zero bytes for seq 1.

// appendCanonical appends the canonical JSON of v to dst: what
// marshalCanonical(v) writes. It takes the plain values payloads are made
// of (maps with string keys, slices, strings, booleans, numbers, nil); ok is
// false for anything else, for a value encoding/json refuses (NaN, an
// invalid json.Number), for text that would not read back as itself
// (invalid UTF-8, NUL) and for nesting deeper than maxPlainDepth: the
// caller then takes canonicalPayload's round trip.
func appendCanonical(dst []byte, v any) (_ []byte, ok bool) {
	return appendValue(dst, v, 0)
}

// maxPlainDepth bounds the nesting appendCanonical follows.
const maxPlainDepth = 32

func appendValue(dst []byte, v any, depth int) ([]byte, bool) {
	if depth > maxPlainDepth {
		return dst, false
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case string:
		return appendPlainString(dst, x)
	case bool:
		return strconv.AppendBool(dst, x), true
	case json.Number:
		s := string(x)
		if s == "" {
			s = "0" // as encoding/json writes the zero Number
		}
		if !validNumber(s) {
			return dst, false
		}
		return append(dst, s...), true
	case float64:
		return appendFloat(dst, x, 64)
	case float32:
		return appendFloat(dst, float64(x), 32)
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint64:
		return strconv.AppendUint(dst, x, 10), true
	case map[string]any:
		if x == nil {
			return append(dst, "null"...), true
		}
		return appendObject(dst, x, func(dst []byte, v any) ([]byte, bool) { return appendValue(dst, v, depth+1) })
	case map[string]string:
		if x == nil {
			return append(dst, "null"...), true
		}
		return appendObject(dst, x, appendPlainString)
	case []any:
		if x == nil {
			return append(dst, "null"...), true
		}
		return appendArray(dst, x, func(dst []byte, v any) ([]byte, bool) { return appendValue(dst, v, depth+1) })
	case []map[string]any:
		if x == nil {
			return append(dst, "null"...), true
		}
		return appendArray(dst, x, func(dst []byte, v map[string]any) ([]byte, bool) { return appendValue(dst, v, depth+1) })
	case []string:
		if x == nil {
			return append(dst, "null"...), true
		}
		return appendArray(dst, x, appendPlainString)
	}
	return dst, false
}

// appendPlainString appends s quoted, if it reads back as itself: valid
// UTF-8 (encoding/json writes invalid bytes as \ufffd, which decodes to
// U+FFFD, so the stored body would not be canonical by verify's measure)
// without NUL (which jsonb refuses). Others take canonicalPayload's round
// trip, which cleans them.
func appendPlainString(dst []byte, s string) ([]byte, bool) {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return dst, false
	}
	return appendJSONString(dst, s), true
}

// appendObject appends m with its keys in sorted order, as encoding/json
// writes maps.
func appendObject[V any](dst []byte, m map[string]V, elem func([]byte, V) ([]byte, bool)) ([]byte, bool) {
	var small [16]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = appendPlainString(dst, k); !ok {
			return dst, false
		}
		dst = append(dst, ':')
		if dst, ok = elem(dst, m[k]); !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

func appendArray[V any](dst []byte, s []V, elem func([]byte, V) ([]byte, bool)) ([]byte, bool) {
	dst = append(dst, '[')
	for i, v := range s {
		if i > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = elem(dst, v); !ok {
			return dst, false
		}
	}
	return append(dst, ']'), true
}

// appendFloat writes f as encoding/json does: the shortest representation
// that round-trips, in exponent form only below 1e-6 or from 1e21, with
// the exponent not padded. NaN and infinities have no JSON form.
func appendFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// e-09 becomes e-9.
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// validNumber reports whether s is a JSON number literal (RFC 8259).
func validNumber(s string) bool {
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	digits := func() int {
		n := 0
		for n < len(s) && '0' <= s[n] && s[n] <= '9' {
			n++
		}
		return n
	}
	switch n := digits(); {
	case n == 0:
		return false
	case s[0] == '0' && n > 1:
		return false
	default:
		s = s[n:]
	}
	if s != "" && s[0] == '.' {
		s = s[1:]
		n := digits()
		if n == 0 {
			return false
		}
		s = s[n:]
	}
	if s != "" && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s != "" && (s[0] == '+' || s[0] == '-') {
			s = s[1:]
		}
		n := digits()
		if n == 0 {
			return false
		}
		s = s[n:]
	}
	return s == ""
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes it without
// HTML escaping: '"' and '\' escaped, control characters as \b \f \n \r
// \t or \u00XX, invalid UTF-8 as \ufffd, and U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendBody appends the canonical body of c recorded at recordedAt: the
// fields of body, in its (sorted) order, empty ones left out.
func (c *Canonical) appendBody(dst []byte, recordedAt time.Time) []byte {
	var at [len(TimeLayout) + 2]byte
	token := append(at[:0], '"')
	token = CanonicalTime(recordedAt).AppendFormat(token, TimeLayout)
	token = append(token, '"')
	return appendBodyOf(dst, &c.Event, c.payload, token)
}

// appendBodyOf appends the canonical body of ev (its payload ignored) with
// payload, its canonical JSON (nil without one), and recordedAt, the
// recorded_at member's JSON string as it is written. The writer seals
// bodies with it; the verifier rebuilds a stored body with it from the
// row's columns.
func appendBodyOf(dst []byte, ev *sandgate.Event, payload, recordedAt []byte) []byte {
	first := true
	key := func(k string) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, k...)
		dst = append(dst, '"', ':')
	}
	text := func(k, v string) {
		if v != "" {
			key(k)
			dst = appendJSONString(dst, v)
		}
	}
	dst = append(dst, '{')
	text("actor", ev.Actor)
	text("container_id", ev.ContainerID)
	text("correlation_id", ev.CorrelationID)
	text("decision_id", ev.DecisionID)
	key("event_id")
	dst = appendJSONString(dst, ev.ID)
	key("event_time")
	dst = append(dst, '"')
	dst = CanonicalTime(ev.Time).AppendFormat(dst, TimeLayout)
	dst = append(dst, '"')
	if ev.ExitCode != nil {
		key("exit_code")
		dst = strconv.AppendInt(dst, int64(*ev.ExitCode), 10)
	}
	text("node", ev.Node)
	text("outcome", ev.Outcome)
	if len(payload) > 0 {
		key("payload")
		dst = append(dst, payload...)
	}
	text("policy_revision", ev.PolicyRevision)
	key("recorded_at")
	dst = append(dst, recordedAt...)
	text("run_id", ev.RunID)
	text("team", ev.Team)
	key("type")
	dst = appendJSONString(dst, string(ev.Type))
	return append(dst, '}')
}

// AppendJSONString appends s as a JSON string, as encoding/json writes it
// without HTML escaping (invalid UTF-8 as \ufffd).
func AppendJSONString(dst []byte, s string) []byte { return appendJSONString(dst, s) }
