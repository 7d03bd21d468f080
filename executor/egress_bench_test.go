package executor_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/sandgatetest"
)

// BenchmarkEgressThroughput downloads 100 MB from an upstream on this
// machine in a sandbox, through the egress proxy (network egress, the
// proxy variables) and over a plain bridge network (straight to the
// host), alternating, and reports each side's median throughput, timed by
// the upstream from its first byte written to its last, and their ratio
// (the goal is at least 0.8).
func BenchmarkEgressThroughput(b *testing.B) {
	const size = 100 << 20
	suffix := sandgatetest.RandomHex(b, 3)
	f := newEgressFixtureOn(b, "0.0.0.0:0", func(c *executor.Config) {
		// A bridge network of the benchmark's own, open to the host, so
		// that the plain side reaches the upstream directly.
		c.BridgeNetwork, c.BridgeInterface, c.BridgeHostAccess = "sgbench-br-"+suffix, "sgbb"+suffix, true
	})
	// Not b.Context(): it is cancelled before the cleanups run, which
	// left the network behind (and the daemon out of address pools).
	b.Cleanup(func() { _ = docker(b).NetworkRemove(context.Background(), "sgbench-br-"+suffix) })
	port := strconv.Itoa(f.port)
	// A bandwidth far above what the machine moves: the proxy's pacing
	// is in the path, as for every run, and never waits. Left out,
	// normalisation gives the default (64 MiB/s), which would be measured
	// instead of the proxy.
	limits := &sandgate.EgressLimits{Connections: 16, Bytes: 4 << 30, BytesPerSecond: 1 << 40}
	through := func() time.Duration {
		job := f.job(b, limits, "sh", "-c", "wget -q -O /dev/null http://127.0.0.1:"+port+"/bytes/"+strconv.Itoa(size))
		return f.timed(b, job)
	}
	direct := func() time.Duration {
		job := newJob(b, func(s *sandgate.RunSpec) { s.Network = "bridge" }, "sh", "-c",
			"gw=$(ip -4 route | awk '/default/ {print $3}'); wget -q -O /dev/null http://$gw:"+port+"/bytes/"+strconv.Itoa(size))
		return f.timed(b, job)
	}
	var proxied, bridged []time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			proxied, bridged = append(proxied, through()), append(bridged, direct())
		} else {
			bridged, proxied = append(bridged, direct()), append(proxied, through())
		}
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
	p, d := mbps(sandgatetest.Median(proxied)), mbps(sandgatetest.Median(bridged))
	b.ReportMetric(p, "proxy-MB/s")
	b.ReportMetric(d, "bridge-MB/s")
	b.ReportMetric(p/d, "ratio")
}

// timed runs job and returns how long the upstream took to serve it.
func (f *egressFixture) timed(b *testing.B, job sandgate.Job) time.Duration {
	b.Helper()
	for len(f.served) > 0 {
		<-f.served
	}
	res := execute(b, f.ex, job)
	if res.Outcome != sandgate.OutcomeSucceeded {
		b.Fatalf("download run: %s, stderr %q", res.Outcome, text(res.Stderr))
	}
	select {
	case d := <-f.served:
		return d
	default:
		b.Fatal("the upstream served no download")
	}
	return 0
}
