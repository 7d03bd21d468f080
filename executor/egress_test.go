package executor_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/policies/policytest"
	"github.com/sandgate/sandgate/sandgatetest"
)

// egressFixture is an executor whose egress network, interface and proxy
// port are the test's own, an upstream HTTP server on loopback that the
// test's data allows explicitly, and a resolver with the test's names.
type egressFixture struct {
	ex   *executor.Executor
	rec  *recorder
	port int // the upstream's
	// tlsPort is an HTTPS upstream's on loopback, which notes the server
	// name of each ClientHello in snis.
	tlsPort  int
	snis     chan string
	dests    []string
	upstream *http.Server
	// served receives how long each /bytes/N answer took to write.
	served chan time.Duration
}

// rebindLookups counts rebind.test's lookups.
var rebindLookups atomic.Int64

// lookupNames is the test's resolver: upstream.test is the loopback
// upstream, private.test a private address.
func lookupNames(_ context.Context, host string) ([]netip.Addr, error) {
	switch host {
	case "rebind.test":
		// A rebinding resolver: the loopback upstream on odd lookups,
		// the metadata address on even ones.
		if rebindLookups.Add(1)%2 == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	case "upstream.test":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	case "private.test":
		return []netip.Addr{netip.MustParseAddr("10.11.12.13")}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

func newEgressFixture(t testing.TB, tune func(*executor.Config)) *egressFixture {
	return newEgressFixtureOn(t, "127.0.0.1:0", tune)
}

// newEgressFixtureOn is newEgressFixture with the upstream listening on
// listen.
func newEgressFixtureOn(t testing.TB, listen string, tune func(*executor.Config)) *egressFixture {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("the egress network's firewall rules need root (iptables)")
	}
	executortest.RequireDocker(t)
	f := &egressFixture{served: make(chan time.Duration, 64)}
	ln, err := net.Listen("tcp4", listen)
	if err != nil {
		t.Fatal(err)
	}
	f.port = ln.Addr().(*net.TCPAddr).Port
	big := make([]byte, 1<<20)
	f.upstream = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/bytes/")); err == nil {
			w.Header().Set("Content-Length", strconv.Itoa(n))
			start := time.Now()
			for n > 0 {
				k := min(n, len(big))
				if _, err := w.Write(big[:k]); err != nil {
					return
				}
				n -= k
			}
			if fl, ok := w.(http.Flusher); ok {
				fl.Flush()
			}
			select {
			case f.served <- time.Since(start):
			default:
			}
			return
		}
		fmt.Fprintf(w, "hello-from-upstream %s\n", r.Host)
	})}
	go f.upstream.Serve(ln)
	t.Cleanup(func() { f.upstream.Close() })

	f.snis = make(chan string, 64)
	tlsUp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello-over-tls %s\n", r.Host)
	}))
	tlsUp.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		select {
		case f.snis <- h.ServerName:
		default:
		}
		return nil, nil
	}}
	tlsUp.StartTLS()
	t.Cleanup(tlsUp.Close)
	f.tlsPort = tlsUp.Listener.Addr().(*net.TCPAddr).Port

	port := strconv.Itoa(f.port)
	f.dests = []string{"rebind.test:" + port, "upstream.test:" + port, "127.0.0.1:" + port, "private.test:" + port, "169.254.169.254:80",
		"upstream.test:" + strconv.Itoa(f.tlsPort)}
	eng := policytest.Engine(t, policytest.EgressDestinations("payments", f.dests...))
	suffix := sandgatetest.RandomHex(t, 3)
	proxyPort := 20000 + int(time.Now().UnixNano()%20000)
	name, iface := "sgtest-egress-"+suffix, "sgte"+suffix
	f.ex, f.rec = newTestExecutor(t, func(c *executor.Config) {
		c.EgressNetwork, c.EgressInterface, c.EgressPort = name, iface, proxyPort
		c.EgressDecider = eng
		c.EgressLookup = lookupNames
		if tune != nil {
			tune(c)
		}
	})
	t.Cleanup(func() {
		f.ex.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if nw, err := docker(t).NetworkInspect(ctx, name, network.InspectOptions{}); err == nil {
			if len(nw.IPAM.Config) > 0 {
				gw := nw.IPAM.Config[0].Gateway
				_ = exec.Command("iptables", "-w", "-D", "INPUT", "-i", iface, "-p", "tcp", "-d", gw, "--dport", strconv.Itoa(proxyPort), "-j", "ACCEPT").Run()
			}
			_ = exec.Command("iptables", "-w", "-D", "INPUT", "-i", iface, "-j", "DROP").Run()
			_ = docker(t).NetworkRemove(ctx, name)
		}
	})
	return f
}

// job is an egress run of command, admitted for the fixture's
// destinations, with loopback allowed as the test's data says.
func (f *egressFixture) job(t testing.TB, limits *sandgate.EgressLimits, command ...string) sandgate.Job {
	j := newJob(t, func(s *sandgate.RunSpec) {
		s.Network = sandgate.NetworkEgress
		s.Egress = f.dests
		s.EgressLimits = limits
	}, command...)
	j.Enforcement.EgressPrivateCIDRs = []string{"127.0.0.1/32"}
	return j
}

// TestEgressRun: from inside the sandbox, busybox wget reaches the
// allowed upstream through the proxy variables; a host not in the list, a
// raw IP not listed, the metadata address and a name resolving to a
// private address are refused and recorded; a connection that ignores
// the proxy reaches nothing (the network is internal, the host fenced).
func TestEgressRun(t *testing.T) {
	f := newEgressFixture(t, nil)
	// A service of the host's on every address, which a run that ignores
	// the proxy would try.
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "host-service\n")
			c.Close()
		}
	}()
	hostPort := hostLn.Addr().(*net.TCPAddr).Port
	p := strconv.Itoa(f.port)
	script := strings.Join([]string{
		`echo proxy=$HTTP_PROXY`,
		`timeout 10 wget -q -O - http://upstream.test:` + p + `/ && echo OK-name`,
		`timeout 10 wget -q -O - http://127.0.0.1:` + p + `/ && echo OK-ip`,
		`timeout 10 wget -q -O - http://other.test:` + p + `/ && echo LEAK-other`,
		`timeout 10 wget -q -O - http://127.0.0.2:` + p + `/ && echo LEAK-rawip`,
		`timeout 10 wget -q -O - http://169.254.169.254/latest/meta-data/ && echo LEAK-metadata`,
		`timeout 10 wget -q -O - http://private.test:` + p + `/ && echo LEAK-private`,
		`gw=${HTTP_PROXY#http://}; gw=${gw%:*}`,
		`timeout 5 wget -Y off -q -O - http://$gw:` + strconv.Itoa(hostPort) + `/ && echo LEAK-direct-wget`,
		`nc -w 3 $gw ` + strconv.Itoa(hostPort) + ` </dev/null && echo LEAK-direct-nc`,
		`timeout 8 nslookup upstream.test && echo LEAK-dns`,
		`true`,
	}, "; ")
	job := f.job(t, nil, "sh", "-c", script)
	res := execute(t, f.ex, job)
	out := text(res.Stdout)
	for _, want := range []string{"hello-from-upstream upstream.test", "OK-name", "OK-ip", "proxy=http://"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, out, text(res.Stderr))
		}
	}
	if strings.Contains(out, "LEAK") || strings.Contains(out, "host-service") {
		t.Errorf("a refused connection went through:\n%s", out)
	}
	reasons := map[string]bool{}
	for _, ev := range f.rec.of(job.RunID) {
		if ev.Type == sandgate.EventEgressDenied {
			reasons[fmt.Sprint(ev.Payload["reason"])] = true
			if ev.CorrelationID != job.CorrelationID {
				t.Errorf("egress.denied without the run's correlation id: %+v", ev)
			}
		}
	}
	for _, want := range []string{egress.ReasonNotAdmitted, egress.ReasonLinkLocal, egress.ReasonPrivate} {
		if !reasons[want] {
			t.Errorf("no egress.denied with reason %s; got %v", want, reasons)
		}
	}
	if s := res.Egress; s == nil || s.ConnectionsAllowed != 2 || s.ConnectionsDenied < 4 || s.BytesReceived == 0 {
		t.Errorf("egress summary = %+v", res.Egress)
	}

	// Python's urllib follows the same variables, when the image is here.
	t.Run("python", func(t *testing.T) {
		img := executortest.RequireRecipeImage(t, "python")
		pj := f.job(t, nil, "python3", "-c", fmt.Sprintf(`
import os, socket, urllib.request, urllib.error
print(urllib.request.urlopen('http://upstream.test:%[1]d/', timeout=5).read().decode())
for url in ['http://169.254.169.254/latest/meta-data/', 'http://127.0.0.2:%[1]d/', 'http://private.test:%[1]d/']:
    try:
        urllib.request.urlopen(url, timeout=5); print('LEAK', url)
    except urllib.error.HTTPError as e:
        print('refused', e.code, url)
gw = os.environ['HTTP_PROXY'][len('http://'):].rsplit(':', 1)[0]
try:
    socket.create_connection((gw, %[2]d), timeout=3); print('LEAK-direct')
except OSError as e:
    print('direct refused', type(e).__name__)
`, f.port, hostPort))
		pj.Spec.Image = img.Image
		res := execute(t, f.ex, pj)
		out := text(res.Stdout)
		if !strings.Contains(out, "hello-from-upstream") || strings.Count(out, "refused 403") != 3 || !strings.Contains(out, "direct refused") || strings.Contains(out, "LEAK") {
			t.Errorf("python urllib: stdout %q stderr %q", out, text(res.Stderr))
		}
		reasons := map[any]bool{}
		for _, ev := range f.rec.of(pj.RunID) {
			if ev.Type == sandgate.EventEgressDenied {
				reasons[ev.Payload["reason"]] = true
			}
		}
		for _, want := range []string{egress.ReasonLinkLocal, egress.ReasonNotAdmitted, egress.ReasonPrivate} {
			if !reasons[want] {
				t.Errorf("python: no egress.denied with reason %s; got %v", want, reasons)
			}
		}
	})

	// HTTPS through the proxy from Python: urllib's CONNECT with the
	// target's name in the ClientHello reaches the TLS upstream; a
	// tunnel to the same admitted target whose ClientHello names
	// another server (domain fronting) is cut before the upstream sees
	// it, and recorded.
	t.Run("python tls", func(t *testing.T) {
		img := executortest.RequireRecipeImage(t, "python")
		tp := strconv.Itoa(f.tlsPort)
		pj := f.job(t, nil, "python3", "-c", `
import os, socket, ssl, urllib.request
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE  # the test's own upstream
print(urllib.request.urlopen('https://upstream.test:`+tp+`/', timeout=10, context=ctx).read().decode().strip(), 'OK-urllib')
host, port = os.environ['HTTPS_PROXY'][len('http://'):].rsplit(':', 1)
s = socket.create_connection((host, int(port)), timeout=10)
s.sendall(b'CONNECT upstream.test:`+tp+` HTTP/1.1\r\nHost: upstream.test:`+tp+`\r\n\r\n')
print(s.recv(200).split(b'\r\n')[0].decode())
try:
    t = ctx.wrap_socket(s, server_hostname='fronted.example')
    t.sendall(b'GET / HTTP/1.1\r\nHost: fronted.example\r\nConnection: close\r\n\r\n')
    print('LEAK-fronted', t.recv(200))
except Exception as e:
    print('fronted refused', type(e).__name__)
`)
		pj.Spec.Image = img.Image
		res := execute(t, f.ex, pj)
		out := text(res.Stdout)
		if !strings.Contains(out, "hello-over-tls upstream.test") || !strings.Contains(out, "OK-urllib") ||
			!strings.Contains(out, "fronted refused") || strings.Contains(out, "LEAK") {
			t.Errorf("python tls: stdout %q stderr %q", out, text(res.Stderr))
		}
		close(f.snis)
		for sni := range f.snis {
			if sni != "upstream.test" {
				t.Errorf("the TLS upstream was sent a ClientHello naming %q", sni)
			}
		}
		var fronted bool
		for _, ev := range f.rec.of(pj.RunID) {
			if ev.Type == sandgate.EventEgressDenied && ev.Payload["reason"] == egress.ReasonSNIMismatch && ev.CorrelationID == pj.CorrelationID {
				fronted = true
			}
		}
		if !fronted {
			t.Errorf("no egress.denied with reason sni_mismatch for the fronted tunnel")
		}
	})
}

// TestEgressLimits: a run's connection count and byte budget hold inside
// the sandbox.
func TestEgressLimits(t *testing.T) {
	f := newEgressFixture(t, nil)
	p := strconv.Itoa(f.port)
	job := f.job(t, &sandgate.EgressLimits{Connections: 3, Bytes: 256 << 10},
		"sh", "-c", `for i in 1 2 3 4; do timeout 10 wget -q -O /dev/null http://upstream.test:`+p+`/ && echo ok$i; done; `+
			`timeout 10 wget -q -O - http://127.0.0.1:`+p+`/bytes/1048576 | wc -c`)
	res := execute(t, f.ex, job)
	out := text(res.Stdout)
	if !strings.Contains(out, "ok3") || strings.Contains(out, "ok4") {
		t.Errorf("connection limit 3: %q", out)
	}
	s := res.Egress
	if s == nil || s.ConnectionsAllowed != 3 || s.BytesSent+s.BytesReceived > 256<<10 {
		t.Errorf("summary = %+v", s)
	}
	limited := 0
	for _, ev := range f.rec.of(job.RunID) {
		if ev.Type == sandgate.EventEgressDenied && ev.Payload["reason"] == egress.ReasonConnectionLimit {
			limited++
		}
	}
	if limited == 0 {
		t.Errorf("no egress.denied for the connection limit")
	}
}

// TestEgressDNSRebindingAndBoundedEvents: inside the sandbox, a name whose
// resolver answers the allowed upstream first and the metadata address
// next is connected to the first, checked answer (one lookup per
// connection); and a run that opens 500 connections to one destination
// leaves two egress.allowed events, the second an aggregate counting 499.
func TestEgressDNSRebindingAndBoundedEvents(t *testing.T) {
	// Aggregates are recorded at the run's end only, whatever its speed.
	f := newEgressFixture(t, func(c *executor.Config) { c.EgressAggregate = time.Hour })
	p := strconv.Itoa(f.port)
	before := rebindLookups.Load()
	job := f.job(t, &sandgate.EgressLimits{Connections: 600, Bytes: 64 << 20}, "sh", "-c",
		`wget -q -O - http://rebind.test:`+p+`/ && echo OK-rebind; `+
			`wget -q -O - http://rebind.test:`+p+`/ && echo LEAK-rebind; `+
			`i=0; ok=0; while [ $i -lt 500 ]; do wget -q -O /dev/null http://upstream.test:`+p+`/ && ok=$((ok+1)); i=$((i+1)); done; echo ok=$ok`)
	job.Spec.TimeoutSeconds = 240
	res := execute(t, f.ex, job)
	out := text(res.Stdout)
	if !strings.Contains(out, "hello-from-upstream rebind.test") || !strings.Contains(out, "OK-rebind") || strings.Contains(out, "LEAK") || !strings.Contains(out, "ok=500") {
		t.Fatalf("stdout %q stderr %q", out, text(res.Stderr))
	}
	if n := rebindLookups.Load() - before; n != 2 {
		t.Errorf("rebind.test resolved %d times for two connections; want once each", n)
	}
	rebound := false
	for _, ev := range f.rec.of(job.RunID) {
		if ev.Type == sandgate.EventEgressDenied && ev.Payload["host"] == "rebind.test" && ev.Payload["reason"] == egress.ReasonLinkLocal &&
			ev.Payload["address"] == "169.254.169.254" && ev.CorrelationID == job.CorrelationID {
			rebound = true
		}
	}
	if !rebound {
		t.Errorf("the connection whose lookup answered the metadata address was not refused and recorded as link_local")
	}
	var single, aggregated int
	for _, ev := range f.rec.of(job.RunID) {
		if ev.Type != sandgate.EventEgressAllowed || ev.Payload["host"] != "upstream.test" {
			continue
		}
		if ev.Payload["aggregated"] == true {
			aggregated++
			if ev.Payload["connections"] != int64(499) {
				t.Errorf("aggregate counts %v connections; want 499", ev.Payload["connections"])
			}
		} else {
			single++
		}
	}
	if single != 1 || aggregated != 1 {
		t.Errorf("500 connections made %d single and %d aggregate events; want 1 and 1", single, aggregated)
	}
	if s := res.Egress; s == nil || s.ConnectionsAllowed != 501 || s.ConnectionsDenied != 1 || s.Destinations[0].Host != "upstream.test" || s.Destinations[0].Allowed != 500 {
		t.Errorf("summary %+v", res.Egress)
	}
}

// TestEgressRunsCannotReachEachOther: run A, on the egress network,
// listens on a port; run B, on the same network, cannot connect to it
// (inter-container communication is off), nor through the proxy (A's
// address is not among B's destinations).
func TestEgressRunsCannotReachEachOther(t *testing.T) {
	f := newEgressFixture(t, nil)
	listener := f.job(t, nil, "sh", "-c", "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1; nc -l -p 8080 -e echo reached-A")
	addr := make(chan string, 1)
	var out strings.Builder
	var once sync.Once
	listener.Output = func(_ sandgate.Stream, p []byte) {
		out.Write(p)
		if s := out.String(); strings.HasSuffix(s, "\n") {
			once.Do(func() { addr <- strings.TrimSpace(s) })
		}
	}
	done := executeAsync(t, f.ex, listener)
	ip := await(t, addr, done, "run A's address")
	if net.ParseIP(ip) == nil {
		t.Fatalf("run A printed %q, not an address", ip)
	}
	probe := f.job(t, nil, "sh", "-c", fmt.Sprintf(
		"nc -w 3 %[1]s 8080 && echo A-REACHED; timeout 10 wget -q -O - http://%[1]s:8080/ && echo A-PROXIED; true", ip))
	res := execute(t, f.ex, probe)
	if strings.Contains(text(res.Stdout), "reached-A") || strings.Contains(text(res.Stdout), "A-REACHED") || strings.Contains(text(res.Stdout), "A-PROXIED") {
		t.Errorf("run B reached run A: %q", text(res.Stdout))
	}
	if s := res.Egress; s == nil || s.ConnectionsDenied != 1 {
		t.Errorf("run B's egress summary %+v, want its proxied attempt refused", res.Egress)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := f.ex.Cancel(ctx, listener.RunID); err != nil {
		t.Fatal(err)
	}
	<-done
}
