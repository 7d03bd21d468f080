package egress

import (
	"sort"
	"sync"
	"time"

	"github.com/sandgate/sandgate"
)

// A run's secret events are bounded like its egress events: the first
// use of each secret at each destination (and the first misdirection)
// is recorded singly, when its connection ends; the rest are counted and
// recorded as one aggregate per secret, destination and kind every
// AggregateEvery, and once more when the run ends.

// secretKey is a secret at a destination, used or misdirected.
type secretKey struct {
	name, host  string
	port        int
	misdirected bool
}

// secretAgg is what happened to one secretKey since its last event.
type secretAgg struct {
	seen        bool
	version     int64
	connections int64
	requests    int64
	wheres      map[string]int64
	first, last time.Time
}

// secretRecord is a run's secret events to come.
type secretRecord struct {
	mu   sync.Mutex
	aggs map[secretKey]*secretAgg
}

// recordSecret records what a connection did with secret b at host:port:
// requests written into (used), or a request refused for its placeholder
// (misdirected, where it was).
func (p *Proxy) recordSecret(st *runState, b *boundSecret, host string, port int, requests int64, where string) {
	r := st.secretRec
	now := p.opt.Now()
	key := secretKey{name: b.Name, host: host, port: port, misdirected: where != ""}
	r.mu.Lock()
	a, ok := r.aggs[key]
	if !ok {
		if len(r.aggs) >= MaxDestinations {
			key.host, key.port = OtherHost, 0
			a = r.aggs[key]
		}
		if a == nil {
			a = &secretAgg{}
			r.aggs[key] = a
		}
	}
	a.version = b.Version
	single := !a.seen
	a.seen = true
	if !single {
		if a.first.IsZero() {
			a.first = now
		}
		a.last = now
		a.connections++
		a.requests += requests
		if where != "" {
			if a.wheres == nil {
				a.wheres = map[string]int64{}
			}
			a.wheres[where]++
		}
	}
	r.mu.Unlock()
	if !single {
		return
	}
	payload := map[string]any{"secret": b.Name, "version": b.Version, "host": key.host, "port": key.port,
		"connections": int64(1), "requests": requests}
	if where != "" {
		payload["where"] = where
	}
	p.emitSecret(st, key.misdirected, payload)
}

func (p *Proxy) emitSecret(st *runState, misdirected bool, payload map[string]any) {
	r := st.run
	if r.SessionID != "" {
		payload["session_id"] = r.SessionID
	}
	s := sandgate.Subject{CorrelationID: r.CorrelationID, RunID: r.RunID, DecisionID: r.DecisionID,
		Actor: r.Principal, Team: r.Team, Node: p.opt.Node, PolicyRevision: r.PolicyRevision}
	ev := sandgate.NewSecretUsed(s, p.opt.Now(), payload)
	if misdirected {
		ev = sandgate.NewSecretMisdirected(s, p.opt.Now(), payload)
	}
	p.opt.Events.Emit(ev)
}

// flushSecrets records an aggregate for each secret, destination and
// kind with repeats since the last.
func (p *Proxy) flushSecrets(st *runState) {
	r := st.secretRec
	if r == nil {
		return
	}
	type out struct {
		key secretKey
		agg secretAgg
	}
	var outs []out
	r.mu.Lock()
	for k, a := range r.aggs {
		if a.connections > 0 {
			outs = append(outs, out{k, *a})
			a.connections, a.requests, a.wheres, a.first, a.last = 0, 0, nil, time.Time{}, time.Time{}
		}
	}
	r.mu.Unlock()
	sort.Slice(outs, func(i, j int) bool {
		a, b := outs[i].key, outs[j].key
		if a.name != b.name {
			return a.name < b.name
		}
		if a.host != b.host {
			return a.host < b.host
		}
		return a.port < b.port
	})
	for _, o := range outs {
		payload := map[string]any{"secret": o.key.name, "version": o.agg.version, "host": o.key.host, "port": o.key.port,
			"connections": o.agg.connections, "requests": o.agg.requests, "aggregated": true,
			"first_at": o.agg.first.UTC().Format(time.RFC3339Nano), "last_at": o.agg.last.UTC().Format(time.RFC3339Nano)}
		if len(o.agg.wheres) > 0 {
			wheres := make(map[string]any, len(o.agg.wheres))
			for w, n := range o.agg.wheres {
				wheres[w] = n
			}
			payload["wheres"] = wheres
		}
		p.emitSecret(st, o.key.misdirected, payload)
	}
}
