package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"
)

// dialSmall connects to addr with a 4 KiB receive buffer.
func dialSmall(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestWriteDeadlines: an answer written to a client that never reads is
// cut once a piece of it waited the stall, and its handler learns it (it
// holds nothing longer); a client that reads steadily gets the whole
// answer; a second request on a kept-alive connection, long after the
// first, is not cut by the first's deadline.
func TestWriteDeadlines(t *testing.T) {
	const size = 32 << 20
	body := bytes.Repeat([]byte("x"), size)
	done := make(chan error, 4)
	srv := httptest.NewServer(withWriteDeadlines(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			fmt.Fprint(w, "small")
			return
		case "/empty":
			w.WriteHeader(http.StatusNoContent) // written by the server after the handler, not through Write
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(size))
		_, err := w.Write(body)
		done <- err
	}), 300*time.Millisecond))
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	t.Run("never reads", func(t *testing.T) {
		c := dialSmall(t, addr)
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("the whole answer was written to a client that reads nothing")
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the handler still writes to a client that reads nothing")
		}
	})
	t.Run("reads steadily", func(t *testing.T) {
		c := dialSmall(t, addr)
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if werr := <-done; werr != nil {
			t.Fatalf("a client that reads was cut: %v (read %d)", werr, n)
		}
		if n != size || err != nil {
			t.Errorf("read %d bytes, want %d (%v)", n, size, err)
		}
	})
	t.Run("kept alive", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		get := func(path string) string {
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			b := make([]byte, 4096)
			n, _ := c.Read(b)
			return string(b[:n])
		}
		if got := get("/small"); !bytes.Contains([]byte(got), []byte("small")) {
			t.Fatalf("first answer %q", got)
		}
		time.Sleep(time.Second) // past the first answer's deadline
		if got := get("/empty"); !bytes.HasPrefix([]byte(got), []byte("HTTP/1.1 204")) {
			t.Fatalf("second answer on the kept-alive connection %q", got)
		}
	})
}
