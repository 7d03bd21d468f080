package egress_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/egress"
)

// tlsUpstream is an HTTPS server on loopback that notes the server name
// of every ClientHello it is sent.
type tlsUpstream struct {
	*httptest.Server
	port string
	mu   sync.Mutex
	snis []string
}

func newTLSUpstream(t *testing.T) *tlsUpstream {
	u := &tlsUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over tls %s", r.Host)
	}))
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

func (u *tlsUpstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.snis...)
}

// tunnel opens a CONNECT tunnel to target through the proxy and returns
// it, failing the test unless the proxy answers 200.
func (f *fixture) tunnel(t *testing.T, target string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK || br.Buffered() != 0 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return c
}

// handshake runs a TLS handshake with serverName over a tunnel and, when
// it succeeds, one GET.
func handshake(c net.Conn, serverName string) (string, error) {
	tc := tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}) // the test's own server
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", serverName)
	b, err := io.ReadAll(tc)
	return string(b), err
}

// TestProxySNIAndHost: a CONNECT tunnel whose TLS ClientHello names the
// target (or no name) reaches a real TLS upstream; one naming another
// server (domain fronting) is cut before the upstream sees its
// handshake, as is one with an unreadable ClientHello; a plain request
// whose Host header names another host than its URL is refused. Each
// refusal is an egress.denied with its reason.
func TestProxySNIAndHost(t *testing.T) {
	up := newTLSUpstream(t)
	f := newFixture(t, loopbackLookup, sandgate.EgressLimits{Connections: 100, Bytes: 10 << 20},
		"upstream.test:"+up.port, "127.0.0.1:"+up.port)

	for _, tc := range []struct {
		name, target, sni string
		ok                bool
	}{
		{"sni is the target", "upstream.test:" + up.port, "upstream.test", true},
		{"sni in another case, trailing dot on the target", "UPSTREAM.test.:" + up.port, "upstream.TEST", true},
		{"an address target without sni", "127.0.0.1:" + up.port, "", true},
		{"sni names another host", "upstream.test:" + up.port, "fronted.example", false},
		{"an address target with a host's sni", "127.0.0.1:" + up.port, "fronted.example", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := handshake(f.tunnel(t, tc.target), tc.sni)
			if tc.ok && (err != nil || !strings.Contains(body, "hello over tls")) {
				t.Errorf("handshake: %v %q", err, body)
			}
			if !tc.ok && err == nil {
				t.Errorf("a fronted handshake succeeded: %q", body)
			}
		})
	}
	for _, sni := range up.seen() {
		if sni == "fronted.example" {
			t.Errorf("the upstream was sent a ClientHello naming %s", sni)
		}
	}

	// Not a ClientHello: a handshake record of nonsense, and a warning
	// alert before a fronted hello.
	for _, first := range [][]byte{
		{0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5},
		{0x15, 0x03, 0x03, 0x00, 0x02, 1, 0},
	} {
		c := f.tunnel(t, "upstream.test:"+up.port)
		c.Write(first)
		c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, _ := c.Read(make([]byte, 1)); n != 0 {
			t.Errorf("a tunnel beginning % x was answered", first[:1])
		}
		c.Close()
	}
	// Plain HTTP: the Host header must name the URL's host and port.
	raw := func(head string) string {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, head)
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if got := raw("GET http://upstream.test:" + f.port + "/ HTTP/1.1\r\nHost: other.test:" + f.port + "\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 403") || !strings.Contains(got, "Host header") {
		t.Errorf("another host in the Host header: %q", got)
	}
	if got := raw("GET http://upstream.test:" + f.port + "/ HTTP/1.1\r\nHost: upstream.test\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 403") {
		t.Errorf("another port in the Host header: %q", got)
	}
	if got := raw("GET http://upstream.test:" + f.port + "/ HTTP/1.1\r\nHost: Upstream.Test:" + f.port + "\r\n\r\n"); !strings.Contains(got, "hello from upstream upstream.test") {
		t.Errorf("the same Host in another case: %q", got)
	}
	if got := raw("GET http://upstream.test:" + f.port + "/ HTTP/1.0\r\n\r\n"); !strings.Contains(got, "hello from upstream") {
		t.Errorf("no Host header (HTTP/1.0): %q", got)
	}

	f.proxy.Unregister(mustAddr("127.0.0.1"))
	reasons := map[string]int{}
	for _, ev := range f.events.of(sandgate.EventEgressDenied) {
		if ev.Payload["aggregated"] == true {
			for r, n := range ev.Payload["reasons"].(map[string]any) {
				reasons[r] += int(n.(int64))
			}
			continue
		}
		reasons[fmt.Sprint(ev.Payload["reason"])]++
	}
	want := map[string]int{egress.ReasonSNIMismatch: 2, egress.ReasonBadClientHello: 2, egress.ReasonHostMismatch: 2}
	for r, n := range want {
		if reasons[r] != n {
			t.Errorf("%d egress.denied with reason %s, want %d (all: %v)", reasons[r], r, n, reasons)
		}
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
