package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate"
)

// A node that learns it was taken over is fenced: its heartbeat found its
// row gone (a survivor holds its runs and sessions), or the audit trail
// refused its chain (the survivor fenced it, migration 15). From then on
// it starts no work (runs, sessions, commands are refused UNAVAILABLE, or
// sent on to an alive node), takes no one over, forwards requests for the
// runs it followed to their new owner, and shows why on /readyz, in
// GET /v1/nodes (its row's held_events), in the metrics
// sandgate_node_fenced and sandgate_audit_held_events, and in its log.
// Restarted, it begins a new chain and joins the cluster again.

// FenceReporter is implemented by the trail's writer when it knows
// whether a survivor fenced this node's chains (audit.Store, the
// Recorder).
type FenceReporter interface {
	// Fenced returns the events held because of a fence (refused by the
	// database, kept in the spool), and AUDIT-UNAVAILABLE naming the
	// fence while this process's chains are fenced.
	Fenced() (held int64, err error)
}

// fenceState is what this node knows of its own fencing.
type fenceState struct {
	mu  sync.Mutex
	err error // UNAVAILABLE, naming who took the node over; nil while not fenced
}

// fenced returns why this node starts no work, nil when it may (the
// gate asks it before a run, a session or a command).
func (s *node) fenced() error {
	if c := s.cluster; c != nil {
		c.fence.mu.Lock()
		err := c.fence.err
		c.fence.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if fr := s.fenceReporter(); fr != nil {
		if _, err := fr.Fenced(); err != nil {
			return sandgate.Errorf(sandgate.CodeUnavailable, "this node was taken over; it starts no new work until it is restarted: %s", sandgate.ErrorMessageOf(err))
		}
	}
	return nil
}

// heldEvents is how many events the audit trail holds because of a fence.
func (s *node) heldEvents() int64 {
	if fr := s.fenceReporter(); fr != nil {
		held, _ := fr.Fenced()
		return held
	}
	return 0
}

// fenceReporter is the Recorder, or else the audit trail, when it
// reports fences.
func (s *node) fenceReporter() FenceReporter {
	if fr, ok := s.d.Recorder.(FenceReporter); ok {
		return fr
	}
	if fr, ok := s.d.Audit.(FenceReporter); ok {
		return fr
	}
	return nil
}

// fenceTakenOver fences this node after its heartbeat found its row gone:
// it reads who took it over, and says so once in the log.
func (c *cluster) fenceTakenOver(ctx context.Context) {
	s := c.n
	c.fence.mu.Lock()
	already := c.fence.err != nil
	c.fence.mu.Unlock()
	if already {
		return
	}
	by, at := "another node", time.Time{}
	if nodes, err := c.beats.ListNodes(ctx, s.cfg.NodeLapse); err == nil {
		for _, n := range nodes {
			if n.Name == s.cfg.Node && n.TakenOverBy != "" {
				by = "node " + n.TakenOverBy
				if n.TakenOverAt != nil {
					at = *n.TakenOverAt
				}
			}
		}
	}
	err := sandgate.Errorf(sandgate.CodeUnavailable,
		"this node was taken over by %s at %s (its heartbeat lapsed); it starts no new work, and what it records is held in its spool: restart it to begin a new chain and join again",
		by, at.UTC().Format(time.RFC3339))
	c.fence.mu.Lock()
	c.fence.err = err
	c.fence.mu.Unlock()
	s.log.Error("this node is fenced: a survivor took it over while its heartbeat lapsed; it starts no new work and holds what it records in its spool until it is restarted",
		"node", s.cfg.Node, "taken_over_by", by, "taken_over_at", at, "held_events", s.heldEvents())
}

// reportHeld tells the registry, on this node's row, how many events it
// holds because of a fence, so that every node's GET /v1/nodes shows it.
func (c *cluster) reportHeld(ctx context.Context) {
	held := c.n.heldEvents()
	if held == c.reported {
		return
	}
	if err := c.beats.ReportHeld(ctx, c.n.cfg.Node, held); err != nil {
		c.n.log.Warn("report the events held by a fence", "error", err)
		return
	}
	c.reported = held
}

// fenceCollectors are the gauges of a fence: sandgate_node_fenced (1
// while this node is fenced) and sandgate_audit_held_events.
func fenceCollectors(s *node) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandgate_node_fenced", Help: "1 while this node is fenced: it was taken over, starts no new work and holds what it records until restarted.",
		}, func() float64 {
			if s.fenced() != nil {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandgate_audit_held_events", Help: "Audit events this node holds in its spool because the database refused them as fenced (now or before a restart).",
		}, func() float64 { return float64(s.heldEvents()) }),
	}
}
