package gateway

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEgressMetrics: the proxy's connections by result and reason and its
// bytes by direction are exported, registered once however often asked.
func TestEgressMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	em := m.Egress()
	if m.Egress() != em {
		t.Fatal("Egress made a second set of collectors")
	}
	em.Connection("allowed", "")
	em.Connection("denied", "link_local")
	em.Connection("denied", "link_local")
	em.Bytes("received", 1000)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			key := f.GetName() // then the label values, by label name
			for _, l := range mt.GetLabel() {
				key += "," + l.GetValue()
			}
			got[key] = mt.GetCounter().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"sandgate_egress_connections_total,,allowed":          1,
		"sandgate_egress_connections_total,link_local,denied": 2,
		"sandgate_egress_bytes_total,received":                1000,
	} {
		if got[key] != want {
			t.Errorf("%s = %v; want %v", key, got[key], want)
		}
	}
}
