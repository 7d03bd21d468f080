package executor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"hash"

	"github.com/sandgate/sandgate"
)

// capture is one output stream of a run. It keeps the first limit bytes,
// counts every byte (so the pipe keeps draining past the cap and the total
// is exact), hashes what it keeps, and hands each kept chunk to the live
// subscriber. It is written by one goroutine and read after that one ends.
type capture struct {
	stream sandgate.Stream
	limit  int64
	live   func(sandgate.Stream, []byte)

	buf   bytes.Buffer
	total int64
	sum   hash.Hash
}

func newCapture(stream sandgate.Stream, limit int64, live func(sandgate.Stream, []byte)) *capture {
	return &capture{stream: stream, limit: limit, live: live, sum: sha256.New()}
}

// Write keeps what fits under the limit and always reports the whole of p
// as written, so the demultiplexer never stalls on a full stream.
func (c *capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	room := c.limit - int64(c.buf.Len())
	if room <= 0 {
		return len(p), nil
	}
	keep := p
	if int64(len(keep)) > room {
		keep = keep[:room]
	}
	c.buf.Write(keep)
	c.sum.Write(keep)
	if c.live != nil {
		// The demultiplexer reuses its buffer; subscribers get their own copy.
		c.live(c.stream, bytes.Clone(keep))
	}
	return len(p), nil
}

// output returns the stream as a run reports it: text when the kept bytes
// are printable UTF-8, base64 otherwise (sandgate.EncodeOutput).
func (c *capture) output() sandgate.Output {
	data := c.buf.Bytes()
	o := sandgate.Output{
		Bytes:     c.total,
		Truncated: c.total > int64(len(data)),
		SHA256:    hex.EncodeToString(c.sum.Sum(nil)),
	}
	o.Data, o.Encoding = sandgate.EncodeOutput(data)
	return o
}
