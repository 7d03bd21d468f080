package gateway

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/egress"
)

// egressMetrics are the egress proxy's collectors:
// sandgate_egress_connections_total by result and reason, and
// sandgate_egress_bytes_total by direction.
type egressMetrics struct {
	connections *prometheus.CounterVec
	bytes       *prometheus.CounterVec
}

var _ egress.Metrics = (*egressMetrics)(nil)

func (e *egressMetrics) Connection(result, reason string) {
	e.connections.WithLabelValues(result, reason).Inc()
}

func (e *egressMetrics) Bytes(direction string, n int64) {
	e.bytes.WithLabelValues(direction).Add(float64(n))
}

var egressOnce sync.Map // *Metrics → *egressMetrics

// Egress returns the collectors the egress proxy counts its connections
// (by result, and denials by reason) and bytes (by direction) with,
// registered on m's registry the first time.
func (m *Metrics) Egress() egress.Metrics {
	if v, ok := egressOnce.Load(m); ok {
		return v.(*egressMetrics)
	}
	em := &egressMetrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_egress_connections_total", Help: "Egress proxy connections by result (allowed, denied) and, for denials, reason.",
		}, []string{"result", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandgate_egress_bytes_total", Help: "Bytes through the egress proxy by direction (sent to destinations, received from them).",
		}, []string{"direction"}),
	}
	if v, loaded := egressOnce.LoadOrStore(m, em); loaded {
		return v.(*egressMetrics)
	}
	m.reg.MustRegister(em.connections, em.bytes)
	return em
}
