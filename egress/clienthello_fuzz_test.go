package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

// goServerName reads a ClientHello from raw with crypto/tls's own
// server, the parser of a Go upstream, and returns the name it saw.
func goServerName(raw []byte) (string, bool) {
	var name string
	var parsed bool
	errStop := errors.New("stop")
	_ = tls.Server(&readOnlyConn{r: bytes.NewReader(raw)}, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, parsed = h.ServerName, true
		return nil, errStop
	}}).Handshake()
	return name, parsed
}

// readOnlyConn is a net.Conn that reads r and drops what is written.
type readOnlyConn struct {
	r  io.Reader
	mu sync.Mutex
}

func (c *readOnlyConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.r.Read(b)
}
func (c *readOnlyConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *readOnlyConn) Close() error                     { return nil }
func (c *readOnlyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *readOnlyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (c *readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (c *readOnlyConn) SetWriteDeadline(time.Time) error { return nil }

// captureHello is the first flight a Go TLS client writes with cfg.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		_ = tls.Client(client, cfg).Handshake()
		client.Close()
	}()
	buf := make([]byte, maxClientHello)
	_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := server.Read(buf)
	if err != nil {
		t.Fatalf("capture a ClientHello: %v", err)
	}
	return buf[:n]
}

// reframe puts the handshake payload of one record into records of at
// most size bytes.
func reframe(hello []byte, size int) []byte {
	payload := hello[5:]
	var out []byte
	for len(payload) > 0 {
		n := min(size, len(payload))
		out = append(out, 0x16, 3, 1, byte(n>>8), byte(n))
		out = append(out, payload[:n]...)
		payload = payload[n:]
	}
	return out
}

// helloSeeds are real ClientHellos and the forms the proxy refuses.
func helloSeeds(t testing.TB) [][]byte {
	named := captureHello(t, &tls.Config{ServerName: "upstream.test", InsecureSkipVerify: true}) // never completes
	unnamed := captureHello(t, &tls.Config{InsecureSkipVerify: true})
	tls12 := captureHello(t, &tls.Config{ServerName: "a.test", MaxVersion: tls.VersionTLS12, InsecureSkipVerify: true})
	v2 := bytes.Clone(named)
	v2[1] = 2
	return [][]byte{
		named, unnamed, tls12, v2,
		reframe(named, 1), reframe(named, 100),
		append([]byte("PROXY TCP4 127.0.0.1 127.0.0.1 1 2\r\n"), named...),
		append([]byte{0x15, 3, 3, 0, 2, 1, 90}, named...),
		named[:len(named)/2],
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
	}
}

// FuzzReadClientHello: whatever a tunnel begins with, the reader never
// panics, reads at most maxClientHello bytes and no byte past the hello,
// and a hello it accepts is one crypto/tls reads too, with the same
// server name: a Go upstream is never sent a name the proxy did not
// check. The seed corpus is helloSeeds and testdata/fuzz.
func FuzzReadClientHello(f *testing.F) {
	for _, s := range helloSeeds(f) {
		f.Add(s)
	}
	for _, c := range serverNameCases() {
		f.Add(c.hello)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		h, err := readClientHello(r)
		read := len(data) - r.Len()
		if read > maxClientHello {
			t.Fatalf("read %d bytes, more than %d", read, maxClientHello)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(h.raw, data[:read]) {
			t.Fatalf("raw is not the %d bytes read", read)
		}
		name, ok := goServerName(h.raw)
		if ok && name != h.serverName {
			t.Fatalf("crypto/tls reads the server name %q, the proxy %q", name, h.serverName)
		}
		if strings.ContainsAny(h.serverName, "\x00/: ") {
			t.Fatalf("a server name %q was accepted", h.serverName)
		}
		again, err := readClientHello(bytes.NewReader(h.raw))
		if err != nil || again.serverName != h.serverName || !bytes.Equal(again.raw, h.raw) {
			t.Fatalf("the hello read again: %q %v", again.serverName, err)
		}
	})
}

// TestReadClientHelloSeeds: the real hellos are read with their names,
// the refused forms are refused, each for its reason.
func TestReadClientHelloSeeds(t *testing.T) {
	seeds := helloSeeds(t)
	for i, want := range []struct {
		name string
		err  string
	}{
		{name: "upstream.test"}, {}, {name: "a.test"},
		{err: "version 0x0201"},
		{name: "upstream.test"}, {name: "upstream.test"},
		{err: "not a TLS handshake record"},
		{err: "not a TLS handshake record"},
		{err: "the tunnel ended"},
		{err: "not a TLS handshake record"},
	} {
		h, err := readClientHello(bytes.NewReader(seeds[i]))
		switch {
		case want.err != "" && (err == nil || !strings.Contains(err.Error(), want.err)):
			t.Errorf("seed %d: %v; want an error with %q", i, err, want.err)
		case want.err == "" && (err != nil || h.serverName != want.name):
			t.Errorf("seed %d: %q %v; want %q", i, h.serverName, err, want.name)
		case want.err == "":
			if name, ok := goServerName(h.raw); !ok || name != want.name {
				t.Errorf("seed %d: crypto/tls reads %q %v", i, name, ok)
			}
		}
	}
}

// helloWith is one record holding a ClientHello whose extensions are
// exts, each a type and its data.
func helloWith(exts ...[]byte) []byte {
	var b cryptobyte.Builder
	b.AddUint8(handshakeClientHello)
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(0x0303)
		b.AddBytes(make([]byte, 32))
		b.AddUint8(0)
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, e := range exts {
				b.AddBytes(e)
			}
		})
	})
	msg := b.BytesOrPanic()
	return append([]byte{recordTypeHandshake, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// ext is an extension of type typ with data.
func ext(typ uint16, data []byte) []byte {
	return append([]byte{byte(typ >> 8), byte(typ), byte(len(data) >> 8), byte(len(data))}, data...)
}

// names is a server_name extension's data listing (type, name) entries.
func names(entries ...any) []byte {
	var list []byte
	for i := 0; i < len(entries); i += 2 {
		n := entries[i+1].(string)
		list = append(list, byte(entries[i].(int)), byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	return append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)
}

// TestReadClientHelloServerNames: the server_name forms servers read
// differently are refused (Go's skips a name of another type, OpenSSL's
// reads the first entry), as are a name twice, an extension twice, and
// names no host has.
func TestReadClientHelloServerNames(t *testing.T) {
	for _, tc := range serverNameCases() {
		t.Run(tc.name, func(t *testing.T) {
			h, err := readClientHello(bytes.NewReader(tc.hello))
			got := h.serverName
			if err != nil {
				got = "error: " + err.Error()
			}
			if got != tc.want && !(strings.HasPrefix(tc.want, "error: ") && strings.Contains(got, strings.TrimPrefix(tc.want, "error: "))) {
				t.Errorf("read %q; want %q", got, tc.want)
			}
		})
	}
}

// serverNameCase is a ClientHello and what the reader makes of it.
type serverNameCase struct {
	name  string
	hello []byte
	want  string // the name read, or "error: " and part of the error
}

func serverNameCases() []serverNameCase {
	return []serverNameCase{
		{"one host name", helloWith(ext(0, names(0, "upstream.test"))), "upstream.test"},
		{"no extensions", helloWith(), ""},
		{"two host names", helloWith(ext(0, names(0, "upstream.test", 0, "forbidden.test"))), "error: more than one name"},
		{"another type first", helloWith(ext(0, names(1, "x", 0, "forbidden.test"))), "error: more than one name"},
		{"another type only", helloWith(ext(0, names(1, "forbidden.test"))), "error: of type 1"},
		{"the extension twice", helloWith(ext(0, names(0, "upstream.test")), ext(0, names(0, "forbidden.test"))), "error: sent twice"},
		{"a trailing dot", helloWith(ext(0, names(0, "upstream.test."))), "error: ends in a dot"},
		{"a NUL", helloWith(ext(0, names(0, "upstream.test\x00.forbidden.test"))), "error: holds the byte 0x00"},
		{"an empty name", helloWith(ext(0, names(0, ""))), "error: 0 bytes long"},
		{"data after the list", helloWith(ext(0, append(names(0, "upstream.test"), 0))), "error: longer than its list"},
	}
}

// BenchmarkReadClientHello is the reader's cost for a real hello (Go's,
// with its post-quantum key share), whole and in 100-byte records.
func BenchmarkReadClientHello(b *testing.B) {
	hello := captureHello(b, &tls.Config{ServerName: "upstream.test", InsecureSkipVerify: true}) // never completes
	for _, tc := range []struct {
		name string
		raw  []byte
	}{{"one record", hello}, {"100-byte records", reframe(hello, 100)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.raw)))
			for b.Loop() {
				if _, err := readClientHello(bytes.NewReader(tc.raw)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
