package proof

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// AppendCanonicalText appends the canonical JSON (see canonjson.go) of the
// JSON object text holds, however it is spelled (Postgres writes jsonb
// with spaces and its keys by length): what decoding it with numbers kept
// as written and encoding the result with appendCanonical gives, without the
// maps in between. ok is false for what it does not follow the same way
// (text that is not one JSON object, duplicate keys, keys with escapes,
// text holding NUL, nesting deeper than maxPlainDepth): the caller then
// decodes.
func AppendCanonicalText(dst, text []byte) (_ []byte, ok bool) {
	t := textCanon{src: text, out: dst}
	t.space()
	if t.pos >= len(text) || text[t.pos] != '{' {
		return dst, false
	}
	start := len(t.out)
	if !t.value(0) {
		return dst, false
	}
	t.space()
	if t.pos != len(text) {
		return dst, false
	}
	// Objects are built in place after their members' values; move the
	// result to where it began.
	n := copy(t.out[start:], t.out[t.last:])
	return t.out[:start+n], true
}

// textCanon reads src and writes canonical JSON to out. Each object's
// members are written to out as they come, then copied after them in
// sorted order; last is where the latest value's canonical form begins.
type textCanon struct {
	src, out []byte
	pos      int
	last     int
}

type textMember struct {
	key        []byte
	start, end int // the value's canonical form in out
}

func (t *textCanon) space() {
	for t.pos < len(t.src) {
		switch t.src[t.pos] {
		case ' ', '\t', '\n', '\r':
			t.pos++
		default:
			return
		}
	}
}

func (t *textCanon) next(c byte) bool {
	t.space()
	if t.pos < len(t.src) && t.src[t.pos] == c {
		t.pos++
		return true
	}
	return false
}

// value writes the canonical form of the value at pos to out and sets
// last to where it begins.
func (t *textCanon) value(depth int) bool {
	t.space()
	if t.pos >= len(t.src) || depth > maxPlainDepth {
		return false
	}
	switch c := t.src[t.pos]; {
	case c == '{':
		return t.object(depth)
	case c == '[':
		return t.array(depth)
	case c == '"':
		t.last = len(t.out)
		return t.str()
	case c == '-' || (c >= '0' && c <= '9'):
		end := t.pos
		for end < len(t.src) && strings.IndexByte("+-.0123456789eE", t.src[end]) >= 0 {
			end++
		}
		if !validNumber(string(t.src[t.pos:end])) {
			return false
		}
		t.last = len(t.out)
		t.out = append(t.out, t.src[t.pos:end]...)
		t.pos = end
		return true
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if bytes.HasPrefix(t.src[t.pos:], []byte(lit)) {
			t.last = len(t.out)
			t.out = append(t.out, lit...)
			t.pos += len(lit)
			return true
		}
	}
	return false
}

func (t *textCanon) object(depth int) bool {
	t.pos++
	var small [16]textMember
	members := small[:0]
	for first := true; !t.next('}'); first = false {
		if !first && !t.next(',') {
			return false
		}
		t.space()
		kstart := t.pos
		if t.pos >= len(t.src) || t.src[t.pos] != '"' {
			return false
		}
		mark := len(t.out)
		if !t.str() {
			return false
		}
		key := t.src[kstart+1 : t.pos-1]
		t.out = t.out[:mark]
		// A key is taken as written: without escapes, and valid UTF-8
		// (decoding would replace invalid bytes).
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) || !t.next(':') || !t.value(depth+1) {
			return false
		}
		members = append(members, textMember{key: key, start: t.last, end: len(t.out)})
	}
	slices.SortFunc(members, func(a, b textMember) int { return bytes.Compare(a.key, b.key) })
	for i := 1; i < len(members); i++ {
		if bytes.Equal(members[i-1].key, members[i].key) {
			return false
		}
	}
	start := len(t.out)
	t.out = append(t.out, '{')
	for i, m := range members {
		if i > 0 {
			t.out = append(t.out, ',')
		}
		t.out = appendJSONString(t.out, string(m.key))
		t.out = append(t.out, ':')
		t.out = append(t.out, t.out[m.start:m.end]...)
	}
	t.out = append(t.out, '}')
	t.last = start
	return true
}

func (t *textCanon) array(depth int) bool {
	t.pos++
	var small [16][2]int
	elems := small[:0]
	for first := true; !t.next(']'); first = false {
		if !first && !t.next(',') {
			return false
		}
		if !t.value(depth + 1) {
			return false
		}
		elems = append(elems, [2]int{t.last, len(t.out)})
	}
	start := len(t.out)
	t.out = append(t.out, '[')
	for i, e := range elems {
		if i > 0 {
			t.out = append(t.out, ',')
		}
		t.out = append(t.out, t.out[e[0]:e[1]]...)
	}
	t.out = append(t.out, ']')
	t.last = start
	return true
}

// str writes the string at pos as appendJSONString writes what it decodes
// to: text without escapes, control characters, U+2028, U+2029 or
// invalid UTF-8 as it is; other text decoded and encoded again.
func (t *textCanon) str() bool {
	start := t.pos
	t.pos++
	plain := true
	for t.pos < len(t.src) {
		c := t.src[t.pos]
		switch {
		case c == '"':
			t.pos++
			tok := t.src[start:t.pos]
			if plain {
				t.out = append(t.out, tok...)
				return true
			}
			var s string
			if err := json.Unmarshal(tok, &s); err != nil || strings.IndexByte(s, 0) >= 0 {
				return false // NUL: appendPlainString refuses it
			}
			t.out = appendJSONString(t.out, s)
			return true
		case c == '\\':
			plain = false
			t.pos += 2
		case c < 0x20:
			return false
		case c < utf8.RuneSelf:
			t.pos++
		default:
			r, size := utf8.DecodeRune(t.src[t.pos:])
			if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
				plain = false
			}
			t.pos += size
		}
	}
	return false
}
