package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/egress"
)

// The headers of a completion callback. The signature is
// "v1=" + hex(HMAC-SHA256(key, timestamp + "." + body)); docs/workspaces.md
// shows a receiver how to check it.
const (
	HeaderCallbackRunID     = "X-Sandgate-Run-ID"
	HeaderCallbackTimestamp = "X-Sandgate-Timestamp"
	HeaderCallbackSignature = "X-Sandgate-Signature"
)

// The reasons a callback.failed event gives.
const (
	callbackRefused   = "refused"   // the address, the URL or an answer ruled out (another) attempt
	callbackExhausted = "exhausted" // every attempt failed
	callbackShutdown  = "shutdown"  // the gateway stopped before it was delivered
	callbackOverflow  = "overflow"  // too many callbacks were waiting
)

// maxCallbackAnswer is how much of a receiver's answer is read (and
// thrown away) so that its connection can be reused.
const maxCallbackAnswer = 64 << 10

// SignCallback returns the X-Sandgate-Signature value of a callback body
// sent at timestamp (unix seconds): "v1=" and the hex HMAC-SHA256, keyed
// with key, of the timestamp, a dot and the body.
func SignCallback(key []byte, timestamp string, body []byte) string {
	return sandgate.SignHMAC(key, timestamp, body)
}

// callbackOptions configure the callbacks owner; zero fields take the
// defaults of Config.
type callbackOptions struct {
	key      []byte
	attempts int
	timeout  time.Duration
	backoff  time.Duration
	workers  int
	queue    int
	// lookup resolves a host name; nil is the system resolver.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	events sandgate.EventSink
	now    func() time.Time
	node   string
	log    *slog.Logger
	// delivered counts finished deliveries by result: delivered, or the
	// reason of the failure.
	delivered func(result string)
}

// callback is one completion callback to deliver.
type callback struct {
	// url is where to POST: the admitted spec's callback_url.
	url string
	// shown is the URL as the trail shows it: a keyed hash when the
	// bundle's mask names callback_url.
	shown string
	// run is the finished run the events are about; body its JSON, the
	// output without its data.
	run  sandgate.Run
	body []byte
}

// callbacks owns the delivery of completion callbacks, from the moment a
// run ends until the receiver answered 2xx or the callback is given up:
// a bounded queue, a few workers, retries with backoff, and one
// callback.delivered or callback.failed event for each. Shutdown gives
// the pending ones a bounded drain and records the rest as failed.
type callbacks struct {
	opt    callbackOptions
	client *http.Client

	// ctx ends in-flight deliveries when the drain runs out.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	queue  chan callback
	wg     sync.WaitGroup
}

// newCallbacks starts the workers.
func newCallbacks(opt callbackOptions) *callbacks {
	if opt.lookup == nil {
		opt.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &callbacks{opt: opt, ctx: ctx, cancel: cancel, queue: make(chan callback, opt.queue)}
	dialer := &net.Dialer{
		Timeout: opt.timeout,
		// The last word on the address: whatever resolved it, a socket
		// to a refused address is never connected.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &refusedError{fmt.Sprintf("cannot check address %s", address)}
			}
			return checkCallbackAddr(ap.Addr())
		},
	}
	transport := &http.Transport{
		// Never through a proxy: the address checked is the address
		// connected to.
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return c.dial(ctx, dialer, network, addr)
		},
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		// Each attempt's context bounds it whole: dial, TLS, answer.
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	c.client = &http.Client{
		Transport: transport,
		// A redirect is not followed: it would send the run to a host
		// policy never judged.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	for range opt.workers {
		c.wg.Add(1)
		go c.work()
	}
	return c
}

// enqueue hands a finished run's callback to the workers without
// waiting. A full queue, or a gateway shutting down, records it failed.
func (c *callbacks) enqueue(cb callback) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.failed(cb, 0, 0, 0, callbackShutdown, "the gateway was shutting down when the run ended")
		return
	}
	select {
	case c.queue <- cb:
	default:
		c.failed(cb, 0, 0, 0, callbackOverflow, fmt.Sprintf("more than %d callbacks were waiting", cap(c.queue)))
	}
}

func (c *callbacks) work() {
	defer c.wg.Done()
	for cb := range c.queue {
		c.deliver(cb)
	}
}

// attemptError is an attempt's failure: the receiver's status (0 when
// none answered) and whether another attempt may do better.
type attemptError struct {
	status    int
	retryable bool
	msg       string
}

func (e *attemptError) Error() string { return e.msg }

// refusedError is an address or URL a callback is never sent to.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// deliver makes the attempts of one callback and records how it ended.
func (c *callbacks) deliver(cb callback) {
	start := time.Now()
	if err := c.ctx.Err(); err != nil {
		c.failed(cb, 0, 0, 0, callbackShutdown, "the gateway stopped before the callback was sent")
		return
	}
	target, err := url.Parse(cb.url)
	if norm, nerr := sandgate.NormalizeCallbackURL(cb.url); err != nil || nerr != nil || norm != cb.url {
		// An adopted run's stored spec holds the URL as its mask hash.
		c.failed(cb, 0, 0, 0, callbackRefused, "the callback URL is not a normalised http or https URL (a masked URL cannot be recovered after a restart)")
		return
	}
	backoff := retry.WithMaxRetries(uint64(max(0, c.opt.attempts-1)),
		retry.WithCappedDuration(30*time.Second, retry.NewExponential(c.opt.backoff)))
	attempts, status := 0, 0
	err = retry.Do(c.ctx, backoff, func(ctx context.Context) error {
		attempts++
		var aerr *attemptError
		status, aerr = c.attempt(ctx, target, cb)
		if aerr == nil {
			return nil
		}
		if aerr.retryable {
			return retry.RetryableError(aerr)
		}
		return aerr
	})
	took := time.Since(start)
	var aerr *attemptError
	switch {
	case err == nil:
		c.record(cb, sandgate.EventCallbackDelivered, "delivered", attempts, status, took, "", "")
	case c.ctx.Err() != nil:
		c.failed(cb, attempts, status, took, callbackShutdown, "the gateway stopped before the callback was delivered")
	case errors.As(err, &aerr) && !aerr.retryable:
		c.failed(cb, attempts, status, took, callbackRefused, aerr.msg)
	default:
		c.failed(cb, attempts, status, took, callbackExhausted, err.Error())
	}
}

// attempt POSTs the callback once, signed at the time of sending.
func (c *callbacks) attempt(ctx context.Context, target *url.URL, cb callback) (int, *attemptError) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(cb.body))
	if err != nil {
		return 0, &attemptError{msg: "build request: " + err.Error()}
	}
	ts := strconv.FormatInt(c.opt.now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandgate/"+sandgate.Version)
	req.Header.Set(HeaderCallbackRunID, cb.run.ID)
	req.Header.Set(HeaderCallbackTimestamp, ts)
	req.Header.Set(HeaderCallbackSignature, SignCallback(c.opt.key, ts, cb.body))
	resp, err := c.client.Do(req)
	if err != nil {
		var refused *refusedError
		var cert *tls.CertificateVerificationError
		var timeout net.Error
		switch {
		case errors.As(err, &refused):
			return 0, &attemptError{msg: refused.msg}
		case errors.As(err, &cert):
			return 0, &attemptError{msg: "the receiver's TLS certificate does not verify: " + cert.Err.Error()}
		case c.ctx.Err() == nil && (errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(err, &timeout) && timeout.Timeout()):
			return 0, &attemptError{retryable: true, msg: fmt.Sprintf("no answer within %s", c.opt.timeout)}
		}
		// Without the url.Error's "Post <url>:" prefix: the URL may be
		// masked in the trail.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return 0, &attemptError{retryable: true, msg: err.Error()}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxCallbackAnswer))
	resp.Body.Close()
	s := resp.StatusCode
	switch {
	case s >= 200 && s < 300:
		return s, nil
	case s >= 300 && s < 400:
		return s, &attemptError{status: s, msg: fmt.Sprintf("the receiver answered %d; redirects are not followed", s)}
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		return s, &attemptError{status: s, retryable: true, msg: fmt.Sprintf("the receiver answered %d", s)}
	default:
		return s, &attemptError{status: s, msg: fmt.Sprintf("the receiver answered %d", s)}
	}
}

// dial resolves the host itself, once, and connects to the first address
// it accepts (egress.Resolve, egress.DialChecked), so that the address
// checked is the address connected to: a second lookup (DNS rebinding)
// never comes into it.
func (c *callbacks) dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portStr, err)
	}
	addrs, literal, err := egress.Resolve(ctx, egress.Lookup(c.opt.lookup), host)
	if err != nil {
		return nil, err
	}
	conn, _, err := egress.DialChecked(ctx, d, network, addrs, uint16(port), func(a netip.Addr) error {
		if err := checkCallbackAddr(a); err != nil {
			return err
		}
		if a.IsLoopback() && !literal && host != "localhost" {
			// A name that policy judged as a remote host must not lead to
			// this host's own services.
			return &refusedError{fmt.Sprintf("host %s resolves to the loopback address %s; name a loopback receiver by its address", host, a)}
		}
		return nil
	})
	return conn, err
}

// checkCallbackAddr refuses what a callback is never sent to, whatever
// the policy allowed (egress.CheckAlways): link-local addresses
// (169.254.0.0/16 and fe80::/10, where cloud metadata services answer),
// the unspecified address (which reaches this host), multicast and
// broadcast.
func checkCallbackAddr(a netip.Addr) error {
	if err := egress.CheckAlways(a); err != nil {
		return &refusedError{err.Error() + "; callbacks are never sent there"}
	}
	return nil
}

// failed records a callback given up.
func (c *callbacks) failed(cb callback, attempts, status int, took time.Duration, reason, msg string) {
	c.record(cb, sandgate.EventCallbackFailed, "failed", attempts, status, took, reason, msg)
}

// record writes the callback's event, tied to its run's correlation ID,
// counts it and logs it.
func (c *callbacks) record(cb callback, typ sandgate.EventType, outcome string, attempts, status int, took time.Duration, reason, msg string) {
	r := cb.run
	payload := map[string]any{
		"url": cb.shown, "attempts": attempts, "status": status, "duration_ms": took.Milliseconds(),
	}
	if typ == sandgate.EventCallbackFailed {
		payload["error"], payload["reason"] = msg, reason
	}
	subject := sandgate.RunSubject(r, c.opt.node)
	subject.ContainerID = ""
	event := sandgate.NewCallbackDelivered
	if typ == sandgate.EventCallbackFailed {
		event = sandgate.NewCallbackFailed
	}
	c.opt.events.Emit(event(subject, c.opt.now(), outcome, payload))
	result := outcome
	if reason != "" {
		result = reason
	}
	if c.opt.delivered != nil {
		c.opt.delivered(result)
	}
	log := c.opt.log.With("run_id", r.ID, "correlation_id", r.CorrelationID, "attempts", attempts, "status", status)
	if typ == sandgate.EventCallbackDelivered {
		log.Info("callback delivered")
	} else {
		log.Warn("callback failed", "reason", reason, "error", msg)
	}
}

// shutdown stops taking callbacks and lets the pending ones be delivered
// for up to drain (or until ctx ends); then it cuts the rest short, each
// recorded as failed with reason shutdown, and waits for the workers.
func (c *callbacks) shutdown(ctx context.Context, drain time.Duration) {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.queue)
	}
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	c.cancel()
	<-done
	c.client.CloseIdleConnections()
}
