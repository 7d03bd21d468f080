package sandgate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// TestEncodeOutput: printable UTF-8 is text; control bytes, invalid UTF-8
// and the separators JSON escapes are base64; and whatever the bytes, the
// JSON of the stored form is at most twice their size.
func TestEncodeOutput(t *testing.T) {
	for _, tc := range []struct {
		name, in, enc string
	}{
		{"plain", "hello\tworld\r\n", EncodingUTF8},
		{"html", "<a href='x'>&</a>", EncodingUTF8},
		{"unicode", "héllo wörld ✓ 😀", EncodingUTF8},
		{"empty", "", EncodingUTF8},
		{"control", "\x01", EncodingBase64},
		{"NUL", "a\x00b", EncodingBase64},
		{"escape sequence", "\x1b[31mred\x1b[0m", EncodingBase64},
		{"DEL", "\x7f", EncodingBase64},
		{"C1 control", "\u0085", EncodingBase64},
		{"line separator", "a\u2028b", EncodingBase64},
		{"invalid UTF-8", "a\xffb", EncodingBase64},
		{"truncated rune", "\xe2\x9c", EncodingBase64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, enc := EncodeOutput([]byte(tc.in))
			if enc != tc.enc {
				t.Fatalf("encoding = %s, want %s", enc, tc.enc)
			}
			if enc == EncodingBase64 {
				raw, err := base64.StdEncoding.DecodeString(data)
				if err != nil || string(raw) != tc.in {
					t.Errorf("base64 does not round-trip: %q, %v", raw, err)
				}
			} else if data != tc.in {
				t.Errorf("data = %q", data)
			}
		})
	}
	// The worst case for each kind of byte, 64 KiB of it.
	for _, b := range []string{"\x01", "\x00", "\xff", "<", "\"", "\\", "\n", "a", "\u2028", "é"} {
		in := []byte(strings.Repeat(b, 65536/len(b)))
		data, _ := EncodeOutput(in)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(data); err != nil {
			t.Fatal(err)
		}
		if ratio := float64(buf.Len()) / float64(len(in)); ratio > 2.01 {
			t.Errorf("%q: JSON is %.2f times the output", b, ratio)
		}
	}
}
