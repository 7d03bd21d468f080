package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// A run with secrets has every connection it makes through the proxy
// read: a CONNECT tunnel that begins a TLS handshake is terminated with
// a certificate of the run's own authority (RunCA), and the proxy opens
// its own TLS to the destination, verified against Options.UpstreamRoots;
// a tunnel that begins an HTTP request, and a plain-HTTP request, are
// read as they are. Each request is then checked for the run's
// placeholders (check), has the run's secrets bound to its destination
// written into it (inject), and the answer to a request a secret was
// written into has the secret removed (scrubAnswer). A tunnel that begins
// with neither, or whose destination speaks first, is relayed unread as
// for any run: a placeholder cannot be sent anywhere through it in a form
// the proxy would replace.

// tunnelKind is what a tunnel carries, as its first bytes tell.
type tunnelKind int

const (
	tunnelRaw tunnelKind = iota
	tunnelTLS
	tunnelHTTP
)

// maxMethod is the longest HTTP method sniff waits for.
const maxMethod = 16

// sniff tells a tunnel's kind by its client's first bytes: a TLS record
// that begins a handshake, an HTTP method and a space, or neither.
func sniff(br *bufio.Reader) tunnelKind {
	first, err := br.Peek(1)
	if err != nil {
		return tunnelRaw
	}
	if first[0] == recordTypeHandshake {
		// Anything else that is not a well-formed ClientHello is relayed
		// raw, where checkTunnel refuses it.
		if h, err := br.Peek(2); err == nil && h[1] == 3 {
			return tunnelTLS
		}
		return tunnelRaw
	}
	for n := 1; n <= maxMethod+1; n++ {
		h, err := br.Peek(n)
		if err != nil {
			return tunnelRaw
		}
		switch ch := h[n-1]; {
		case ch == ' ' && n > 1:
			return tunnelHTTP
		case ch < 'A' || ch > 'Z':
			return tunnelRaw
		}
	}
	return tunnelRaw
}

// classify waits for a tunnel's first bytes: the client's, sniffed, or
// the destination's (a protocol whose server speaks first), which make it
// raw. up is read through upBR from now on.
func classify(c net.Conn, br *bufio.Reader, upstream net.Conn, upBR *bufio.Reader) tunnelKind {
	client := make(chan tunnelKind, 1)
	go func() { client <- sniff(br) }()
	server := make(chan struct{})
	go func() {
		defer close(server)
		_, _ = upBR.Peek(1)
	}()
	select {
	case k := <-client:
		// The destination's read is stopped where it is: what it read
		// stays in upBR.
		_ = upstream.SetReadDeadline(time.Now())
		<-server
		_ = upstream.SetReadDeadline(time.Time{})
		return k
	case <-server:
		_ = c.SetReadDeadline(time.Now())
		<-client
		_ = c.SetReadDeadline(time.Time{})
		return tunnelRaw
	}
}

// bufferedConn is a connection read through a reader that holds what was
// read of it already.
type bufferedConn struct {
	net.Conn
	r io.Reader
}

func (b bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// errSNI refuses a handshake whose server name is not the target.
var errSNI = errors.New("the TLS server name is not the CONNECT target")

// terminate ends the run's TLS with a certificate of its authority for
// rec.host, and opens the proxy's own TLS to the destination. A failure
// is rec's reason: sni_mismatch, bad_client_hello or upstream_tls; the
// run's side is then open when only the destination's failed.
func (p *Proxy) terminate(st *runState, rec *conn, client, server net.Conn) (cl, sv *tls.Conn, err error) {
	var named string
	cl = tls.Server(client, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if h.ServerName != "" && !sameHost(h.ServerName, rec.host) {
				named = h.ServerName
				return nil, errSNI
			}
			return st.ca.leaf(rec.host)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), DefaultHeaderTimeout)
	defer cancel()
	if err := cl.HandshakeContext(ctx); err != nil {
		rec.reason, rec.msg = ReasonBadClientHello, fmt.Sprintf("the run's TLS handshake with the proxy failed: %v", err)
		if named != "" {
			rec.reason, rec.msg = ReasonSNIMismatch, fmt.Sprintf("the TLS server name %q is not the CONNECT target %s", named, rec.host)
		}
		return nil, nil, err
	}
	sv = tls.Client(server, &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: rec.host,
		RootCAs:    p.opt.UpstreamRoots,
		NextProtos: []string{"http/1.1"},
	})
	if err := sv.HandshakeContext(ctx); err != nil {
		rec.reason, rec.msg = ReasonUpstreamTLS, fmt.Sprintf("the destination's TLS did not verify: %v", err)
		return cl, nil, err
	}
	return cl, sv, nil
}

// intercept serves one connection of a run with secrets, from after its
// destination was connected: a CONNECT tunnel classified and, when TLS,
// terminated, or a plain request; every request read through exchange.
// It always serves the connection whole (true): a tunnel that is neither
// TLS nor HTTP is refused.
func (p *Proxy) intercept(st *runState, rec *conn, c net.Conn, br *bufio.Reader, upstream net.Conn, up, down *counted, req *http.Request) bool {
	x := &exchange{p: p, st: st, rec: rec, used: map[*boundSecret]int64{}}
	defer x.recordUse()
	if req.Method != http.MethodConnect {
		x.plain = true
		x.setClient(down, br)
		x.sw, x.sr = up, bufio.NewReader(upstream)
		x.serve(req)
		return true
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return true
	}
	upBR := bufio.NewReader(upstream)
	switch classify(c, br, upstream, upBR) {
	case tunnelTLS:
		cl, sv, err := p.terminate(st, rec, bufferedConn{down, br}, bufferedConn{up, upBR})
		if cl != nil {
			defer cl.Close()
		}
		if err != nil {
			if cl != nil {
				refuse(cl, http.StatusBadGateway, fmt.Sprintf("sandgate egress: %s:%d refused: %s", rec.host, rec.port, rec.msg))
			}
			return true
		}
		defer sv.Close()
		x.tunnel, x.tls = true, true
		x.setClient(cl, bufio.NewReader(cl))
		x.sw, x.sr = sv, bufio.NewReader(sv)
	case tunnelHTTP:
		x.tunnel = true
		x.setClient(down, br)
		x.sw, x.sr = up, upBR
	default:
		// A tunnel is relayed only once a well-formed ClientHello has
		// been read and checked, in a run with secrets as in any other:
		// neither TLS nor HTTP (a server that speaks first included) is
		// refused, and nothing of either side is passed on.
		rec.reason, rec.msg = ReasonBadClientHello, "the tunnel carries neither a TLS ClientHello nor an HTTP request"
		return true
	}
	x.serve(nil)
	return true
}
