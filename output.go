package sandgate

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"sync"
	"unicode/utf8"
)

// The encodings of Output.Data.
const (
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// Output is one captured stream of a run.
type Output struct {
	// Data is the captured bytes, up to the run's output limit, as UTF-8
	// text or base64 as Encoding says. Inside sandgate a stream usually
	// travels as Raw instead, and Data is made only where a client reads
	// it.
	Data string `json:"data"`
	// Encoding is "utf-8" or "base64" (EncodeOutput).
	Encoding string `json:"encoding"`
	// Bytes is how many bytes the stream produced in all, captured or not.
	Bytes int64 `json:"bytes"`
	// Truncated is true when Bytes exceeds what was captured.
	Truncated bool `json:"truncated"`
	// SHA256 is the hex digest of the captured bytes; the audit trail keeps
	// this and never the data.
	SHA256 string `json:"sha256,omitempty"`
	// Raw is the captured bytes themselves, when this process has them:
	// held once, whatever their encoding, and encoded only as they are
	// written out. Never changed once set.
	Raw []byte `json:"-"`
}

// Content returns the captured bytes: Raw, or Data decoded.
func (o Output) Content() ([]byte, error) {
	if o.Raw != nil {
		return o.Raw, nil
	}
	if o.Encoding == EncodingBase64 {
		return base64.StdEncoding.DecodeString(o.Data)
	}
	return []byte(o.Data), nil
}

// Captured is how many bytes were captured.
func (o Output) Captured() int64 {
	if o.Raw != nil {
		return int64(len(o.Raw))
	}
	if o.Encoding == EncodingBase64 {
		return int64(base64.StdEncoding.DecodedLen(len(o.Data)))
	}
	return int64(len(o.Data))
}

// EncodeOutput is how sandgate stores and serves captured bytes: as text
// when they are printable UTF-8, as base64 otherwise. Printable means no
// control character but tab, newline and carriage return, and none of the
// characters JSON encoders escape at six bytes for one or three (U+2028,
// U+2029), so that the JSON form of text output is at most twice its size
// and that of any other at most 4/3: a program that prints control bytes
// cannot make the gateway hold six times its output limit.
func EncodeOutput(p []byte) (data, encoding string) {
	if PrintableText(p) {
		return string(p), EncodingUTF8
	}
	return base64.StdEncoding.EncodeToString(p), EncodingBase64
}

// OutputEncoding is the encoding EncodeOutput would choose for p.
func OutputEncoding(p []byte) string {
	if PrintableText(p) {
		return EncodingUTF8
	}
	return EncodingBase64
}

// PrintableText reports whether p is valid UTF-8 with no control character
// but tab, newline and carriage return, and no U+2028 or U+2029.
func PrintableText(p []byte) bool {
	for i := 0; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			return false
		}
		if (r >= 0x80 && r <= 0x9f) || r == '\u2028' || r == '\u2029' {
			return false
		}
		i += size
	}
	return true
}

// OutputBuffer is one output stream of a run while it is captured: it
// keeps the first limit bytes, counts and hashes them, and lets readers
// see what has come so far. The executor writes it; the gateway, which
// makes it, reads it for live followers and keeps what it captured as the
// run's output, so a run's output is held once. Bytes once written never
// change: a slice handed out stays valid. It is safe for one writer and
// any number of readers.
type OutputBuffer struct {
	limit int64

	mu    sync.Mutex
	data  []byte
	total int64
	sum   hash.Hash
}

// NewOutputBuffer returns a buffer that keeps up to limit bytes.
func NewOutputBuffer(limit int64) *OutputBuffer {
	return &OutputBuffer{limit: max(limit, 0), sum: sha256.New()}
}

// outputBufferStart is the first allocation of a buffer's data.
const outputBufferStart = 4096

// Write keeps what fits under the limit and returns the bytes it kept (a
// slice of the buffer, never changed afterwards). It counts every byte.
func (b *OutputBuffer) Write(p []byte) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(p))
	room := b.limit - int64(len(b.data))
	if room <= 0 || len(p) == 0 {
		return nil
	}
	keep := p
	if int64(len(keep)) > room {
		keep = keep[:room]
	}
	if need := len(b.data) + len(keep); need > cap(b.data) {
		// Grow by doubling, but never past the limit: the buffer of a
		// run that prints its whole limit is the limit, not twice it.
		// Readers keep any old array they hold; it is never written again.
		c := max(2*cap(b.data), outputBufferStart, need)
		c = int(min(int64(c), b.limit))
		grown := make([]byte, len(b.data), c)
		copy(grown, b.data)
		b.data = grown
	}
	start := len(b.data)
	b.data = append(b.data, keep...)
	b.sum.Write(keep)
	return b.data[start:len(b.data):len(b.data)]
}

// Len is how many bytes are kept.
func (b *OutputBuffer) Len() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int64(len(b.data))
}

// Total is how many bytes were written, kept or not.
func (b *OutputBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Slice returns the kept bytes from off to to (clamped), without copying.
func (b *OutputBuffer) Slice(off, to int64) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	to = min(to, int64(len(b.data)))
	if off >= to || off < 0 {
		return nil
	}
	return b.data[off:to:to]
}

// Output is the stream as a run reports it: the kept bytes as Raw (not
// copied), their encoding, size and digest.
func (b *OutputBuffer) Output() Output {
	b.mu.Lock()
	defer b.mu.Unlock()
	raw := b.data[:len(b.data):len(b.data)]
	if raw == nil {
		raw = []byte{}
	}
	return Output{
		Encoding:  OutputEncoding(raw),
		Bytes:     b.total,
		Truncated: b.total > int64(len(raw)),
		SHA256:    hex.EncodeToString(b.sum.Sum(nil)),
		Raw:       raw,
	}
}
