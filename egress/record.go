package egress

import (
	"context"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/sandgate/sandgate"
)

// runState is one registered run: its admitted destinations, its
// budgets, its cached decisions, its open connections and its records.
type runState struct {
	run       Run
	dests     []sandgate.EgressDestination
	bytesLeft atomic.Int64
	// bandwidth paces the run's bytes, both ways and all connections
	// together; nil when the run has no bandwidth limit.
	bandwidth *rate.Limiter
	active    sync.WaitGroup

	mu        sync.Mutex
	ended     bool
	opened    int64
	conns     map[net.Conn]struct{}
	decisions map[string]sandgate.EgressDecision
	aggs      map[destKey]*agg
	total     sandgate.EgressSummary

	// secrets are what the proxy writes into the run's requests, ca the
	// authority it terminates the run's TLS with; both nil for a run
	// without secrets, whose tunnels the proxy does not read.
	secrets   *secretSet
	ca        *RunCA
	secretRec *secretRecord
}

// destKey is a destination as the aggregates keep it.
type destKey struct {
	host string
	port int
}

// agg is what a run did with one destination: totals for the summary,
// and what happened since the last aggregate event.
type agg struct {
	allowed, denied int64
	sent, recv      int64
	// seenAllowed and seenDenied: the first of each kind was recorded
	// singly.
	seenAllowed, seenDenied bool
	pending                 pending
}

// pending is what the next aggregate event reports.
type pending struct {
	allowed, denied int64
	sent, recv      int64
	durationMS      int64
	reasons         map[string]int64
	addr            netip.Addr
	first, last     time.Time
}

// enter tracks a client connection as active; false once the run ended
// or while it holds MaxOpen sockets.
func (st *runState) enter(c net.Conn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ended || len(st.conns) >= MaxOpen {
		return false
	}
	st.active.Add(1)
	st.conns[c] = struct{}{}
	return true
}

func (st *runState) track(c net.Conn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ended {
		return false
	}
	st.conns[c] = struct{}{}
	return true
}

// trackUp tracks an upstream connection, closed at once when the run
// ended meanwhile.
func (st *runState) trackUp(c net.Conn) {
	if !st.track(c) {
		c.Close()
	}
}

func (st *runState) untrack(c net.Conn) {
	st.mu.Lock()
	delete(st.conns, c)
	st.mu.Unlock()
}

// closeAll ends every open connection of the run (its byte budget is
// used up).
func (st *runState) closeAll() {
	st.mu.Lock()
	conns := make([]net.Conn, 0, len(st.conns))
	for c := range st.conns {
		conns = append(conns, c)
	}
	st.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// take reserves up to n bytes of the run's byte budget, and no more than
// an eighth of what is left unless that is under least: 0 once it is
// used up (or held by the run's other connections). The caller gives
// back what it did not use.
func (st *runState) take(n, least int64) int64 {
	for {
		left := st.bytesLeft.Load()
		if left <= 0 {
			return 0
		}
		t := min(n, left, max(left/8, least))
		if st.bytesLeft.CompareAndSwap(left, left-t) {
			return t
		}
	}
}

// takeConnection counts a connection against the run's limit.
func (st *runState) takeConnection() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if l := st.run.Limits.Connections; l > 0 && st.opened >= l {
		return false
	}
	st.opened++
	return true
}

// decide is the policy's decision for host:port at addrs, asked once per
// run and destination (and set of addresses).
func (st *runState) decide(ctx context.Context, d sandgate.EgressDecider, host string, port int, addrs []netip.Addr) sandgate.EgressDecision {
	ss := make([]string, len(addrs))
	for i, a := range addrs {
		ss[i] = a.String()
	}
	key := host + "|" + itoa(port) + "|" + strings.Join(ss, ",")
	st.mu.Lock()
	dec, ok := st.decisions[key]
	st.mu.Unlock()
	if ok {
		return dec
	}
	if d == nil {
		return sandgate.EgressDecision{Reasons: []string{"no egress policy"}}
	}
	dec = d.DecideEgress(ctx, sandgate.EgressInput{
		RunID: st.run.RunID, Principal: st.run.Principal, Team: st.run.Team,
		Host: host, Port: port, Addresses: ss, Egress: st.run.Egress,
	})
	st.mu.Lock()
	if len(st.decisions) < 4*MaxDestinations {
		st.decisions[key] = dec
	}
	st.mu.Unlock()
	return dec
}

// record counts a finished or refused connection and emits its event when
// it is the first of its kind to its destination; repeats wait for the
// next aggregate event.
func (p *Proxy) record(st *runState, rec *conn, allowed bool) {
	now := p.opt.Now()
	dur := now.Sub(rec.start)
	sent, recv := rec.sent.Load(), rec.recv.Load()
	st.mu.Lock()
	key := destKey{rec.host, rec.port}
	a, ok := st.aggs[key]
	if !ok {
		if len(st.aggs) >= MaxDestinations {
			key = destKey{OtherHost, 0}
			a = st.aggs[key]
		}
		if a == nil {
			a = &agg{}
			st.aggs[key] = a
		}
	}
	first := false
	if allowed {
		a.allowed++
		st.total.ConnectionsAllowed++
		first, a.seenAllowed = !a.seenAllowed, true
	} else {
		a.denied++
		st.total.ConnectionsDenied++
		first, a.seenDenied = !a.seenDenied, true
	}
	a.sent += sent
	a.recv += recv
	st.total.BytesSent += sent
	st.total.BytesReceived += recv
	if !first {
		pd := &a.pending
		if pd.first.IsZero() {
			pd.first = now
		}
		pd.last = now
		pd.sent += sent
		pd.recv += recv
		pd.durationMS += dur.Milliseconds()
		pd.addr = rec.addr
		if allowed {
			pd.allowed++
		} else {
			pd.denied++
			if pd.reasons == nil {
				pd.reasons = map[string]int64{}
			}
			if len(pd.reasons) < 16 {
				pd.reasons[rec.reason]++
			}
		}
	}
	st.mu.Unlock()
	if !first {
		return
	}
	payload := map[string]any{
		"host": rec.host, "port": rec.port, "bytes_sent": sent, "bytes_received": recv,
		"duration_ms": dur.Milliseconds(), "connections": 1,
	}
	if rec.addr.IsValid() {
		payload["address"] = rec.addr.String()
	}
	build := sandgate.NewEgressAllowed
	outcome := "allowed"
	if !allowed {
		build, outcome = sandgate.NewEgressDenied, "denied"
		payload["reason"], payload["message"] = rec.reason, rec.msg
	} else if rec.reason != "" {
		payload["ended_by"] = rec.reason
	}
	p.emit(st, build, outcome, rec.revision, payload)
}

// emit records one of a run's egress events, made by the root package's
// constructor of its type.
func (p *Proxy) emit(st *runState, build func(sandgate.Subject, time.Time, string, map[string]any) sandgate.Event, outcome, revision string, payload map[string]any) {
	r := st.run
	if revision == "" {
		revision = r.PolicyRevision
	}
	if r.SessionID != "" {
		payload["session_id"] = r.SessionID
	}
	sub := sandgate.Subject{CorrelationID: r.CorrelationID, RunID: r.RunID, DecisionID: r.DecisionID,
		Actor: r.Principal, Team: r.Team, Node: p.opt.Node, PolicyRevision: revision}
	p.opt.Events.Emit(build(sub, p.opt.Now(), outcome, payload))
}

// flushLoop records every run's pending aggregates each AggregateEvery.
func (p *Proxy) flushLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.opt.AggregateEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			runs := make([]*runState, 0, len(p.runs))
			for _, st := range p.runs {
				runs = append(runs, st)
			}
			p.mu.Unlock()
			for _, st := range runs {
				p.flush(st)
			}
		}
	}
}

// flush emits one aggregate event per destination and kind that has
// pending repeats, and clears them.
func (p *Proxy) flush(st *runState) {
	type out struct {
		key destKey
		pd  pending
	}
	st.mu.Lock()
	var outs []out
	for k, a := range st.aggs {
		if a.pending.allowed+a.pending.denied > 0 {
			outs = append(outs, out{k, a.pending})
			a.pending = pending{}
		}
	}
	st.mu.Unlock()
	p.flushSecrets(st)
	sort.Slice(outs, func(i, j int) bool {
		if outs[i].key.host != outs[j].key.host {
			return outs[i].key.host < outs[j].key.host
		}
		return outs[i].key.port < outs[j].key.port
	})
	for _, o := range outs {
		base := func() map[string]any {
			m := map[string]any{
				"host": o.key.host, "port": o.key.port, "aggregated": true,
				"first_at": o.pd.first.UTC().Format(time.RFC3339Nano), "last_at": o.pd.last.UTC().Format(time.RFC3339Nano),
			}
			if o.pd.addr.IsValid() {
				m["address"] = o.pd.addr.String()
			}
			return m
		}
		if o.pd.allowed > 0 {
			m := base()
			m["connections"], m["bytes_sent"], m["bytes_received"], m["duration_ms"] = o.pd.allowed, o.pd.sent, o.pd.recv, o.pd.durationMS
			p.emit(st, sandgate.NewEgressAllowed, "allowed", "", m)
		}
		if o.pd.denied > 0 {
			m := base()
			reasons := make(map[string]any, len(o.pd.reasons))
			for r, n := range o.pd.reasons {
				reasons[r] = n
			}
			m["connections"], m["reasons"] = o.pd.denied, reasons
			p.emit(st, sandgate.NewEgressDenied, "denied", "", m)
		}
	}
}

// summary is the run's egress summary: totals and its busiest
// destinations.
func (st *runState) summary() *sandgate.EgressSummary {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.total
	s.Destinations = make([]sandgate.EgressDestinationSummary, 0, len(st.aggs))
	for k, a := range st.aggs {
		s.Destinations = append(s.Destinations, sandgate.EgressDestinationSummary{
			Host: k.host, Port: k.port, Allowed: a.allowed, Denied: a.denied, BytesSent: a.sent, BytesReceived: a.recv,
		})
	}
	sort.Slice(s.Destinations, func(i, j int) bool {
		di, dj := s.Destinations[i], s.Destinations[j]
		if ni, nj := di.Allowed+di.Denied, dj.Allowed+dj.Denied; ni != nj {
			return ni > nj
		}
		if di.Host != dj.Host {
			return di.Host < dj.Host
		}
		return di.Port < dj.Port
	})
	if len(s.Destinations) > sandgate.MaxEgressSummaryDestinations {
		s.Destinations = s.Destinations[:sandgate.MaxEgressSummaryDestinations]
	}
	return &s
}
