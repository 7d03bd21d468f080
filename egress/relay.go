package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// pipe relays a connection both ways until either side ends it: a CONNECT
// tunnel (its 200 sent first, unless connected says it was, and its TLS
// ClientHello read whole and checked before anything is relayed) or a
// plain-HTTP request sent on in origin form.
func (p *Proxy) pipe(st *runState, rec *conn, c net.Conn, br *bufio.Reader, upstream net.Conn, up, down *counted, req *http.Request, connected bool) {
	done := make(chan struct{})
	if req.Method == http.MethodConnect {
		if !connected {
			if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
				return
			}
		}
		// The client's ClientHello is read whole and checked before a
		// byte moves either way: one naming another server than the
		// target, or anything but a well-formed ClientHello, ends the
		// tunnel (the client sees its handshake fail: the 200 was sent).
		hello, reason, msg := checkTunnel(c, br, rec.host)
		if reason != "" {
			rec.reason, rec.msg = reason, msg
			upstream.Close()
			c.Close()
			return
		}
		go func() {
			defer close(done)
			if _, err := up.Write(hello); err != nil {
				closeWrite(upstream)
				return
			}
			// What the request's reader holds already goes next;
			// the rest straight from the connection.
			if n := br.Buffered(); n > 0 {
				b, _ := br.Peek(n)
				if _, err := up.Write(b); err != nil {
					closeWrite(upstream)
					return
				}
				_, _ = br.Discard(n)
			}
			up.relay(c)
			closeWrite(upstream)
		}()
	} else {
		go func() {
			defer close(done)
			forward(up, req)
			closeWrite(upstream)
		}()
	}
	down.relay(upstream)
	closeWrite(c)
	// The client's side ends when it closes, or when this connection is
	// over: the upstream answered in full (plain HTTP asks it to close).
	if req.Method != http.MethodConnect {
		upstream.Close()
	}
	select {
	case <-done:
	case <-time.After(time.Second):
		c.Close()
		<-done
	}
}

// ended records a connection that was made: refused after all when its
// reason is one that refuses (domain fronting, a TLS handshake that
// failed, a request naming another host), allowed otherwise.
func (p *Proxy) ended(st *runState, rec *conn) {
	switch rec.reason {
	case ReasonSNIMismatch, ReasonBadClientHello, ReasonUpstreamTLS, ReasonHostMismatch:
		p.denied(st, rec)
		return
	}
	if st.bytesLeft.Load() <= 0 && rec.reason == "" {
		rec.reason = ReasonByteLimit
	}
	p.allowed(st, rec)
}

// counted counts what is written through it against the connection and
// the run's byte budget; a write past the budget ends the connection.
type counted struct {
	net.Conn
	n   *atomic.Int64
	st  *runState
	p   *Proxy
	dir string
}

func (w *counted) Write(b []byte) (int, error) {
	if w.st.bandwidth != nil {
		// Waits at most len(b)/rate; a run being ended closes the
		// connection under the write that follows.
		_ = w.st.bandwidth.WaitN(context.Background(), len(b))
	}
	want := int64(len(b))
	got := w.st.take(want, want)
	if got < want {
		if got > 0 {
			n, _ := w.Conn.Write(b[:got])
			w.add(int64(n))
			w.st.bytesLeft.Add(got - int64(n))
		}
		w.st.closeAll()
		return 0, errors.New("egress byte limit reached")
	}
	n, err := w.Conn.Write(b)
	w.add(int64(n))
	w.st.bytesLeft.Add(want - int64(n))
	return n, err
}

// relayChunk is the most relay moves between two looks at the run's
// budget and bandwidth; relayMinTake the least it takes of the budget
// while some is left (it takes an eighth of what is left, so that the
// run's other connections find some too).
const (
	relayChunk   = 1 << 20
	relayMinTake = 16 << 10
)

// relay copies src to the connection until src ends or either fails,
// through the kernel (splice(2), no copy into the proxy) when both are
// TCP connections, in chunks: each is taken from the run's byte budget
// before it moves (so the budget is never exceeded; none left cuts the
// run's connections), what it did not use given back, and paced by the
// run's bandwidth after (at most one chunk, no more than one second's
// worth, goes ahead of the rate).
func (w *counted) relay(src net.Conn) {
	chunk := int64(relayChunk)
	if w.st.bandwidth != nil {
		chunk = min(chunk, int64(w.st.bandwidth.Burst()))
	}
	rf, ok := w.Conn.(io.ReaderFrom)
	if !ok {
		rf = plainCopy{w.Conn}
	}
	for {
		take := w.st.take(chunk, relayMinTake)
		if take == 0 {
			w.st.closeAll()
			return
		}
		n, err := rf.ReadFrom(&io.LimitedReader{R: src, N: take})
		w.add(n)
		if n < take {
			w.st.bytesLeft.Add(take - n)
		}
		if w.st.bandwidth != nil && n > 0 {
			_ = w.st.bandwidth.WaitN(context.Background(), int(n))
		}
		if err != nil || n < take {
			return
		}
	}
}

// plainCopy copies into a connection that cannot splice.
type plainCopy struct{ io.Writer }

func (p plainCopy) ReadFrom(r io.Reader) (int64, error) {
	return io.CopyBuffer(p.Writer, r, make([]byte, copyBuffer))
}

// ReadFrom keeps io.CopyBuffer on Write, where the counting is.
func (w *counted) ReadFrom(r io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{w}, r, make([]byte, copyBuffer))
}

func (w *counted) add(n int64) {
	w.n.Add(n)
	if w.p.opt.Metrics != nil && n > 0 {
		w.p.opt.Metrics.Bytes(w.dir, n)
	}
}
