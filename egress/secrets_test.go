package egress_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/policies/policytest"
)

const (
	secretValue = "sk-live-0123456789abcdefXYZ"
	placeholder = "sandgate-secret:demo:0f1e2d3c4b5a69788796a5b4c3d2e1f0"
)

// echoUpstream is an HTTPS (or plain) server that echoes every request
// it is sent: its headers in the body, as JSON and base64, and the
// Authorization header in an answer header; /gzip answers compressed
// whatever it was asked.
type echoUpstream struct {
	srv  *httptest.Server
	port string
	mu   sync.Mutex
	seen []http.Header
}

func newEchoUpstream(t testing.TB, cert *tls.Certificate) *echoUpstream {
	u := &echoUpstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		doc, _ := json.Marshal(map[string]any{"host": r.Host, "path": r.URL.Path, "headers": r.Header})
		if r.URL.Path == "/hints" {
			// An informational answer before the final one, echoing too.
			w.Header().Set("Link", "</style.css?auth="+r.Header.Get("Authorization")+">; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		body := fmt.Sprintf("%s\nbase64: %s\nraw-b64: %s\n", doc, base64.StdEncoding.EncodeToString(doc),
			base64.RawURLEncoding.EncodeToString([]byte("x"+r.Header.Get("Authorization"))))
		if r.URL.Path == "/gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			io.WriteString(gz, body)
			gz.Close()
			return
		}
		io.WriteString(w, body)
	}))
	if cert != nil {
		u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	_, u.port, _ = net.SplitHostPort(u.srv.Listener.Addr().String())
	return u
}

func (u *echoUpstream) requests() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen...)
}

// secretFixture is a proxy with one run with secret demo registered at
// 127.0.0.1: demo bound to api.test (HTTPS) and plain.test (HTTP), the
// run also admitted to other.test (HTTPS, no secret), each an echo
// upstream on loopback with certificates of the upstream authority.
type secretFixture struct {
	proxy                *egress.Proxy
	addr                 string
	events               *events
	ca                   *egress.RunCA
	upCA                 *egress.RunCA // the upstreams' authority
	api, other, plain    *echoUpstream
	dApi, dOther, dPlain string
}

func newSecretFixture(t testing.TB, trustUpstream bool, extra ...string) *secretFixture {
	t.Helper()
	return secretFixtureWith(t, trustUpstream, nil, extra...)
}

// secretFixtureWith is newSecretFixture with the proxy's TLSPorts those
// tlsPorts names once the upstreams listen (nil: the default).
func secretFixtureWith(t testing.TB, trustUpstream bool, tlsPorts func(*secretFixture) []int, extra ...string) *secretFixture {
	t.Helper()
	f := &secretFixture{events: &events{}}
	upCA, err := egress.NewRunCA("upstream", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.upCA = upCA
	f.api = newEchoUpstream(t, leafOf(t, upCA, "api.test"))
	f.other = newEchoUpstream(t, leafOf(t, upCA, "other.test"))
	f.plain = newEchoUpstream(t, nil)
	f.dApi, f.dOther, f.dPlain = "api.test:"+f.api.port, "other.test:"+f.other.port, "plain.test:"+f.plain.port
	dests := append([]string{f.dApi, f.dOther, f.dPlain}, extra...)
	roots := x509.NewCertPool()
	if trustUpstream {
		roots.AddCert(upCA.Certificate())
	}
	var ports []int
	if tlsPorts != nil {
		ports = tlsPorts(f)
	}
	f.proxy = egress.New(egress.Options{
		Decider: policytest.Engine(t, policytest.EgressDestinations("payments", dests...)), Events: f.events, Node: "n1", TLSPorts: ports,
		SourceWait: 50 * time.Millisecond, AggregateEvery: time.Hour, UpstreamRoots: roots,
		Lookup: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.proxy.Serve(ln)
	t.Cleanup(func() { f.proxy.Close() })
	f.addr = ln.Addr().String()
	if f.ca, err = egress.NewRunCA("run-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	err = f.proxy.Register(netip.MustParseAddr("127.0.0.1"), egress.Run{
		RunID: "run-1", CorrelationID: "corr-1", DecisionID: "dec-1", Principal: "alice", Team: "payments",
		Egress: dests, Limits: sandgate.EgressLimits{Connections: 1 << 20, Bytes: 1 << 40},
		Private: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, CA: f.ca,
		Secrets: []egress.Secret{{Name: "demo", Version: 3, Placeholder: placeholder, Value: sandgate.NewSecretValue(secretValue),
			Destinations: []string{f.dApi, f.dPlain}, Header: "Authorization", Format: "Bearer {value}"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func leafOf(t testing.TB, ca *egress.RunCA, host string) *tls.Certificate {
	t.Helper()
	c, err := egress.IssueForTest(ca, host)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// client trusts the run's authority alone, as the sandbox does.
func (f *secretFixture) client() *http.Client {
	u, _ := url.Parse("http://" + f.addr)
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Certificate())
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u),
		TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func (f *secretFixture) do(t testing.TB, c *http.Client, method, target string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// leaks reports whether s holds the value or a base64 form of it.
func leaks(s string) bool {
	if strings.Contains(s, secretValue) || strings.Contains(s, "live-0123456789") {
		return true
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		for k := range 3 {
			e := enc.EncodeToString([]byte(strings.Repeat("x", k) + secretValue))
			if strings.Contains(s, e[4:len(e)-4]) {
				return true
			}
		}
	}
	return false
}

// TestProxySecretInjected: over HTTPS terminated with the run's
// authority and over plain HTTP, the destination a secret is bound to
// receives it, in the header the template writes and wherever a header
// held the placeholder; the echo of every request comes back without the
// value or its base64, in body and headers, compressed or not; several
// requests on one kept-alive connection each get it. The run's trust is
// its authority alone, and the client verified it.
func TestProxySecretInjected(t *testing.T) {
	f := newSecretFixture(t, true)
	c := f.client()
	for _, tc := range []struct{ name, target string }{
		{"https", "https://" + f.dApi + "/echo"},
		{"https gzip", "https://" + f.dApi + "/gzip"},
		{"plain http", "http://" + f.dPlain + "/echo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 3 {
				status, body, hdr := f.do(t, c, "GET", tc.target, map[string]string{
					"Authorization": "Bearer " + placeholder, "X-Also": "key=" + placeholder,
				})
				if status != 200 || !strings.Contains(body, `"path"`) {
					t.Fatalf("request %d: %d %s", i, status, body)
				}
				if leaks(body) || leaks(fmt.Sprint(hdr)) {
					t.Errorf("the answer reveals the value: %s %v", body, hdr)
				}
				if !strings.Contains(hdr.Get("X-Echo-Authorization"), "Bearer ***") {
					t.Errorf("the echoed header was not scrubbed in place: %q", hdr.Get("X-Echo-Authorization"))
				}
			}
		})
	}
	for _, u := range []*echoUpstream{f.api, f.plain} {
		reqs := u.requests()
		if len(reqs) != 6 && len(reqs) != 3 {
			t.Fatalf("upstream saw %d requests", len(reqs))
		}
		for _, h := range reqs {
			if h.Get("Authorization") != "Bearer "+secretValue || h.Get("X-Also") != "key="+secretValue || strings.Contains(fmt.Sprint(h), placeholder) {
				t.Errorf("upstream saw %v", h)
			}
		}
	}
	// A request that does not ask for it gets it too: the binding writes
	// the header to that destination.
	if status, _, _ := f.do(t, c, "GET", "https://"+f.dApi+"/bare", nil); status != 200 {
		t.Fatal(status)
	}
	if got := f.api.requests(); got[len(got)-1].Get("Authorization") != "Bearer "+secretValue {
		t.Errorf("bare request: %v", got[len(got)-1])
	}
	f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
	used := f.events.of(sandgate.EventSecretUsed)
	if len(used) < 2 {
		t.Fatalf("secret.used %+v", used)
	}
	var single, agg int
	for _, ev := range used {
		if doc, _ := json.Marshal(ev); leaks(string(doc)) || strings.Contains(string(doc), placeholder) {
			t.Errorf("an event holds the value or the placeholder: %s", doc)
		}
		if ev.Payload["secret"] != "demo" || ev.Payload["version"] != int64(3) || ev.RunID != "run-1" || ev.Team != "payments" {
			t.Errorf("event %+v", ev)
		}
		if ev.Payload["aggregated"] == true {
			agg++
		} else {
			single++
		}
	}
	if single != 2 || agg != 1 {
		t.Errorf("%d singles (want one per destination) and %d aggregates: %+v", single, agg, used)
	}
}

// TestProxySecretMisdirected: a placeholder sent to an admitted
// destination it is not bound to (over HTTPS the proxy terminates, or
// plain HTTP), in a URL, or in a header's name, is refused before the
// destination sees the request, and recorded as secret.misdirected; a
// request naming another host inside the tunnel is refused too; the
// destination it is bound to still gets it.
func TestProxySecretMisdirected(t *testing.T) {
	f := newSecretFixture(t, true)
	c := f.client()
	for _, tc := range []struct {
		name, target string
		hdr          map[string]string
		where        string
	}{
		{"other destination", "https://" + f.dOther + "/", map[string]string{"Authorization": "Bearer " + placeholder}, "header"},
		{"other destination, another header", "https://" + f.dOther + "/", map[string]string{"X-Token": placeholder}, "header"},
		{"in the url", "https://" + f.dApi + "/x?key=" + placeholder, nil, "url"},
		{"in a header name", "https://" + f.dApi + "/", map[string]string{"X-" + strings.ReplaceAll(placeholder, ":", "-"): "1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.other.requests()) + len(f.api.requests())
			status, body, _ := f.do(t, c, "GET", tc.target, tc.hdr)
			if tc.where == "" {
				// A header name cannot hold ':' — the placeholder there
				// is not the run's and passes as any header does.
				if status != 200 {
					t.Errorf("%d %s", status, body)
				}
				return
			}
			if status != http.StatusForbidden || !strings.Contains(body, "secret demo") {
				t.Fatalf("%d %s", status, body)
			}
			if after := len(f.other.requests()) + len(f.api.requests()); after != before {
				t.Errorf("the destination saw the refused request")
			}
		})
	}
	// Inside a tunnel to api.test, a request naming other.test.
	conn := tunnelTo(t, f.addr, f.dApi)
	tc := tls.Client(conn, &tls.Config{ServerName: "api.test", RootCAs: poolOf(f.ca)})
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", f.dOther)
	b, _ := io.ReadAll(tc)
	if !strings.HasPrefix(string(b), "HTTP/1.1 403") {
		t.Errorf("another host inside the tunnel: %s", b)
	}
	f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
	mis := f.events.of(sandgate.EventSecretMisdirected)
	if len(mis) == 0 {
		t.Fatal("no secret.misdirected")
	}
	wheres := map[string]bool{}
	for _, ev := range mis {
		wheres[fmt.Sprint(ev.Payload["where"])] = true
		if ev.Outcome != "refused" || ev.Payload["secret"] != "demo" {
			t.Errorf("%+v", ev)
		}
	}
	if !wheres["header"] || !wheres["url"] {
		t.Errorf("wheres %v", wheres)
	}
	var mismatch bool
	for _, ev := range f.events.of(sandgate.EventEgressDenied) {
		rs, _ := ev.Payload["reasons"].(map[string]any)
		mismatch = mismatch || ev.Payload["reason"] == egress.ReasonHostMismatch || rs[egress.ReasonHostMismatch] != nil
	}
	if !mismatch {
		t.Error("the request naming another host was not recorded as host_mismatch")
	}
}

// TestProxySecretUpstreamVerified: a destination whose certificate does
// not verify against the proxy's roots never gets the secret: the run
// is answered 502, recorded as upstream_tls. A ClientHello naming
// another server than the target is refused as before.
func TestProxySecretUpstreamVerified(t *testing.T) {
	f := newSecretFixture(t, false)
	status, body, _ := f.do(t, f.client(), "GET", "https://"+f.dApi+"/", map[string]string{"Authorization": "Bearer " + placeholder})
	if status != http.StatusBadGateway || len(f.api.requests()) != 0 {
		t.Fatalf("%d %s; upstream saw %d", status, body, len(f.api.requests()))
	}
	conn := tunnelTo(t, f.addr, f.dApi)
	tc := tls.Client(conn, &tls.Config{ServerName: "other.test", RootCAs: poolOf(f.ca)})
	if err := tc.Handshake(); err == nil {
		t.Error("a ClientHello naming another server was served")
	}
	f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
	reasons := map[any]bool{}
	for _, ev := range f.events.of(sandgate.EventEgressDenied) {
		reasons[ev.Payload["reason"]] = true
		if rs, ok := ev.Payload["reasons"].(map[string]any); ok {
			for r := range rs {
				reasons[r] = true
			}
		}
	}
	if !reasons[egress.ReasonUpstreamTLS] || !reasons[egress.ReasonSNIMismatch] {
		t.Errorf("reasons %v", reasons)
	}
}

// TestProxySecretRawTunnel: in a run with secrets, a tunnel that carries
// neither TLS nor HTTP (here a server that speaks first) is refused as in
// any run, with nothing of either side passed on, and recorded denied.
func TestProxySecretRawTunnel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "220 banner\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "echo "+line)
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	dest := "127.0.0.1:" + port
	f := newSecretFixture(t, true, dest)
	f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
	err = f.proxy.Register(netip.MustParseAddr("127.0.0.1"), egress.Run{
		RunID: "run-2", Principal: "alice", Team: "payments", Egress: []string{dest},
		Limits: sandgate.EgressLimits{Connections: 10, Bytes: 1 << 20}, Private: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, CA: f.ca,
		Secrets: []egress.Secret{{Name: "demo", Placeholder: placeholder, Value: sandgate.NewSecretValue(secretValue), Destinations: []string{dest}, Header: "Authorization", Format: "{value}"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	conn := tunnelTo(t, f.addr, dest)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(conn); err != nil || len(got) != 0 {
		t.Fatalf("a raw tunnel passed %q on (%v), want it closed with nothing", got, err)
	}
	f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
	denied := f.events.of(sandgate.EventEgressDenied)
	if len(denied) == 0 || denied[0].Payload["reason"] != egress.ReasonBadClientHello {
		t.Fatalf("egress.denied events %+v, want one with reason %s", denied, egress.ReasonBadClientHello)
	}
}

// TestProxySecretInformationalScrubbed: a destination that echoes the
// value in an informational answer (103 Early Hints) before its final
// one has it removed there too, over plain HTTP and over TLS; read raw,
// as a client that shows its 1xx answers would.
func TestProxySecretInformationalScrubbed(t *testing.T) {
	f := newSecretFixture(t, true)
	read := func(c net.Conn, host string) string {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s/hints HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n",
			map[bool]string{true: "http://" + host, false: ""}[host == f.dPlain], host, placeholder)
		b, _ := io.ReadAll(c)
		return string(b)
	}
	plain, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	tc := tls.Client(tunnelTo(t, f.addr, f.dApi), &tls.Config{ServerName: "api.test", RootCAs: poolOf(f.ca)})
	defer tc.Close()
	for name, out := range map[string]string{"plain": read(plain, f.dPlain), "tls": read(tc, f.dApi)} {
		if !strings.Contains(out, "HTTP/1.1 103") || !strings.Contains(out, "HTTP/1.1 200") {
			t.Errorf("%s: no 103 then 200: %q", name, out)
		}
		if leaks(out) {
			t.Errorf("%s: the answer reveals the value: %q", name, out)
		}
	}
	if got := f.api.requests(); len(got) != 1 || got[0].Get("Authorization") != "Bearer "+secretValue {
		t.Errorf("the destination was sent %v", got)
	}
}

// TestProxySecretClearToTLSPort: a run cannot have a secret bound to a
// destination on a TLS port written to it in the clear, by a plain-HTTP
// request or by HTTP in a CONNECT tunnel: both refused and recorded as
// secret.misdirected ("cleartext"), the destination sent nothing. The
// plain upstream stands for an HTTPS destination here (its port made a
// TLS port), so that what would cross the network is seen. Its variant:
// over TLS the same destination gets the value (TestProxySecretInjected).
func TestProxySecretClearToTLSPort(t *testing.T) {
	f := secretFixtureWith(t, true, func(f *secretFixture) []int {
		p, _ := strconv.Atoi(f.plain.port)
		return []int{p}
	})
	status, body, _ := f.do(t, f.client(), http.MethodGet, "http://"+f.dPlain+"/echo", map[string]string{"Authorization": "Bearer " + placeholder})
	if status != http.StatusForbidden || !strings.Contains(body, "over TLS alone") {
		t.Errorf("plain HTTP to a TLS port: %d %s", status, body)
	}
	c := tunnelTo(t, f.addr, f.dPlain)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /echo HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", f.dPlain, placeholder)
	out, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(out), "HTTP/1.1 403") || leaks(string(out)) {
		t.Errorf("HTTP in a tunnel to a TLS port: %q", out)
	}
	if got := f.plain.requests(); len(got) != 0 {
		t.Errorf("the destination was sent %v", got)
	}
	f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
	var clear int
	for _, ev := range f.events.of(sandgate.EventSecretMisdirected) {
		if ev.Payload["where"] == "cleartext" {
			clear++
		}
		if w, ok := ev.Payload["wheres"].(map[string]any); ok {
			n, _ := w["cleartext"].(int64)
			clear += int(n)
		}
	}
	if clear != 2 {
		t.Errorf("secret.misdirected (cleartext): %d, want 2: %+v", clear, f.events.of(sandgate.EventSecretMisdirected))
	}
}

// TestRegisterSecretsNeedCA: secrets without an authority are refused.
func TestRegisterSecretsNeedCA(t *testing.T) {
	p := egress.New(egress.Options{Events: &events{}})
	defer p.Close()
	err := p.Register(netip.MustParseAddr("127.0.0.9"), egress.Run{RunID: "r", Egress: []string{"api.test:443"},
		Secrets: []egress.Secret{{Name: "demo", Placeholder: placeholder, Destinations: []string{"api.test:443"}, Header: "Authorization", Format: "{value}"}}})
	if err == nil {
		t.Fatal("registered")
	}
}

func tunnelTo(t testing.TB, proxy, target string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return readThrough{c, br}
}

// readThrough is a connection read through the reader that read its
// CONNECT answer, which may hold what came after.
type readThrough struct {
	net.Conn
	r *bufio.Reader
}

func (r readThrough) Read(p []byte) (int, error) { return r.r.Read(p) }

func poolOf(ca *egress.RunCA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Certificate())
	return p
}
