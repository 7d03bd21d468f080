package egress_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/egress"
)

// forbidden is the name the attacks below ask a TLS server for, through
// a tunnel admitted for upstream.test only.
const forbidden = "forbidden.example.net"

// proxyLineListener accepts connections that may begin with a PROXY
// protocol v1 line, as a TLS server behind a load balancer does
// (HAProxy's accept-proxy, nginx's proxy_protocol), and hands the rest
// on: the TLS server reads a ClientHello that comes after the line.
type proxyLineListener struct{ net.Listener }

func (l proxyLineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := br.Peek(6); err == nil && string(b) == "PROXY " {
		_, _ = br.ReadString('\n')
	}
	_ = c.SetReadDeadline(time.Time{})
	return &bufferedConn{Conn: c, r: br}, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// newLenientTLSUpstream is a Go TLS server on loopback, behind an
// optional PROXY line, that serves every name it is asked for and notes
// each.
func newLenientTLSUpstream(t *testing.T) *tlsUpstream {
	u := &tlsUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over tls %s", r.Host)
	}))
	u.Listener = proxyLineListener{u.Listener}
	u.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		u.mu.Lock()
		u.snis = append(u.snis, h.ServerName)
		u.mu.Unlock()
		return nil, nil
	}}
	u.StartTLS()
	t.Cleanup(u.Close)
	_, u.port, _ = net.SplitHostPort(u.Listener.Addr().String())
	return u
}

// rewriteConn rewrites the first write of a TLS client (its ClientHello)
// before it goes out, and passes the rest.
type rewriteConn struct {
	net.Conn
	once    sync.Once
	rewrite func([]byte) []byte
}

func (c *rewriteConn) Write(b []byte) (int, error) {
	out := b
	c.once.Do(func() { out = c.rewrite(bytes.Clone(b)) })
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// records splits TLS records into their headers' types and payloads.
func records(t testing.TB, b []byte) (types []byte, payloads [][]byte) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("a partial record header: % x", b)
		}
		n := int(b[3])<<8 | int(b[4])
		types = append(types, b[0])
		payloads = append(payloads, b[5:5+n])
		b = b[5+n:]
	}
	return types, payloads
}

// record frames payload as one TLS record.
func record(typ byte, vers uint16, payload []byte) []byte {
	return append([]byte{typ, byte(vers >> 8), byte(vers), byte(len(payload) >> 8), byte(len(payload))}, payload...)
}

// fragment re-frames the handshake records of a first flight into
// records of at most size bytes each.
func fragment(t testing.TB, size int) func([]byte) []byte {
	return func(b []byte) []byte {
		types, payloads := records(t, b)
		var out []byte
		for i, p := range payloads {
			if types[i] != 0x16 {
				out = append(out, record(types[i], 0x0301, p)...)
				continue
			}
			for len(p) > 0 {
				n := min(size, len(p))
				out = append(out, record(0x16, 0x0301, p[:n])...)
				p = p[n:]
			}
		}
		return out
	}
}

// tlsThrough runs a TLS handshake naming sni over a tunnel to target,
// its ClientHello rewritten, and one GET.
func tlsThrough(t *testing.T, f *fixture, target, sni string, rewrite func([]byte) []byte) (string, error) {
	t.Helper()
	c := f.tunnel(t, target)
	if rewrite == nil {
		rewrite = func(b []byte) []byte { return b }
	}
	return handshake(&rewriteConn{Conn: c, rewrite: rewrite}, sni)
}

// TestProxyClientHelloForms: a tunnel is relayed only after a complete,
// well-formed ClientHello naming its target (or nothing) has been read.
// Each attack names forbidden.example.net through a tunnel admitted for
// upstream.test, to a Go TLS server (behind an optional PROXY line) that
// serves any name: a record whose version byte is 2, a PROXY line before
// the hello, a warning alert first, an empty record first, a second
// message after the hello in its record, not TLS at all. None reaches
// the server, and each is recorded as egress.denied. A hello fragmented
// over several records is reassembled: naming the target it reaches the
// server, naming another it is refused as sni_mismatch.
func TestProxyClientHelloForms(t *testing.T) {
	up := newLenientTLSUpstream(t)
	target := "upstream.test:" + up.port
	f := newFixture(t, loopbackLookup, sandgate.EgressLimits{Connections: 1000, Bytes: 100 << 20}, target)
	refused := []struct {
		name, reason string
		rewrite      func([]byte) []byte
	}{
		{"record version 2.1", egress.ReasonBadClientHello, func(b []byte) []byte { b[1] = 2; return b }},
		{"record version 3.0", egress.ReasonSNIMismatch, func(b []byte) []byte { b[2] = 0; return b }},
		{"record version 3.4", egress.ReasonBadClientHello, func(b []byte) []byte { b[2] = 4; return b }},
		{"a PROXY line first", egress.ReasonBadClientHello, func(b []byte) []byte {
			return append([]byte("PROXY TCP4 127.0.0.1 127.0.0.1 1000 443\r\n"), b...)
		}},
		{"a warning alert first", egress.ReasonBadClientHello, func(b []byte) []byte {
			return append(record(0x15, 0x0303, []byte{1, 90}), b...)
		}},
		{"an empty handshake record first", egress.ReasonBadClientHello, func(b []byte) []byte {
			return append(record(0x16, 0x0301, nil), b...)
		}},
		{"a second message in the hello's record", egress.ReasonBadClientHello, func(b []byte) []byte {
			_, payloads := records(t, b)
			return record(0x16, 0x0301, append(payloads[0], payloads[0]...))
		}},
		{"fragmented, naming another server", egress.ReasonSNIMismatch, fragment(t, 7)},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			f.again(t)
			before := len(up.seen())
			body, err := tlsThrough(t, f, target, forbidden, tc.rewrite)
			if err == nil {
				t.Errorf("the handshake naming %s succeeded: %q", forbidden, body)
			}
			for _, sni := range up.seen()[before:] {
				t.Errorf("the upstream was sent a ClientHello naming %q", sni)
			}
			expectOne(t, f, tc.reason)
		})
	}

	t.Run("not TLS", func(t *testing.T) {
		f.again(t)
		c := f.tunnel(t, "127.0.0.1:"+f.port)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if b, _ := io.ReadAll(c); len(b) != 0 {
			t.Errorf("plain HTTP in a tunnel was answered: %q", b)
		}
		c.Close()
		expectOne(t, f, egress.ReasonBadClientHello)
	})

	for _, size := range []int{1, 100, 16384} {
		t.Run(fmt.Sprintf("fragmented in records of %d bytes, naming the target", size), func(t *testing.T) {
			f.again(t)
			body, err := tlsThrough(t, f, target, "upstream.test", fragment(t, size))
			if err != nil || !strings.Contains(body, "hello over tls") {
				t.Errorf("handshake: %v %q", err, body)
			}
			f.proxy.Unregister(mustAddr("127.0.0.1"))
			if n := len(f.events.of(sandgate.EventEgressAllowed)); n != 1 {
				t.Errorf("%d egress.allowed; want 1", n)
			}
		})
	}
}

// expectOne checks that the fixture's run recorded its one connection as
// egress.denied with reason, and none as allowed.
func expectOne(t *testing.T, f *fixture, reason string) {
	t.Helper()
	f.proxy.Unregister(mustAddr("127.0.0.1"))
	if allowed := f.events.of(sandgate.EventEgressAllowed); len(allowed) != 0 {
		t.Errorf("recorded as allowed: %+v", allowed[0].Payload)
	}
	denied := f.events.of(sandgate.EventEgressDenied)
	if len(denied) != 1 || denied[0].Payload["reason"] != reason {
		var got []any
		for _, ev := range denied {
			got = append(got, ev.Payload["reason"], ev.Payload["message"])
		}
		t.Errorf("egress.denied reasons %v; want one %s", got, reason)
	}
}
