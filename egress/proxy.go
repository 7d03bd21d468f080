package egress

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/sandgate/sandgate"
)

// The reasons a connection is denied, as events and metrics name them
// (besides the address reasons of AddrError).
const (
	ReasonUnknownSource   = "unknown_source"
	ReasonBadRequest      = "bad_request"
	ReasonNotAdmitted     = "not_admitted"
	ReasonPolicy          = "policy"
	ReasonConnectionLimit = "connection_limit"
	ReasonByteLimit       = "byte_limit"
	ReasonResolve         = "resolve_failed"
	ReasonConnect         = "connect_failed"
	ReasonTooManyOpen     = "too_many_open"
)

// Defaults of Options.
const (
	DefaultAggregateEvery = 10 * time.Second
	DefaultDialTimeout    = 10 * time.Second
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultSourceWait     = 2 * time.Second
	// MaxHeaderBytes bounds a request's head. Bytes are relayed through
	// the kernel (splice); copyBuffer is the buffer of a copy where they
	// cannot be, and the least burst of a run's bandwidth.
	MaxHeaderBytes = 32 << 10
	copyBuffer     = 32 << 10
	// MaxOpen is how many sockets (to the run and to its destinations)
	// a run may hold open through the proxy at once: what bounds the
	// proxy's memory for one run, whatever its limits.
	MaxOpen = 512
	// MaxDestinations is how many destinations a run's aggregates keep
	// apart; the others are counted together under OtherHost.
	MaxDestinations = 256
	OtherHost       = "(other)"
)

// Metrics are told of each connection's result and of the bytes moved.
type Metrics interface {
	// Connection counts a connection: result "allowed" or "denied", and
	// for a denied one its reason.
	Connection(result, reason string)
	// Bytes counts bytes moved, direction "sent" (to the destination) or
	// "received".
	Bytes(direction string, n int64)
}

// Options configure a Proxy.
type Options struct {
	// Decider is the policy's egress decision; required.
	Decider sandgate.EgressDecider
	// Events receives egress.allowed and egress.denied; required.
	Events sandgate.EventSink
	// Lookup resolves names; default SystemLookup. Tests inject theirs.
	Lookup Lookup
	// Metrics, when set, counts connections and bytes.
	Metrics Metrics
	// Node names this node in events.
	Node string
	// AggregateEvery is how often a run's repeated connections to a
	// destination are recorded, as one event with counts. Default
	// DefaultAggregateEvery.
	AggregateEvery time.Duration
	// DialTimeout bounds resolving and connecting. Default
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// UpstreamRoots verify the destinations of the connections of runs
	// with secrets, whose TLS the proxy opens itself; nil is the host's
	// roots.
	UpstreamRoots *x509.CertPool
	// TLSPorts are the ports a secret is written to over TLS alone: a
	// request in the clear (plain HTTP, or HTTP in a tunnel) to a
	// destination a secret is bound to on one of them is refused, so
	// that a run cannot have the value sent unencrypted to an HTTPS
	// destination. Default DefaultTLSPorts.
	TLSPorts []int
	// SourceWait is how long a connection from an address no run holds
	// waits for a run to be registered there (its container may start
	// before the executor has learnt its address). Default
	// DefaultSourceWait.
	SourceWait time.Duration
	Now        func() time.Time
	Log        *slog.Logger
}

// Run is what the proxy knows of a registered run.
type Run struct {
	RunID, CorrelationID, DecisionID, Principal, Team, PolicyRevision string
	// SessionID is set for a session's container: its ID is RunID, and
	// every command of the session connects from its one address, so the
	// session, not a command, is what its connections are recorded
	// against (docs/egress.md).
	SessionID string
	// Egress is the run's admitted list, normalised.
	Egress []string
	Limits sandgate.EgressLimits
	// Private are the loopback and private prefixes the run may reach.
	Private []netip.Prefix
	// Secrets are what the proxy writes into the run's requests
	// (docs/secrets.md); with them, CA is required: the run's authority,
	// whose certificate the run trusts, with which the proxy terminates
	// every TLS tunnel of the run to read its requests.
	Secrets []Secret
	CA      *RunCA
}

// Proxy is the egress proxy: one listener, the registry of run addresses
// and what each run has done. Create it with New, Serve a listener,
// Register each run's address before its container can connect and
// Unregister it when the container has ended.
type Proxy struct {
	opt    Options
	dialer net.Dialer

	mu      sync.Mutex
	runs    map[netip.Addr]*runState
	changed chan struct{}
	lns     []net.Listener
	closed  bool

	stop chan struct{}
	wg   sync.WaitGroup
}

// New makes a proxy and starts its aggregation ticker.
func New(opt Options) *Proxy {
	if opt.Lookup == nil {
		opt.Lookup = SystemLookup
	}
	if opt.AggregateEvery <= 0 {
		opt.AggregateEvery = DefaultAggregateEvery
	}
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = DefaultDialTimeout
	}
	if opt.SourceWait <= 0 {
		opt.SourceWait = DefaultSourceWait
	}
	if opt.TLSPorts == nil {
		opt.TLSPorts = DefaultTLSPorts
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		opt: opt, runs: map[netip.Addr]*runState{}, changed: make(chan struct{}), stop: make(chan struct{}),
		dialer: net.Dialer{Timeout: opt.DialTimeout, Control: func(_, address string, _ syscall.RawConn) error {
			// The last word: whatever chose the address, a socket to
			// one that is always refused is never connected.
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("cannot check address %s", address)
			}
			return CheckAlways(ap.Addr())
		}},
	}
	p.wg.Add(1)
	go p.flushLoop()
	return p
}

// Register makes src the address of run r. An address another run holds
// is an error: the executor unregisters a run before its address can be
// given to another container.
func (p *Proxy) Register(src netip.Addr, r Run) error {
	src = src.Unmap()
	dests := make([]sandgate.EgressDestination, 0, len(r.Egress))
	for _, e := range r.Egress {
		d, err := sandgate.ParseEgressDestination(e)
		if err != nil {
			return fmt.Errorf("run %s: egress %s", r.RunID, err)
		}
		dests = append(dests, d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if other, ok := p.runs[src]; ok {
		return fmt.Errorf("egress: address %s is already run %s's", src, other.run.RunID)
	}
	secrets, err := newSecretSet(r.Secrets)
	if err != nil {
		return fmt.Errorf("run %s: %w", r.RunID, err)
	}
	if secrets != nil && r.CA == nil {
		return fmt.Errorf("run %s: a run with secrets needs its certificate authority", r.RunID)
	}
	st := &runState{run: r, dests: dests, aggs: map[destKey]*agg{}, decisions: map[string]sandgate.EgressDecision{}, conns: map[net.Conn]struct{}{},
		secrets: secrets, ca: r.CA, secretRec: &secretRecord{aggs: map[secretKey]*secretAgg{}}}
	st.run.Secrets = nil // the values live in secrets alone
	st.bytesLeft.Store(r.Limits.Bytes)
	if r.Limits.Bytes <= 0 {
		st.bytesLeft.Store(math.MaxInt64)
	}
	if bps := r.Limits.BytesPerSecond; bps > 0 {
		// A burst of one copy buffer (or one second's worth, when that is
		// more) lets every write through whole, at the run's rate.
		st.bandwidth = rate.NewLimiter(rate.Limit(bps), int(max(bps, copyBuffer)))
	}
	p.runs[src] = st
	close(p.changed)
	p.changed = make(chan struct{})
	return nil
}

// Unregister forgets the run at src: its open connections are closed,
// its pending aggregates recorded, and its summary returned (nil when no
// run was registered there).
func (p *Proxy) Unregister(src netip.Addr) *sandgate.EgressSummary {
	src = src.Unmap()
	p.mu.Lock()
	st, ok := p.runs[src]
	delete(p.runs, src)
	p.mu.Unlock()
	if !ok {
		return nil
	}
	st.mu.Lock()
	st.ended = true
	conns := make([]net.Conn, 0, len(st.conns))
	for c := range st.conns {
		conns = append(conns, c)
	}
	st.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	st.active.Wait()
	p.flush(st)
	return st.summary()
}

// Serve accepts connections on ln until it is closed.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	p.lns = append(p.lns, ln)
	p.mu.Unlock()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(conn)
		}()
	}
}

// Close stops the listeners and the ticker and waits for the
// connections, which registered runs' Unregister ends.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	lns := p.lns
	runs := make([]netip.Addr, 0, len(p.runs))
	for a := range p.runs {
		runs = append(runs, a)
	}
	p.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, a := range runs {
		p.Unregister(a)
	}
	close(p.stop)
	p.wg.Wait()
	return nil
}

// lookup is the run registered at src, waiting up to SourceWait for one.
func (p *Proxy) lookup(src netip.Addr) *runState {
	deadline := time.NewTimer(p.opt.SourceWait)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		st, changed := p.runs[src], p.changed
		p.mu.Unlock()
		if st != nil {
			return st
		}
		select {
		case <-changed:
		case <-deadline.C:
			return nil
		case <-p.stop:
			return nil
		}
	}
}

// conn is one connection's record.
type conn struct {
	host        string
	port        int
	addr        netip.Addr
	start       time.Time
	sent, recv  atomic.Int64
	reason, msg string
	revision    string
}

func (p *Proxy) handle(c net.Conn) {
	defer c.Close()
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return
	}
	src := ap.Addr().Unmap()
	st := p.lookup(src)
	if st == nil {
		p.count("denied", ReasonUnknownSource)
		p.opt.Log.Warn("egress connection from an address no run holds", "source", src)
		refuse(c, http.StatusForbidden, "sandgate egress: this address belongs to no egress run")
		return
	}
	if !st.enter(c) {
		p.count("denied", ReasonTooManyOpen)
		refuse(c, http.StatusTooManyRequests, "sandgate egress: too many open connections")
		return
	}
	defer st.active.Done()
	defer st.untrack(c)

	rec := &conn{start: p.opt.Now()}
	_ = c.SetReadDeadline(time.Now().Add(DefaultHeaderTimeout))
	raw := &headRecorder{max: MaxHeaderBytes + 4096}
	head := &io.LimitedReader{R: io.TeeReader(c, raw), N: MaxHeaderBytes}
	br := bufio.NewReaderSize(head, 4096)
	req, err := http.ReadRequest(br)
	raw.stopped = true
	if err != nil {
		rec.reason, rec.msg = ReasonBadRequest, "no proxy request could be read"
		p.denied(st, rec)
		refuse(c, http.StatusBadRequest, "sandgate egress: send an HTTP CONNECT or an absolute-URI HTTP request")
		return
	}
	head.N = math.MaxInt64
	_ = c.SetReadDeadline(time.Time{})

	hostport, err := target(req)
	if err != nil {
		rec.reason, rec.msg = ReasonBadRequest, err.Error()
		p.denied(st, rec)
		refuse(c, http.StatusBadRequest, "sandgate egress: "+err.Error())
		return
	}
	if req.Method != http.MethodConnect {
		if err := checkHost(raw.hostHeader(), hostport); err != nil {
			rec.host, rec.port = hostPortOf(hostport)
			rec.reason, rec.msg = ReasonHostMismatch, err.Error()
			p.denied(st, rec)
			refuse(c, http.StatusForbidden, fmt.Sprintf("sandgate egress: %s refused: %s", hostport, rec.msg))
			return
		}
	}
	upstream, status := p.admit(st, rec, hostport)
	if upstream == nil {
		p.denied(st, rec)
		refuse(c, status, fmt.Sprintf("sandgate egress: %s:%d refused: %s", rec.host, rec.port, rec.msg))
		return
	}
	defer upstream.Close()
	st.trackUp(upstream)
	defer st.untrack(upstream)

	up := &counted{Conn: upstream, n: &rec.sent, st: st, p: p, dir: "sent"}
	down := &counted{Conn: c, n: &rec.recv, st: st, p: p, dir: "received"}
	connected := false
	if st.secrets != nil {
		if p.intercept(st, rec, c, br, upstream, up, down, req) {
			p.ended(st, rec)
			return
		}
		connected = true // a tunnel relayed unread, its 200 sent
	}
	p.pipe(st, rec, c, br, upstream, up, down, req, connected)
	p.ended(st, rec)
}

// hostPortOf is hostport's host, as events name it, and port; for a
// request refused before admit parsed it.
func hostPortOf(hostport string) (string, int) {
	h, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, 0
	}
	port, _ := strconv.Atoi(ps)
	return strings.ToLower(h), port
}

// target is the host:port a proxy request asks for: a CONNECT's
// authority, or a plain request's absolute http URL (port 80 by default).
func target(req *http.Request) (string, error) {
	if req.Method == http.MethodConnect {
		if req.Host == "" {
			return "", errors.New("CONNECT needs host:port")
		}
		return req.Host, nil
	}
	if !req.URL.IsAbs() || req.URL.Host == "" {
		return "", errors.New("a plain HTTP request through the proxy needs an absolute http:// URL")
	}
	if req.URL.Scheme != "http" {
		return "", fmt.Errorf("scheme %q: use CONNECT for anything but plain http", req.URL.Scheme)
	}
	if req.URL.Port() == "" {
		return net.JoinHostPort(req.URL.Hostname(), "80"), nil
	}
	return req.URL.Host, nil
}

// admit checks one connection of st to hostport and connects it, or
// says why not (rec.reason, rec.msg) with the status to answer.
func (p *Proxy) admit(st *runState, rec *conn, hostport string) (net.Conn, int) {
	deny := func(status int, reason, format string, args ...any) (net.Conn, int) {
		rec.reason, rec.msg = reason, fmt.Sprintf(format, args...)
		return nil, status
	}
	host, portStr, err := net.SplitHostPort(hostport)
	rec.host = strings.ToLower(host)
	if err != nil {
		rec.host = hostport
		return deny(http.StatusBadRequest, ReasonBadRequest, "%q is not host:port", hostport)
	}
	dest, err := sandgate.ParseEgressDestination(canonHostPort(host, portStr))
	if err != nil || dest.Wildcard() || (dest.Prefix.IsValid() && !dest.Prefix.IsSingleIP()) {
		return deny(http.StatusBadRequest, ReasonBadRequest, "%q is not a host name or address with a port", hostport)
	}
	rec.port = dest.Port
	rec.host = dest.Host
	if dest.Prefix.IsValid() {
		rec.host = dest.Prefix.Addr().String()
	}
	matchHost := rec.host
	if !slices.ContainsFunc(st.dests, func(d sandgate.EgressDestination) bool { return d.Matches(matchHost, dest.Port, netip.Addr{}) }) {
		return deny(http.StatusForbidden, ReasonNotAdmitted, "not in the run's admitted egress list")
	}
	if st.bytesLeft.Load() <= 0 {
		return deny(http.StatusForbidden, ReasonByteLimit, "the run's egress byte limit (%d) is used up", st.run.Limits.Bytes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.opt.DialTimeout)
	defer cancel()
	addrs, _, err := Resolve(ctx, p.opt.Lookup, rec.host)
	if err != nil {
		return deny(http.StatusBadGateway, ReasonResolve, "%v", err)
	}
	// Every address is checked before the policy sees them; the policy
	// is asked about the accepted ones.
	accepted := make([]netip.Addr, 0, len(addrs))
	var firstErr error
	for _, a := range addrs {
		if err := CheckPublic(a, st.run.Private); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		accepted = append(accepted, a)
	}
	if len(accepted) == 0 {
		var ae *AddrError
		if errors.As(firstErr, &ae) {
			rec.addr = ae.Addr
			return deny(http.StatusForbidden, ae.Reason, "%v", ae)
		}
		return deny(http.StatusForbidden, ReasonPrivate, "%v", firstErr)
	}
	d := st.decide(ctx, p.opt.Decider, rec.host, rec.port, accepted)
	rec.revision = d.PolicyRevision
	if !d.Allow {
		rec.addr = accepted[0]
		return deny(http.StatusForbidden, ReasonPolicy, "%s", strings.Join(d.Reasons, "; "))
	}
	// Only connections the proxy is about to make count against the
	// run's limit; refused ones are bounded by the events' aggregation.
	if !st.takeConnection() {
		return deny(http.StatusForbidden, ReasonConnectionLimit, "the run's egress connection limit (%d) is reached", st.run.Limits.Connections)
	}
	up, addr, err := DialChecked(ctx, &p.dialer, "tcp", accepted, uint16(rec.port), func(a netip.Addr) error {
		return CheckPublic(a, st.run.Private)
	})
	rec.addr = addr
	if err != nil {
		if len(accepted) > 0 && !rec.addr.IsValid() {
			rec.addr = accepted[0]
		}
		return deny(http.StatusBadGateway, ReasonConnect, "%v", err)
	}
	return up, 0
}

// canonHostPort is host:port with an IPv6 address in brackets.
func canonHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + strings.ToLower(host) + "]:" + port
	}
	return strings.ToLower(host) + ":" + port
}

// forward sends a plain-HTTP request upstream in origin form, asking the
// upstream to close after its answer.
func forward(w io.Writer, req *http.Request) {
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.Close = true
	req.RequestURI = ""
	_ = req.Write(w)
}

// refuse answers a refused request and ends the connection.
func refuse(c net.Conn, status int, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	body := msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

func (p *Proxy) count(result, reason string) {
	if p.opt.Metrics != nil {
		p.opt.Metrics.Connection(result, reason)
	}
}

func (p *Proxy) denied(st *runState, rec *conn) {
	p.count("denied", rec.reason)
	p.record(st, rec, false)
}

func (p *Proxy) allowed(st *runState, rec *conn) {
	p.count("allowed", "")
	p.record(st, rec, true)
}

// itoa is strconv.Itoa, for the destination keys.
var itoa = strconv.Itoa
