package egress_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/policies/policytest"
)

// events collects what the proxy emits.
type events struct {
	mu  sync.Mutex
	evs []sandgate.Event
}

func (e *events) Emit(ev sandgate.Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) of(typ sandgate.EventType) []sandgate.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []sandgate.Event
	for _, ev := range e.evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// fixture is a proxy on loopback with one run registered at 127.0.0.1
// and an upstream on loopback that data allows explicitly.
type fixture struct {
	proxy    *egress.Proxy
	addr     string
	events   *events
	upstream *httptest.Server
	port     string
	lookups  atomic.Int64
	run      egress.Run
}

func newFixture(t testing.TB, lookup func(n int64, host string) []netip.Addr, limits sandgate.EgressLimits, extra ...string) *fixture {
	t.Helper()
	f := &fixture{events: &events{}}
	payload := strings.Repeat("x", 1<<20)
	f.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, payload)
			return
		}
		fmt.Fprintf(w, "hello from upstream %s", r.Host)
	}))
	t.Cleanup(f.upstream.Close)
	_, f.port, _ = net.SplitHostPort(f.upstream.Listener.Addr().String())
	dests := append([]string{"127.0.0.1:" + f.port, "upstream.test:" + f.port, "private.test:" + f.port,
		"rebind.test:" + f.port, "169.254.169.254:80"}, extra...)
	eng := policytest.Engine(t, policytest.EgressDestinations("payments", dests...))
	f.proxy = egress.New(egress.Options{
		Decider: eng, Events: f.events, Node: "n1", SourceWait: 50 * time.Millisecond, AggregateEvery: time.Hour,
		Lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			n := f.lookups.Add(1)
			if a := lookup(n, host); a != nil {
				return a, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.proxy.Serve(ln)
	t.Cleanup(func() { f.proxy.Close() })
	f.addr = ln.Addr().String()
	f.run = egress.Run{
		RunID: "run-1", CorrelationID: "corr-1", DecisionID: "dec-1", Principal: "alice", Team: "payments",
		Egress: dests, Limits: limits, Private: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	}
	if err := f.proxy.Register(netip.MustParseAddr("127.0.0.1"), f.run); err != nil {
		t.Fatal(err)
	}
	return f
}

// again ends the fixture's run and registers it afresh, its events
// forgotten: a run of its own for each case of a test.
func (f *fixture) again(t testing.TB) {
	t.Helper()
	f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
	f.events.mu.Lock()
	f.events.evs = nil
	f.events.mu.Unlock()
	if err := f.proxy.Register(netip.MustParseAddr("127.0.0.1"), f.run); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) client() *http.Client {
	u, _ := url.Parse("http://" + f.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

func (f *fixture) get(t *testing.T, target string) (int, string) {
	t.Helper()
	resp, err := f.client().Get(target)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func loopbackLookup(n int64, host string) []netip.Addr {
	switch host {
	case "upstream.test":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	case "private.test":
		return []netip.Addr{netip.MustParseAddr("10.11.12.13")}
	case "metadata.test":
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	}
	return nil
}

// TestProxyAllowsAndRefuses: an admitted destination is reached by
// CONNECT and by a plain request; every other is refused with its reason
// and recorded.
func TestProxyAllowsAndRefuses(t *testing.T) {
	up := newTLSUpstream(t)
	f := newFixture(t, loopbackLookup, sandgate.EgressLimits{Connections: 100, Bytes: 10 << 20}, "127.0.0.1:"+up.port)
	if code, body := f.get(t, "http://upstream.test:"+f.port+"/"); code != 200 || !strings.Contains(body, "hello from upstream") {
		t.Fatalf("plain http: %d %q", code, body)
	}
	// CONNECT, as an HTTPS client does.
	if body, err := handshake(f.tunnel(t, "127.0.0.1:"+up.port), ""); err != nil || !strings.Contains(body, "hello over tls") {
		t.Fatalf("CONNECT: %v %q", err, body)
	}

	tests := []struct {
		name, target, reason string
	}{
		{"host not admitted", "http://example.test:" + f.port + "/", egress.ReasonNotAdmitted},
		{"raw IP not admitted", "http://127.0.0.2:" + f.port + "/", egress.ReasonNotAdmitted},
		{"admitted host, other port", "http://upstream.test:1/", egress.ReasonNotAdmitted},
		{"metadata address", "http://169.254.169.254/latest/meta-data/", egress.ReasonLinkLocal},
		{"name resolving to a private address", "http://private.test:" + f.port + "/", egress.ReasonPrivate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.get(t, tc.target)
			if code == 200 {
				t.Fatalf("%s: got 200 %q", tc.target, body)
			}
			if tc.reason == "" {
				return
			}
			var found bool
			for _, ev := range f.events.of(sandgate.EventEgressDenied) {
				if ev.Payload["reason"] == tc.reason && ev.RunID == "run-1" && ev.CorrelationID == "corr-1" {
					found = true
				}
			}
			if !found {
				t.Errorf("no egress.denied with reason %s: %+v", tc.reason, f.events.of(sandgate.EventEgressDenied))
			}
		})
	}
	allowed := f.events.of(sandgate.EventEgressAllowed)
	if len(allowed) == 0 || allowed[0].Payload["bytes_received"].(int64) == 0 || allowed[0].Payload["address"] != "127.0.0.1" {
		t.Errorf("egress.allowed = %+v; want bytes and the address", allowed)
	}
	sum := f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
	if sum == nil || sum.ConnectionsAllowed != 2 || sum.ConnectionsDenied < 5 || sum.BytesReceived == 0 {
		t.Errorf("summary = %+v", sum)
	}
}

// TestProxyDNSRebinding: the proxy resolves a name once per connection and
// connects to the answer it checked; a second answer never comes into it.
func TestProxyDNSRebinding(t *testing.T) {
	f := newFixture(t, func(n int64, host string) []netip.Addr {
		if host != "rebind.test" {
			return nil
		}
		if n%2 == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")} // checked: the allowed upstream
		}
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")} // a rebinding answer
	}, sandgate.EgressLimits{Connections: 100, Bytes: 10 << 20})
	code, body := f.get(t, "http://rebind.test:"+f.port+"/")
	if code != 200 || !strings.Contains(body, "hello from upstream") {
		t.Fatalf("first answer: %d %q", code, body)
	}
	if n := f.lookups.Load(); n != 1 {
		t.Errorf("lookups = %d; want 1 per connection", n)
	}
	// The next connection's one lookup gets the rebinding answer: refused.
	if code, _ := f.get(t, "http://rebind.test:"+f.port+"/"); code == 200 {
		t.Fatal("the rebinding answer was connected to")
	}
	if n := f.lookups.Load(); n != 2 {
		t.Errorf("lookups = %d; want 2", n)
	}
}

// TestProxyLimits: the run's connection count and byte budget hold.
func TestProxyLimits(t *testing.T) {
	t.Run("connections", func(t *testing.T) {
		f := newFixture(t, loopbackLookup, sandgate.EgressLimits{Connections: 2, Bytes: 10 << 20})
		for i := range 2 {
			if code, _ := f.get(t, "http://127.0.0.1:"+f.port+"/"); code != 200 {
				t.Fatalf("connection %d: %d", i, code)
			}
		}
		if code, body := f.get(t, "http://127.0.0.1:"+f.port+"/"); code != http.StatusForbidden || !strings.Contains(body, "connection limit") {
			t.Fatalf("third connection: %d %q", code, body)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		f := newFixture(t, loopbackLookup, sandgate.EgressLimits{Connections: 10, Bytes: 100 << 10})
		_, body := f.get(t, "http://127.0.0.1:"+f.port+"/big")
		if len(body) >= 1<<20 {
			t.Fatalf("got %d bytes past a 100 KiB budget", len(body))
		}
		if code, body := f.get(t, "http://127.0.0.1:"+f.port+"/"); code != http.StatusForbidden || !strings.Contains(body, "byte limit") {
			t.Fatalf("after the budget: %d %q", code, body)
		}
		sum := f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
		if total := sum.BytesSent + sum.BytesReceived; total > 100<<10 {
			t.Errorf("moved %d bytes; budget 100 KiB", total)
		}
	})
}

// TestProxyUnknownSource: a connection from an address no run holds is
// refused.
func TestProxyUnknownSource(t *testing.T) {
	f := newFixture(t, loopbackLookup, sandgate.EgressLimits{Connections: 10, Bytes: 1 << 20})
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	conn, err := d.Dial("tcp", f.addr)
	if err != nil {
		t.Skipf("cannot bind 127.0.0.2: %v", err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET http://127.0.0.1:%s/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", f.port)
	got, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(got), "HTTP/1.1 403") {
		t.Fatalf("unknown source answered %q", got)
	}
}

// TestProxyEventsBounded: 500 connections to one destination make two
// events (the first, and the aggregate with the count), whatever their
// number.
func TestProxyEventsBounded(t *testing.T) {
	f := newFixture(t, loopbackLookup, sandgate.EgressLimits{Connections: 1000, Bytes: 100 << 20})
	for i := range 500 {
		if code, _ := f.get(t, "http://127.0.0.1:"+f.port+"/"); code != 200 {
			t.Fatalf("connection %d: %d", i, code)
		}
	}
	sum := f.proxy.Unregister(netip.MustParseAddr("127.0.0.1"))
	allowed := f.events.of(sandgate.EventEgressAllowed)
	if len(allowed) != 2 {
		t.Fatalf("%d egress.allowed events for 500 connections; want 2", len(allowed))
	}
	if allowed[1].Payload["aggregated"] != true || allowed[1].Payload["connections"] != int64(499) {
		t.Errorf("aggregate = %+v", allowed[1].Payload)
	}
	if sum.ConnectionsAllowed != 500 || len(sum.Destinations) != 1 || sum.Destinations[0].Allowed != 500 {
		t.Errorf("summary = %+v", sum)
	}
}

// TestProxyBandwidth: a run's bytes per second hold across its
// connections: 3 MiB at 1 MiB/s take about two seconds past the burst.
func TestProxyBandwidth(t *testing.T) {
	f := newFixture(t, loopbackLookup, sandgate.EgressLimits{Connections: 10, Bytes: 100 << 20, BytesPerSecond: 1 << 20})
	start := time.Now()
	total := 0
	for range 3 {
		_, body := f.get(t, "http://127.0.0.1:"+f.port+"/big")
		total += len(body)
	}
	elapsed := time.Since(start)
	// The limiter lets a second's worth through at once; the rest waits.
	if want := time.Duration(float64(total-(1<<20))/float64(1<<20)*float64(time.Second)) * 9 / 10; elapsed < want {
		t.Errorf("%d bytes in %v at 1 MiB/s: want at least %v", total, elapsed, want)
	}
}

// countingDecider counts the policy's egress decisions.
type countingDecider struct {
	sandgate.EgressDecider
	mu    sync.Mutex
	calls map[string]int
}

func (d *countingDecider) DecideEgress(ctx context.Context, in sandgate.EgressInput) sandgate.EgressDecision {
	d.mu.Lock()
	d.calls[fmt.Sprintf("%s:%d", in.Host, in.Port)]++
	d.mu.Unlock()
	return d.EgressDecider.DecideEgress(ctx, in)
}

// TestProxyDecisionCached: the policy is asked once per run and
// destination, however many connections the run makes to it; another
// run asks again.
func TestProxyDecisionCached(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	dests := []string{"127.0.0.1:" + port, "upstream.test:" + port}
	dec := &countingDecider{EgressDecider: policytest.Engine(t, policytest.EgressDestinations("payments", dests...)), calls: map[string]int{}}
	p := egress.New(egress.Options{Decider: dec, Events: &events{}, SourceWait: 50 * time.Millisecond,
		Lookup: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}})
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	u, _ := url.Parse("http://" + ln.Addr().String())
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	register := func(id string) {
		err := p.Register(netip.MustParseAddr("127.0.0.1"), egress.Run{RunID: id, Team: "payments", Egress: dests,
			Private: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		if err != nil {
			t.Fatal(err)
		}
	}
	get := func(target string) {
		resp, err := client.Get(target)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", target, resp, err)
		}
		resp.Body.Close()
	}
	register("run-1")
	for range 5 {
		get("http://upstream.test:" + port + "/")
		get("http://127.0.0.1:" + port + "/")
	}
	p.Unregister(netip.MustParseAddr("127.0.0.1"))
	register("run-2")
	get("http://upstream.test:" + port + "/")
	p.Unregister(netip.MustParseAddr("127.0.0.1"))
	want := map[string]int{"upstream.test:" + port: 2, "127.0.0.1:" + port: 1}
	dec.mu.Lock()
	defer dec.mu.Unlock()
	for k, n := range want {
		if dec.calls[k] != n {
			t.Errorf("decisions for %s: %d, want %d (one per run)", k, dec.calls[k], n)
		}
	}
}
