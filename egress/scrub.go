package egress

import (
	"bytes"
	"encoding/base64"
	"io"
)

// A value is removed from the answers to the requests it was written
// into: as itself, and as the base64 of any text that holds it (at each
// of the three offsets a value can have in base64's groups of three
// bytes, in the standard and the URL alphabet), each byte of it replaced
// by '*', so that lengths and framing stay as they were. What is not
// removed (another encoding: hex, percent-encoding, a hash, a split) is
// in docs/secrets.md.

// minCore is the shortest base64 form that is removed: shorter ones
// would match by chance.
const minCore = 8

// scrubPatterns are the forms value is removed as.
func scrubPatterns(value string) [][]byte {
	pats := [][]byte{[]byte(value)}
	seen := map[string]bool{value: true}
	add := func(p string) {
		if len(p) >= minCore && !seen[p] {
			seen[p] = true
			pats = append(pats, []byte(p))
		}
	}
	// In base64 a byte at offset k (mod 3) of the text begins at
	// character drop[k] of its group; the characters before mix the
	// bytes before it, the last one (when the value does not end a
	// group) the bytes after.
	drop := [3]int{0, 2, 3}
	for k := range 3 {
		enc := base64.RawStdEncoding.EncodeToString(append(make([]byte, k), value...))
		end := len(enc)
		if (k+len(value))%3 != 0 {
			end--
		}
		if end <= drop[k] {
			continue
		}
		core := enc[drop[k]:end]
		add(core)
		add(string(bytes.Map(func(r rune) rune {
			switch r {
			case '+':
				return '-'
			case '/':
				return '_'
			}
			return r
		}, []byte(core))))
	}
	return pats
}

// scrub replaces every pattern in b with as many '*', in place, and
// reports whether it replaced any.
func scrub(b []byte, pats [][]byte) bool {
	changed := false
	for _, p := range pats {
		for from := 0; ; {
			i := bytes.Index(b[from:], p)
			if i < 0 {
				break
			}
			i += from
			for j := i; j < i+len(p); j++ {
				b[j] = '*'
			}
			changed = true
			from = i + len(p)
		}
	}
	return changed
}

// scrubReader is r with the patterns replaced: it holds back the last
// bytes of what it read (one less than the longest pattern) until it
// knows they begin no pattern.
type scrubReader struct {
	r    io.Reader
	pats [][]byte
	hold int
	buf  []byte // read, scrubbed, not yet given out
	out  []byte // given out next
	err  error
	tmp  []byte
}

func newScrubReader(r io.Reader, pats [][]byte) *scrubReader {
	longest := 0
	for _, p := range pats {
		longest = max(longest, len(p))
	}
	return &scrubReader{r: r, pats: pats, hold: max(longest-1, 0), tmp: make([]byte, copyBuffer)}
}

func (s *scrubReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		n, err := s.r.Read(s.tmp)
		s.buf = append(s.buf, s.tmp[:n]...)
		scrub(s.buf, s.pats)
		if err != nil {
			s.err, s.out, s.buf = err, s.buf, nil
			continue
		}
		cut := max(len(s.buf)-s.hold, 0)
		s.out = append([]byte(nil), s.buf[:cut]...)
		s.buf = append(s.buf[:0], s.buf[cut:]...)
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *scrubReader) Close() error {
	if c, ok := s.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
