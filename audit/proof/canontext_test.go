package proof

import (
	"bytes"
	"encoding/json"
	"testing"
)

// canonTextCases are payloads as producers make them and as Postgres
// spells them back (spaces, keys by length, numbers as numeric writes
// them), with text that needs escaping, odd numbers, nesting and empty
// containers.
var canonTextCases = []string{
	`{}`,
	`{"a": 1, "b": [1, 2], "bb": {"x": null, "y": true, "z": false}}`,
	`{"b":1,"a":2,"aa":3,"c":{"d":[],"a":{}}}`,
	`{"via": "api", "input": {"request": {"env": {"CI": "hmac-sha256:3c1f"}, "labels": {"ticket": "ENG-1 <\"quoted\">\n"}}}, "operation": "run"}`,
	`{"html": "<a href='x'>&</a>", "ctl": "\b\f\n\r\t\u0001\u007f", "sep": "\u2028\u2029", "raw": "` + "\u2028" + `", "uni": "é😀", "slash": "\/", "esc": "\u0041"}`,
	`{"big": 123456789012345678901234567890, "frac": 0.1, "exp": 1e-7, "EXP": 1E+7, "neg": -0, "f": 1.50}`,
	`{"nested": [{"k": [1, "two", 3.5]}, [], [[[]]]], "empty": {}}`,
	`{"bad": "a` + "\xff" + `b"}`,
	`{"nul": "a\u0000b"}`,
	`{"key` + "\xc3" + `": 1}`,
	`{"k\u0041": 1}`,
	`{"dup": 1, "dup": 2}`,
	`[1, 2]`,
	`{"a": 1} x`,
	`{"a": tru}`,
	`{"a": 01}`,
	`{"a" 1}`,
	` { "a" : [ 1 , 2 ] } `,
}

// TestAppendCanonicalText: the canonical form read from JSON text is what
// decoding it (numbers as written) and encoding the maps gives, byte for
// byte, whenever it answers; and it answers for the text writers and
// Postgres make.
func TestAppendCanonicalText(t *testing.T) {
	for _, c := range canonTextCases {
		checkCanonicalText(t, []byte(c))
	}
	for _, c := range []string{canonTextCases[1], canonTextCases[3], canonTextCases[5], canonTextCases[6], canonTextCases[17]} {
		if _, ok := AppendCanonicalText(nil, []byte(c)); !ok {
			t.Errorf("%s: not read", c)
		}
	}
}

func checkCanonicalText(t *testing.T, text []byte) {
	t.Helper()
	got, ok := AppendCanonicalText([]byte("prefix"), text)
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("%q: the prefix is gone: %q", text, got)
	}
	got = got[len("prefix"):]
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	err := dec.Decode(&m)
	if err == nil && dec.More() {
		err = json.Unmarshal(text, new(any)) // trailing text
	}
	var want []byte
	wantOK := err == nil && m != nil
	if wantOK {
		want, wantOK = appendCanonical(nil, m)
	}
	if ok && (!wantOK || !bytes.Equal(got, want)) {
		t.Errorf("%q: got %s, decoding and encoding gives %s (ok %t, %v)", text, got, want, wantOK, err)
	}
}

// FuzzAppendCanonicalText: whatever the text, an answer is the decoded
// maps' encoding.
func FuzzAppendCanonicalText(f *testing.F) {
	for _, c := range canonTextCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, text []byte) { checkCanonicalText(t, text) })
}
