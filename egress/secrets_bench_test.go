package egress_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// BenchmarkSecretInjectedLatency measures what injecting a secret adds
// to an HTTPS request through the proxy: alternately a request to a
// destination without a secret (a CONNECT tunnel the proxy relays, TLS
// end to end with the upstream) and one to a destination with a secret
// (the run's TLS terminated with its authority, the request read, the
// placeholder checked and the header written, TLS opened again to the
// upstream and verified, the answer scrubbed), both to loopback echo
// upstreams. "new" opens a connection for each request (both
// handshakes counted); "kept" reuses one connection. It reports the p50
// and p99 of each and the added p50.
func BenchmarkSecretInjectedLatency(b *testing.B) {
	f := newSecretFixture(b, true)
	u, _ := url.Parse("http://" + f.addr)
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Certificate())
	pool.AddCert(f.upCA.Certificate())
	client := func(keep bool) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u),
			DisableKeepAlives: !keep, TLSClientConfig: &tls.Config{RootCAs: pool}}}
	}
	plainURL, injectedURL := "https://"+f.dOther+"/echo", "https://"+f.dApi+"/echo"
	hdr := map[string]string{"Authorization": "Bearer " + placeholder}
	for _, keep := range []bool{false, true} {
		name := map[bool]string{false: "new", true: "kept"}[keep]
		b.Run(name, func(b *testing.B) {
			c := client(keep)
			timed := func(target string, h map[string]string) time.Duration {
				start := time.Now()
				status, body, _ := f.do(b, c, http.MethodGet, target, h)
				took := time.Since(start)
				if status != http.StatusOK || leaks(body) {
					b.Fatalf("%s: %d %s", target, status, body)
				}
				return took
			}
			var ps, is []time.Duration
			b.ResetTimer()
			for range b.N {
				ps = append(ps, timed(plainURL, nil))
				is = append(is, timed(injectedURL, hdr))
			}
			b.StopTimer()
			pp, ip := quantile(ps, 0.5), quantile(is, 0.5)
			b.ReportMetric(pp, "plain-p50-µs")
			b.ReportMetric(quantile(ps, 0.99), "plain-p99-µs")
			b.ReportMetric(ip, "injected-p50-µs")
			b.ReportMetric(quantile(is, 0.99), "injected-p99-µs")
			b.ReportMetric(ip-pp, "added-p50-µs")
		})
	}
}
