package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strings"
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

// checkTunnel reads what a client sends first into a CONNECT tunnel to
// host, which must be a TLS ClientHello read whole within
// DefaultHeaderTimeout (readClientHello), and checks its server name:
// none, or host itself. It returns the bytes to send on first, or the
// reason and message of a refusal: another name (domain fronting: an
// admitted address, another site's certificate and virtual host), or
// anything that is not a complete, well-formed ClientHello (another
// protocol, a record a lenient server would read and this reader would
// not). Nothing is relayed in either direction before it returns.
func checkTunnel(c net.Conn, r io.Reader, host string) (raw []byte, reason, msg string) {
	_ = c.SetReadDeadline(time.Now().Add(DefaultHeaderTimeout))
	hello, err := readClientHello(r)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, ReasonBadClientHello, err.Error()
	}
	if hello.serverName != "" && !sameHost(hello.serverName, host) {
		return nil, ReasonSNIMismatch, fmt.Sprintf("the TLS server name %q is not the CONNECT target %s", hello.serverName, host)
	}
	return hello.raw, "", ""
}
