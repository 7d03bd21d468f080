package executor

import (
	"github.com/sandgate/sandgate"
)

// capture is one output stream of a run as the demultiplexer writes it:
// its buffer keeps the first limit bytes and counts every byte (so the
// pipe keeps draining past the cap and the total is exact), and each kept
// chunk is told to the live subscriber. It is written by one goroutine.
type capture struct {
	stream sandgate.Stream
	buf    *sandgate.OutputBuffer
	live   func(sandgate.Stream, []byte)
}

// newCapture captures stream into buf, or into a buffer of its own of
// limit bytes when buf is nil.
func newCapture(stream sandgate.Stream, buf *sandgate.OutputBuffer, limit int64, live func(sandgate.Stream, []byte)) *capture {
	if buf == nil {
		buf = sandgate.NewOutputBuffer(limit)
	}
	return &capture{stream: stream, buf: buf, live: live}
}

// captures makes the two streams of job.
func captures(job sandgate.Job) (stdout, stderr *capture) {
	limit := job.Spec.OutputLimitBytes
	return newCapture(sandgate.Stdout, job.Stdout, limit, job.Output), newCapture(sandgate.Stderr, job.Stderr, limit, job.Output)
}

// Write keeps what fits under the limit and always reports the whole of p
// as written, so the demultiplexer never stalls on a full stream.
func (c *capture) Write(p []byte) (int, error) {
	if kept := c.buf.Write(p); len(kept) > 0 && c.live != nil {
		c.live(c.stream, kept)
	}
	return len(p), nil
}

// output returns the stream as a run reports it: the kept bytes, their
// encoding (sandgate.EncodeOutput), size and digest.
func (c *capture) output() sandgate.Output { return c.buf.Output() }
