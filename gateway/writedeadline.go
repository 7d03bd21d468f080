package gateway

import (
	"net/http"
	"time"
)

// writeStall is how long one piece of an answer may wait for the client
// to take it. A client that reads nothing for that long is cut off: a
// slow or stalled reader holds a goroutine and a buffer no longer, and
// nothing else (a blob is read a chunk at a time, each on a connection
// of its own that is back in the pool before the chunk is written). The
// server has no WriteTimeout (a followed log lasts as long as its run),
// so the deadline is set before each write instead, for writePiece bytes
// at most: a client must take about 2 KiB/s to be kept.
const (
	writeStall = 30 * time.Second
	writePiece = 64 << 10
)

// withWriteDeadlines gives every answer of h a write deadline of stall
// per piece written (writeStall). net/http clears it once the answer is
// done, so a kept-alive connection's next answer starts without one.
func withWriteDeadlines(h http.Handler, stall time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: stall}, r)
	})
}

// deadlineWriter sets the connection's write deadline before each piece
// of the answer it writes or flushes.
type deadlineWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		piece := b[:min(len(b), writePiece)]
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.stall))
		n, err := w.ResponseWriter.Write(piece)
		written += n
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

// FlushError flushes what is buffered, under the same deadline.
func (w *deadlineWriter) FlushError() error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.stall))
	return w.rc.Flush()
}

// Flush is FlushError for callers that assert http.Flusher.
func (w *deadlineWriter) Flush() { _ = w.FlushError() }

// Unwrap lets an http.ResponseController reach the connection (hijack
// for the terminal's WebSocket, deadlines).
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
