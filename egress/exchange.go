package egress

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// exchange is one connection of a run with secrets, read request by
// request: each checked for misdirected placeholders, written into, sent
// on, and its answer sent back, the secrets written into it removed.
type exchange struct {
	p   *Proxy
	st  *runState
	rec *conn
	// plain is a plain-HTTP proxy request: one request, then the
	// connection ends. tunnel is a CONNECT tunnel's HTTP, whose every
	// request must name the tunnel's destination.
	plain, tunnel bool
	// tls is a tunnel whose TLS the proxy terminated.
	tls bool
	// The run's side: read through cr (its heads bounded by limit),
	// written to cw. The destination's: written to sw, read through sr.
	cw    net.Conn
	cr    *bufio.Reader
	limit *headLimit
	sw    net.Conn
	sr    *bufio.Reader
	// used counts the requests each secret was written into.
	used map[*boundSecret]int64
}

// headLimit bounds what a request's head may read: MaxHeaderBytes (and
// the reader's buffer) while n is set, anything after.
type headLimit struct {
	r io.Reader
	n int64
}

func (h *headLimit) Read(p []byte) (int, error) {
	if h.n <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > h.n {
		p = p[:h.n]
	}
	n, err := h.r.Read(p)
	h.n -= int64(n)
	return n, err
}

var errHeadTooLarge = fmt.Errorf("the request head is larger than %d bytes", MaxHeaderBytes)

func (x *exchange) setClient(w net.Conn, r io.Reader) {
	x.cw = w
	x.limit = &headLimit{r: r, n: math.MaxInt64}
	x.cr = bufio.NewReaderSize(x.limit, 4096)
}

// serve answers the connection's requests, first (a plain request read
// already) or those read from it, until one ends it.
func (x *exchange) serve(first *http.Request) {
	req := first
	for {
		if req == nil {
			var err error
			if req, err = x.readRequest(); err != nil {
				return
			}
		}
		if !x.one(req) || x.plain {
			return
		}
		req = nil
	}
}

// readRequest waits for the run's next request as long as it takes, and
// reads its head within DefaultHeaderTimeout and MaxHeaderBytes.
func (x *exchange) readRequest() (*http.Request, error) {
	if _, err := x.cr.Peek(1); err != nil {
		return nil, err
	}
	_ = x.cw.SetReadDeadline(time.Now().Add(DefaultHeaderTimeout))
	x.limit.n = MaxHeaderBytes + 4096
	req, err := http.ReadRequest(x.cr)
	x.limit.n = math.MaxInt64
	_ = x.cw.SetReadDeadline(time.Time{})
	if err != nil {
		refuse(x.cw, http.StatusBadRequest, "sandgate egress: the request cannot be read: "+err.Error())
	}
	return req, err
}

// one sends req on and its answer back; false ends the connection.
func (x *exchange) one(req *http.Request) bool {
	rec, secrets := x.rec, x.st.secrets
	dest := net.JoinHostPort(rec.host, strconv.Itoa(rec.port))
	if m := secrets.check(req, rec.host, rec.port); m != nil {
		x.p.recordSecret(x.st, m.secret, rec.host, rec.port, 1, m.where)
		refuse(x.cw, http.StatusForbidden, fmt.Sprintf("sandgate egress: %s refused: the request carries the placeholder of secret %s (in its %s), which may not go there",
			dest, m.secret.Name, strings.ReplaceAll(m.where, "_", " ")))
		return false
	}
	if x.tunnel {
		if err := innerHost(req, rec.host, rec.port); err != nil {
			rec.reason, rec.msg = ReasonHostMismatch, err.Error()
			refuse(x.cw, http.StatusForbidden, fmt.Sprintf("sandgate egress: %s refused: %s", dest, rec.msg))
			return false
		}
	}
	if b := secrets.bound(rec.host, rec.port); b != nil && !x.tls && slices.Contains(x.p.opt.TLSPorts, rec.port) {
		x.p.recordSecret(x.st, b, rec.host, rec.port, 1, "cleartext")
		refuse(x.cw, http.StatusForbidden, fmt.Sprintf("sandgate egress: %s refused: secret %s is written to it over TLS alone, and this request is in the clear",
			dest, b.Name))
		return false
	}
	used := secrets.inject(req, rec.host, rec.port)
	prepare(req, len(used) > 0, x.plain)
	if req.Header.Get("Expect") != "" {
		// The proxy sends the body on as it comes: the run may send it.
		req.Header.Del("Expect")
		if _, err := io.WriteString(x.cw, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return false
		}
	}
	if err := req.Write(x.sw); err != nil {
		return false
	}
	resp, err := x.answer(req, used)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if len(used) > 0 {
		if err := scrubAnswer(resp, used); err != nil {
			rec.reason, rec.msg = ReasonUnreadableAnswer, err.Error()
			refuse(x.cw, http.StatusBadGateway, fmt.Sprintf("sandgate egress: %s: %s", dest, rec.msg))
			return false
		}
		for _, b := range used {
			x.used[b]++
		}
	}
	if err := resp.Write(x.cw); err != nil {
		return false
	}
	return !resp.Close && !req.Close
}

// answer reads the destination's answer to req, sending the run any
// informational answer before it, with the values of used removed from
// its headers (a 103's Link may echo what it was sent).
func (x *exchange) answer(req *http.Request, used []*boundSecret) (*http.Response, error) {
	pats := patternsOf(used)
	for {
		resp, err := http.ReadResponse(x.sr, req)
		if err != nil {
			return nil, err
		}
		scrubHeader(resp.Header, pats)
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				resp.Body.Close()
				return nil, fmt.Errorf("the destination switched protocols, which the proxy does not relay here")
			}
			return resp, nil
		}
		if err := resp.Write(x.cw); err != nil {
			return nil, err
		}
	}
}

// prepare readies req to be sent on: the proxy's own headers removed, no
// protocol upgrade (the proxy reads HTTP only), an answer the proxy can
// read when a secret was written into it, and for a plain-HTTP proxy
// request the origin form and the destination asked to close.
func prepare(req *http.Request, secret, plain bool) {
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.Header.Del("Upgrade")
	req.Header.Del("Connection")
	if secret {
		req.Header.Set("Accept-Encoding", "identity")
		req.Header.Del("TE")
	}
	if plain {
		req.Close = true
	}
	req.RequestURI = ""
}

// innerHost refuses a request inside a tunnel to host:port that names
// another destination, in its Host header or an absolute URL: a secret
// bound to host must not reach another virtual host behind its address.
func innerHost(req *http.Request, host string, port int) error {
	for _, name := range []string{req.Host, req.URL.Host} {
		if name == "" {
			continue
		}
		h, p, err := net.SplitHostPort(name)
		if err != nil {
			h, p = strings.Trim(name, "[]"), strconv.Itoa(port)
		}
		if !sameHost(h, host) || p != strconv.Itoa(port) {
			return fmt.Errorf("the request names %q, not the tunnel's destination %s", name, net.JoinHostPort(host, strconv.Itoa(port)))
		}
	}
	return nil
}

// scrubAnswer removes the values of used from resp: its headers now, its
// body as it is read (decompressed first when the destination compressed
// it although asked not to; refused when it cannot be read).
func scrubAnswer(resp *http.Response, used []*boundSecret) error {
	pats := patternsOf(used)
	scrubHeader(resp.Header, pats)
	resp.Trailer = nil
	if resp.ContentLength == 0 || resp.Request.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return nil
	}
	body := resp.Body
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip", "deflate":
		var err error
		var r io.ReadCloser
		if enc == "deflate" {
			r, err = zlib.NewReader(body)
		} else {
			r, err = gzip.NewReader(body)
		}
		if err != nil {
			return fmt.Errorf("the answer says it is %s and is not: it cannot be read to remove the secret from", enc)
		}
		body = readCloser{r, body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.TransferEncoding = nil
		if resp.ProtoAtLeast(1, 1) {
			resp.TransferEncoding = []string{"chunked"}
		} else {
			resp.Close = true
		}
	default:
		return fmt.Errorf("the answer is %s-encoded, which the proxy cannot read to remove the secret from", enc)
	}
	resp.Body = readCloser{newScrubReader(body, pats), body}
	return nil
}

// patternsOf are the forms the values of used are removed as.
func patternsOf(used []*boundSecret) [][]byte {
	var pats [][]byte
	for _, b := range used {
		pats = append(pats, b.patterns...)
	}
	return pats
}

// scrubHeader removes pats from h's values, in place.
func scrubHeader(h http.Header, pats [][]byte) {
	if len(pats) == 0 {
		return
	}
	for _, vs := range h {
		for i := range vs {
			b := []byte(vs[i])
			if scrub(b, pats) {
				vs[i] = string(b)
			}
		}
	}
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// recordUse records the secrets the connection wrote, once it is over.
func (x *exchange) recordUse() {
	for b, n := range x.used {
		x.p.recordSecret(x.st, b, x.rec.host, x.rec.port, n, "")
	}
}
