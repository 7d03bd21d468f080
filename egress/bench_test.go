package egress_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// BenchmarkEgressConnectLatency opens TCP connections to a loopback
// upstream, alternately straight and through the proxy (CONNECT, until
// the 200), and reports the p50 and p99 of each and what the proxy adds:
// reading the request, the admitted-list check, the policy decision
// (evaluated once per destination, then cached), the address checks and
// the connect to the checked address.
func BenchmarkEgressConnectLatency(b *testing.B) {
	f := newFixture(b, loopbackLookup, sandgate.EgressLimits{Connections: 1 << 40, Bytes: 1 << 40})
	upstream := "127.0.0.1:" + f.port
	direct := func() time.Duration {
		start := time.Now()
		c, err := net.Dial("tcp", upstream)
		took := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		return took
	}
	proxied := func() time.Duration {
		start := time.Now()
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", upstream, upstream)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		took := time.Since(start)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("CONNECT: %v %v", resp, err)
		}
		c.Close()
		return took
	}
	var ds, ps []time.Duration
	b.ResetTimer()
	for range b.N {
		ds = append(ds, direct())
		ps = append(ps, proxied())
	}
	b.StopTimer()
	q := quantile
	b.ReportMetric(q(ds, 0.5), "direct-p50-µs")
	b.ReportMetric(q(ds, 0.99), "direct-p99-µs")
	b.ReportMetric(q(ps, 0.5), "proxy-p50-µs")
	b.ReportMetric(q(ps, 0.99), "proxy-p99-µs")
}

// BenchmarkEgressTLSConnectLatency is BenchmarkEgressConnectLatency for
// HTTPS: TLS handshakes with a loopback upstream, alternately straight
// and through a CONNECT tunnel, whose ClientHello the proxy reads whole
// and checks (readClientHello: its records, its form, the server name
// against the target) before it relays anything. It reports the p50 and p99 of each, until the handshake is done.
func BenchmarkEgressTLSConnectLatency(b *testing.B) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	f := newFixture(b, loopbackLookup, sandgate.EgressLimits{Connections: 1 << 40, Bytes: 1 << 40}, "upstream.test:"+port)
	cfg := &tls.Config{ServerName: "upstream.test", InsecureSkipVerify: true} // the benchmark's own server
	hs := func(c net.Conn, start time.Time) time.Duration {
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		tc.Close()
		return took
	}
	direct := func() time.Duration {
		start := time.Now()
		c, err := net.Dial("tcp", up.Listener.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		return hs(c, start)
	}
	proxied := func() time.Duration {
		start := time.Now()
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT upstream.test:%s HTTP/1.1\r\nHost: upstream.test:%s\r\n\r\n", port, port)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("CONNECT: %v %v", resp, err)
		}
		return hs(c, start)
	}
	var ds, ps []time.Duration
	b.ResetTimer()
	for range b.N {
		ds = append(ds, direct())
		ps = append(ps, proxied())
	}
	b.StopTimer()
	b.ReportMetric(quantile(ds, 0.5), "direct-p50-µs")
	b.ReportMetric(quantile(ds, 0.99), "direct-p99-µs")
	b.ReportMetric(quantile(ps, 0.5), "proxy-p50-µs")
	b.ReportMetric(quantile(ps, 0.99), "proxy-p99-µs")
}

// quantile is the p-quantile of s in microseconds.
func quantile(s []time.Duration, p float64) float64 {
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[min(len(s)-1, int(float64(len(s))*p))].Microseconds())
}
