package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strings"
	"sync"
	"time"
)

// The reasons a connection is refused for naming, inside what it sends,
// a host other than the one it was admitted for (domain fronting).
const (
	// ReasonSNIMismatch: a CONNECT tunnel's TLS ClientHello names a
	// server other than the CONNECT target.
	ReasonSNIMismatch = "sni_mismatch"
	// ReasonBadClientHello: a CONNECT tunnel began a TLS handshake whose
	// ClientHello could not be read.
	ReasonBadClientHello = "bad_client_hello"
	// ReasonHostMismatch: a plain-HTTP request's Host header names a host
	// other than its URL's.
	ReasonHostMismatch = "host_mismatch"
)

// maxClientHello bounds the bytes read for a ClientHello (one is a few
// hundred bytes to a few KiB, with post-quantum key shares).
const maxClientHello = 64 << 10

// The TLS record types (RFC 8446 5.1): a record starts with one, then
// the major version 3.
const (
	recordTypeChangeCipherSpec = 0x14
	recordTypeApplicationData  = 0x17
)

// headRecorder keeps the first bytes read from a client, up to max, until
// stopped: the request head as the client wrote it, whose Host header
// http.ReadRequest does not keep.
type headRecorder struct {
	buf     []byte
	max     int
	stopped bool
}

func (h *headRecorder) Write(b []byte) (int, error) {
	if !h.stopped {
		h.buf = append(h.buf, b[:min(len(b), h.max-len(h.buf))]...)
	}
	return len(b), nil
}

// hostHeader is the Host header of the request head h recorded, "" when
// it has none.
func (h *headRecorder) hostHeader() string {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(h.buf)))
	if _, err := tp.ReadLine(); err != nil {
		return ""
	}
	hdr, _ := tp.ReadMIMEHeader()
	return strings.TrimSpace(hdr.Get("Host"))
}

// checkHost refuses a plain-HTTP request whose Host header names another
// host, or another port, than its absolute URL, which the proxy checked:
// a virtual host chosen by the header would be reached through an
// address admitted for another name. hostport is the URL's, port
// defaulted to 80.
func checkHost(header, hostport string) error {
	if header == "" {
		return nil // HTTP/1.0 may omit it; the proxy sends the URL's
	}
	h, p, err := net.SplitHostPort(header)
	if err != nil {
		h, p = strings.TrimSuffix(strings.TrimPrefix(header, "["), "]"), "80"
	}
	uh, up, _ := net.SplitHostPort(hostport)
	if !sameHost(h, uh) || p != up {
		return fmt.Errorf("the Host header %q names another destination than the request's URL (%s)", header, hostport)
	}
	return nil
}

// sameHost compares host names as DNS does (case, a trailing dot).
func sameHost(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// checkTunnel looks at the first bytes a client sends into a CONNECT
// tunnel to host. When they begin a TLS record, it must be a
// ClientHello, which is read whole (within DefaultHeaderTimeout) and its server name checked:
// none, or host itself, and every byte read is sent on to up; another
// name (domain fronting: an admitted address, another site's
// certificate and virtual host) is refused with its reason, nothing sent
// on. Anything else than TLS passes unread. It waits for the client's
// first byte as long as the client takes: a protocol whose server
// speaks first is answered meanwhile by the other direction.
func checkTunnel(c net.Conn, br *bufio.Reader, up io.Writer, host string) (reason, msg string) {
	first, err := br.Peek(1)
	if err != nil || first[0] < recordTypeChangeCipherSpec || first[0] > recordTypeApplicationData {
		return "", ""
	}
	// Any TLS record first (an alert or a change-cipher-spec before the
	// hello would slip a lenient server a ClientHello unread) must be
	// the ClientHello; another protocol's first bytes pass.
	if head, err := br.Peek(2); err != nil || head[1] != 3 {
		return "", ""
	}
	_ = c.SetReadDeadline(time.Now().Add(DefaultHeaderTimeout))
	sni, raw, err := readClientHello(br)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		return ReasonBadClientHello, err.Error()
	}
	if sni != "" && !sameHost(sni, host) {
		return ReasonSNIMismatch, fmt.Sprintf("the TLS server name %q is not the CONNECT target %s", sni, host)
	}
	if _, err := up.Write(raw); err != nil {
		return "", ""
	}
	return "", ""
}

// errHelloRead stops the handshake once the ClientHello is parsed.
var errHelloRead = errors.New("client hello read")

// readClientHello reads a TLS ClientHello from r with crypto/tls's own
// parser and returns its server name and every byte it read.
func readClientHello(r io.Reader) (string, []byte, error) {
	var raw bytes.Buffer
	hc := &helloConn{r: io.TeeReader(io.LimitReader(r, maxClientHello), &raw)}
	var sni string
	var parsed bool
	err := tls.Server(hc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, parsed = h.ServerName, true
		return nil, errHelloRead
	}}).Handshake()
	if !parsed {
		return "", raw.Bytes(), fmt.Errorf("a TLS handshake began without a readable ClientHello: %v", err)
	}
	return sni, raw.Bytes(), nil
}

// helloConn is a read-only net.Conn for the ClientHello parser: what it
// would answer (an alert) is dropped.
type helloConn struct {
	r  io.Reader
	mu sync.Mutex
}

func (h *helloConn) Read(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.r.Read(b)
}
func (h *helloConn) Write(b []byte) (int, error)      { return len(b), nil }
func (h *helloConn) Close() error                     { return nil }
func (h *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (h *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (h *helloConn) SetDeadline(time.Time) error      { return nil }
func (h *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (h *helloConn) SetWriteDeadline(time.Time) error { return nil }
