package executor

import (
	"sync"

	"github.com/sandgate/sandgate"
)

// registry holds the live runs of an executor by run ID: from the moment
// a run is taken to its end, Cancel, State, Exec and Shutdown reach it
// here, and the reaper leaves its container alone.
type registry struct {
	node string

	mu      sync.Mutex
	runs    map[string]*handle
	closing bool
	active  sync.WaitGroup
}

func newRegistry(node string) *registry {
	return &registry{node: node, runs: map[string]*handle{}}
}

// add makes h live. It refuses a run without an ID (INVALID-REQUEST), one
// already live (CONFLICT), and any run once the executor is shutting down
// (UNAVAILABLE).
func (g *registry) add(h *handle) error {
	if h.job.RunID == "" {
		h.cancel(nil)
		return &sandgate.Error{Code: sandgate.CodeInvalidRequest, Field: "run_id", Message: "is required"}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		h.cancel(errShutdown)
		return sandgate.Errorf(sandgate.CodeUnavailable, "executor on node %s is shutting down", g.node)
	}
	if g.runs[h.job.RunID] != nil {
		h.cancel(nil)
		return sandgate.Errorf(sandgate.CodeConflict, "run %s is already executing", h.job.RunID)
	}
	g.runs[h.job.RunID] = h
	g.active.Add(1)
	return nil
}

// remove ends h's life: it is no longer reachable, and whoever waited for
// its end (Cancel) learns of it.
func (g *registry) remove(h *handle) {
	g.mu.Lock()
	delete(g.runs, h.job.RunID)
	g.mu.Unlock()
	h.cancel(nil)
	close(h.done)
	g.active.Done()
}

// get returns the live run id, nil when there is none.
func (g *registry) get(id string) *handle {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runs[id]
}

// live returns a copy of the live runs.
func (g *registry) live() map[string]*handle {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]*handle, len(g.runs))
	for id, h := range g.runs {
		out[id] = h
	}
	return out
}

// close refuses new runs from now on and returns the live ones.
func (g *registry) close() []*handle {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closing = true
	out := make([]*handle, 0, len(g.runs))
	for _, h := range g.runs {
		out = append(out, h)
	}
	return out
}
