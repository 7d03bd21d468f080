package cli

import (
	"io"
	"sync"
)

// logBufferBytes is how much log output may wait for a slow destination
// before the writers wait too: about half a second of request lines at
// 5,000 requests/s.
const logBufferBytes = 1 << 20

// logWriter hands log lines to one goroutine that writes them out, so that
// a destination that stalls (a pipe to journald that is full, a terminal,
// the growing in-memory buffer tests log into) delays that goroutine, not
// every request: slog's handler holds its lock while it writes, and each
// request writes a line. Nothing is dropped: when the buffer holds
// logBufferBytes, Write waits for the goroutine. Lines are written out as
// soon as the goroutine is free, in order; Close writes out the rest, and
// writes after Close go straight to the destination.
type logWriter struct {
	dst io.Writer
	max int

	mu      sync.Mutex
	more    *sync.Cond // the buffer gained lines, or Close was called
	room    *sync.Cond // the goroutine took the buffer
	buf     []byte
	closed  bool // Close was called: the goroutine writes out what is left
	drained bool // the goroutine is gone: Write writes itself
	err     error
	done    chan struct{}
}

// newLogWriter starts the goroutine that writes to dst.
func newLogWriter(dst io.Writer, max int) *logWriter {
	w := &logWriter{dst: dst, max: max, done: make(chan struct{})}
	w.more = sync.NewCond(&w.mu)
	w.room = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// Write copies p into the buffer, waiting while the buffer is full. A line
// longer than the whole buffer is taken when the buffer is empty.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.drained && len(w.buf) > 0 && len(w.buf)+len(p) > w.max {
		w.room.Wait()
	}
	if w.drained {
		return w.dst.Write(p)
	}
	w.buf = append(w.buf, p...)
	w.more.Signal()
	return len(p), nil
}

func (w *logWriter) run() {
	defer close(w.done)
	var out []byte
	for {
		w.mu.Lock()
		for len(w.buf) == 0 && !w.closed {
			w.more.Wait()
		}
		if len(w.buf) == 0 {
			w.drained = true
			w.room.Broadcast()
			w.mu.Unlock()
			return
		}
		w.buf, out = out[:0], w.buf
		w.room.Broadcast()
		w.mu.Unlock()
		if _, err := w.dst.Write(out); err != nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = err
			}
			w.mu.Unlock()
		}
	}
}

// Close writes out what is buffered and returns the first error the
// destination gave, if any.
func (w *logWriter) Close() error {
	w.mu.Lock()
	w.closed = true
	w.more.Signal()
	w.mu.Unlock()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
