package proof

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A row's body against its columns. The body is what is hashed; the
// columns are what queries read, so each column must say what the body
// says, and the body must be in canonical form (one encoding per event, so
// that the hash pins the event and not one of its spellings).
//
// The check has two paths that judge alike. bodyMatches, taken for every
// row, rebuilds the body the row's columns call for (appendBodyOf, the
// writer's own encoder, with the body's payload and recorded_at, the two
// members the columns do not fix byte for byte) and compares bytes, after
// reading the body once with a scanner that accepts only canonical JSON;
// it allocates nothing per row. Whatever it cannot vouch for (a tampered
// row, a member it does not know, a number the columns spell differently) goes to checkBodyFull, the decoding check that names the
// problem, or finds none: both accept the same rows (TestBodyCheckPaths).

// checkBody holds r's body to the canonical form and to r's columns.
func (v *Verifier) checkBody(r *Row) {
	if !v.bodyMatches(r) {
		v.checkBodyFull(r)
	}
}

// bodyMatches reports whether r's body is canonical and says what its
// columns say; false means "not shown", not "mismatch".
func (v *Verifier) bodyMatches(r *Row) bool {
	sc := canonScanner{data: r.Body}
	payload, recordedAt, ok := sc.bodyMembers()
	if !ok {
		return false
	}
	ev := &r.Event
	for _, s := range [...]string{ev.ID, string(ev.Type), ev.Outcome, ev.CorrelationID, ev.RunID, ev.DecisionID,
		ev.ContainerID, ev.Actor, ev.Team, ev.Node, ev.PolicyRevision} {
		// A column that is not valid UTF-8 encodes as U+FFFD, which
		// reads back as another text.
		if !utf8.ValidString(s) {
			return false
		}
	}
	col, ok := v.columnPayload(r)
	if !ok || !bytes.Equal(col, payload) {
		return false
	}
	v.rebuilt = appendBodyOf(v.rebuilt[:0], ev, payload, recordedAt)
	return bytes.Equal(v.rebuilt, r.Body)
}

// columnPayload returns r's payload column in canonical form, nil when it
// has none or an empty one (the same as none, as before); ok is false
// when it cannot tell.
func (v *Verifier) columnPayload(r *Row) (_ []byte, ok bool) {
	if r.Event.Payload == nil && len(r.PayloadJSON) > 0 {
		if v.payload, ok = AppendCanonicalText(v.payload[:0], r.PayloadJSON); ok {
			if string(v.payload) == "{}" {
				return nil, true
			}
			return v.payload, true
		}
	}
	if len(r.payload()) == 0 {
		return nil, true
	}
	v.payload, ok = appendCanonical(v.payload[:0], map[string]any(r.Event.Payload))
	return v.payload, ok
}

// canonScanner reads JSON that is in canonical form (see canonjson.go):
// no whitespace, object keys in strictly increasing byte order, strings
// as appendJSONString writes them, numbers valid JSON numbers (kept as
// written). It says false for anything else, and for what it does not
// follow (keys with escapes, nesting deeper than maxPlainDepth).
type canonScanner struct {
	data []byte
	pos  int
}

// bodyMembers reads a whole body: an object of body's members only, in
// canonical form. It returns the payload's JSON (nil when absent) and the
// recorded_at member's JSON string.
func (s *canonScanner) bodyMembers() (payload, recordedAt []byte, ok bool) {
	if !s.next('{') {
		return nil, nil, false
	}
	var prev []byte
	for first := true; !s.next('}'); first = false {
		if !first && !s.next(',') {
			return nil, nil, false
		}
		k, ok := s.key(prev)
		if !ok {
			return nil, nil, false
		}
		prev = k
		start := s.pos
		if !s.value(0) {
			return nil, nil, false
		}
		val := s.data[start:s.pos]
		switch string(k) {
		case "payload":
			if val[0] != '{' {
				return nil, nil, false
			}
			payload = val
		case "recorded_at":
			if val[0] != '"' {
				return nil, nil, false
			}
			recordedAt = val
		case "actor", "container_id", "correlation_id", "decision_id", "event_id", "event_time", "exit_code",
			"node", "outcome", "policy_revision", "run_id", "team", "type":
			// Rebuilt from the columns and compared as bytes.
		default:
			// Not rebuilt, so the bodies would differ; encoding/json
			// matches members ignoring case, which the full check
			// judges.
			return nil, nil, false
		}
	}
	return payload, recordedAt, recordedAt != nil && s.pos == len(s.data)
}

// next consumes c if it is the next byte.
func (s *canonScanner) next(c byte) bool {
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// key reads an object key and its colon: a string without escapes
// greater than prev.
func (s *canonScanner) key(prev []byte) ([]byte, bool) {
	start := s.pos
	if !s.str() {
		return nil, false
	}
	k := s.data[start+1 : s.pos-1]
	if bytes.IndexByte(k, '\\') >= 0 || (prev != nil && bytes.Compare(prev, k) >= 0) {
		return nil, false
	}
	return k, s.next(':')
}

// value reads one canonical JSON value.
func (s *canonScanner) value(depth int) bool {
	if s.pos >= len(s.data) || depth > maxPlainDepth {
		return false
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		s.pos++
		var prev []byte
		for first := true; !s.next('}'); first = false {
			if !first && !s.next(',') {
				return false
			}
			k, ok := s.key(prev)
			if !ok || !s.value(depth+1) {
				return false
			}
			prev = k
		}
		return true
	case c == '[':
		s.pos++
		for first := true; !s.next(']'); first = false {
			if (!first && !s.next(',')) || !s.value(depth+1) {
				return false
			}
		}
		return true
	case c == '"':
		return s.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if bytes.HasPrefix(s.data[s.pos:], []byte(lit)) {
			s.pos += len(lit)
			return true
		}
	}
	return false
}

// str reads a string as appendJSONString writes it: text that is valid
// UTF-8 without control characters, U+2028 or U+2029, and the escapes it
// writes, each where it writes it. Since it encodes character by
// character, that is the same as decoding the string and encoding it
// again (TestCanonScannerStrings holds the two to it).
func (s *canonScanner) str() bool {
	s.pos++
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return true
		case c == '\\':
			n := canonEscape(s.data[s.pos:])
			if n == 0 {
				return false
			}
			s.pos += n
		case c < 0x20:
			return false
		case c < utf8.RuneSelf:
			s.pos++
		default:
			r, size := utf8.DecodeRune(s.data[s.pos:])
			if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
				return false
			}
			s.pos += size
		}
	}
	return false
}

// canonEscape returns the length of the escape b starts with when
// appendJSONString writes it so, else 0: \" \\ \b \f \n \r \t, \u00xx in
// lower-case hex for the other control characters, \u2028 and \u2029.
func canonEscape(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch b[1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
	default:
		return 0
	}
	if len(b) < 6 {
		return 0
	}
	switch u := string(b[2:6]); u {
	case "2028", "2029":
		return 6
	case "0008", "0009", "000a", "000c", "000d":
		return 0 // written \b \t \n \f \r
	default:
		if u[:2] != "00" || (u[2] != '0' && u[2] != '1') || strings.IndexByte(hexDigits, u[3]) < 0 {
			return 0
		}
		return 6
	}
}

// number reads a JSON number: any valid one is canonical, since numbers
// are kept as written.
func (s *canonScanner) number() bool {
	end := s.pos
	for end < len(s.data) && strings.IndexByte("+-.0123456789eE", s.data[end]) >= 0 {
		end++
	}
	if !validNumber(string(s.data[s.pos:end])) {
		return false
	}
	s.pos = end
	return true
}

// checkBodyFull decodes r's body, re-encodes it to check that it is
// canonical and compares it member by member with r's columns, naming
// each difference.
func (v *Verifier) checkBodyFull(r *Row) {
	r.payload()
	var b body
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	if err := dec.Decode(&b); err != nil {
		v.problem(r.ChainID, r.Seq, ProblemBadBody, "body is not JSON: %v", err)
		return
	}
	if canon, err := marshalCanonical(jsonNumbers(r.Body)); err != nil || !bytes.Equal(canon, r.Body) {
		v.problem(r.ChainID, r.Seq, ProblemBadBody, "body is not in canonical form")
	}
	ev := r.Event
	var diffs []string
	cmpStr := func(name, col, inBody string) {
		if col != inBody {
			diffs = append(diffs, fmt.Sprintf("%s: column %q, body %q", name, col, inBody))
		}
	}
	cmpStr("event_id", ev.ID, b.EventID)
	cmpStr("type", string(ev.Type), b.Type)
	cmpStr("outcome", ev.Outcome, b.Outcome)
	cmpStr("correlation_id", ev.CorrelationID, b.CorrelationID)
	cmpStr("run_id", ev.RunID, b.RunID)
	cmpStr("decision_id", ev.DecisionID, b.DecisionID)
	cmpStr("container_id", ev.ContainerID, b.ContainerID)
	cmpStr("actor", ev.Actor, b.Actor)
	cmpStr("team", ev.Team, b.Team)
	cmpStr("node", ev.Node, b.Node)
	cmpStr("policy_revision", ev.PolicyRevision, b.PolicyRevision)
	cmpStr("event_time", CanonicalTime(ev.Time).Format(TimeLayout), b.EventTime)
	// recorded_at is not compared: the column is the database's clock when
	// it took the row, the body the writer's when it sealed it (earlier for
	// an event delivered late from the spool).
	if (ev.ExitCode == nil) != (b.ExitCode == nil) || (ev.ExitCode != nil && *ev.ExitCode != *b.ExitCode) {
		diffs = append(diffs, fmt.Sprintf("exit_code: column %s, body %s", intStr(ev.ExitCode), intStr(b.ExitCode)))
	}
	if !reflect.DeepEqual(jsonValue(mustJSON(ev.Payload)), jsonValue(mustJSON(b.Payload))) {
		diffs = append(diffs, "payload differs")
	}
	if len(diffs) > 0 {
		v.problem(r.ChainID, r.Seq, ProblemBodyMismatch, "columns disagree with the hashed body: %s", strings.Join(diffs, "; "))
	}
}

func intStr(p *int) string {
	if p == nil {
		return "null"
	}
	return strconv.Itoa(*p)
}

func mustJSON(v any) []byte {
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return []byte("null")
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return data
}

// jsonValue decodes data into plain Go values (float64 numbers), for
// comparisons that do not care how a number was written.
func jsonValue(data []byte) any {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return string(data)
	}
	return v
}

// jsonNumbers decodes data keeping numbers as written.
func jsonNumbers(data []byte) any {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return string(data)
	}
	return v
}
