package cli

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// gatedWriter blocks every Write until open is closed, then records it.
type gatedWriter struct {
	open   chan struct{}
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	err    error
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes++
	g.buf.Write(p)
	return len(p), g.err
}

func (g *gatedWriter) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "line %04d\n", i)
	}
	return b.String()
}

// TestLogWriter checks that writes return while the destination is stuck,
// as long as the buffer has room; that a full buffer holds writers back
// instead of dropping lines; that Close writes out everything in order;
// and that writes after Close reach the destination directly.
func TestLogWriter(t *testing.T) {
	tests := []struct {
		name     string
		max      int
		before   int // 10-byte lines that fit while the destination is stuck
		blocking int // further lines, written from another goroutine
	}{
		{"room for all", 1 << 10, 50, 0},
		{"buffer full", 100, 10, 40},
		{"line longer than the buffer", 4, 2, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := &gatedWriter{open: make(chan struct{})}
			w := newLogWriter(dst, tc.max)
			// The destination is stuck: these return all the same, as
			// they fit, or the test would hang here.
			for i := 0; i < tc.before; i++ {
				if _, err := w.Write([]byte(lines(i, i+1))); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := tc.before; i < tc.before+tc.blocking; i++ {
					if _, err := w.Write([]byte(lines(i, i+1))); err != nil {
						t.Error(err)
					}
				}
			}()
			close(dst.open)
			<-done
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(lines(0, tc.before+tc.blocking), dst.String()); diff != "" {
				t.Errorf("destination (-want +got):\n%s", diff)
			}
			if _, err := w.Write([]byte("after close\n")); err != nil {
				t.Fatal(err)
			}
			if got := dst.String(); !strings.HasSuffix(got, "after close\n") {
				t.Errorf("a write after Close did not reach the destination: %q", got)
			}
		})
	}
}

// TestLogWriterError checks that Close reports the destination's error.
func TestLogWriterError(t *testing.T) {
	dst := &gatedWriter{open: make(chan struct{}), err: errors.New("broken pipe")}
	close(dst.open)
	w := newLogWriter(dst, 64)
	if _, err := w.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || err.Error() != "broken pipe" {
		t.Errorf("Close = %v, want the destination's error", err)
	}
	if err := w.Close(); err == nil {
		t.Errorf("a second Close forgot the error")
	}
}
