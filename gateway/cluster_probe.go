package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// A late heartbeat is not enough to take a node over: its database
// connections may be what is late (a database cut off from it alone, or
// a pool made to wait), while it runs its containers on and records
// their ends. Before the takeover, the survivor asks the node itself, at
// the address it advertises: a node that answers GET /healthz with its
// own name is alive, and is left to its work (its events reach the
// trail once its database does). Only a node that does not answer, or
// advertises no address, is taken over; its chains are fenced in the
// same transaction, so that if it was alive after all it records
// nothing more.
//
// Nor is one taken over whose Docker daemon, reached as a takeover
// reaches it, sees its lease renewed by a live gateway (executor's node
// lease): it runs its containers on, cut off from the database and its
// peers only, and a survivor adopting them would make them two owners'.
// A daemon that does not answer says nothing either way: the node is
// taken over, its runs lost, its chains fenced.

const (
	// probeTimeout bounds one look at a lapsed node's address.
	probeTimeout = 2 * time.Second
	// probeTries is how many looks are taken, probeGap apart.
	probeTries = 2
	probeGap   = 500 * time.Millisecond
	// lateLogEvery spaces the log lines of a late node that answers.
	lateLogEvery = 30 * time.Second
)

// answers reports whether node n answers GET /healthz at its advertised
// address with its own name.
func (c *cluster) answers(ctx context.Context, n sandgate.Node) bool {
	if n.AdvertiseURL == "" {
		return false
	}
	client := &http.Client{Timeout: probeTimeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	url := strings.TrimSuffix(n.AdvertiseURL, "/") + "/healthz"
	for i := range probeTries {
		if i > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(probeGap):
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		var h api.Health
		err = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&h)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK && h.Node == n.Name {
			return true
		}
	}
	return false
}

// leaseHolder names the live gateway that holds node n's lease on its
// Docker daemon; "" when none does, or the daemon does not answer.
func (c *cluster) leaseHolder(ctx context.Context, n sandgate.Node) string {
	if c.n.d.RemoteReconcilers == nil {
		return ""
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	rec, err := c.n.d.RemoteReconcilers(dctx, n.Name, n.DockerHost)
	if err != nil {
		return ""
	}
	defer rec.Close()
	holder, err := rec.Holder(dctx)
	if err != nil {
		return ""
	}
	return holder
}

// lateButAlive logs, at most every lateLogEvery per node, that node n's
// heartbeat is late but it is alive (why), so it is not taken over.
func (c *cluster) lateButAlive(n sandgate.Node, why string) {
	c.mu.Lock()
	if c.lateLogged == nil {
		c.lateLogged = map[string]time.Time{}
	}
	last := c.lateLogged[n.Name]
	due := time.Since(last) >= lateLogEvery
	if due {
		c.lateLogged[n.Name] = time.Now()
	}
	c.mu.Unlock()
	if due {
		c.n.log.Warn("a node's heartbeat is late, but it is alive: it is not taken over", "why", why,
			"late_node", n.Name, "heartbeat_age", n.HeartbeatAge.String(), "advertise_url", n.AdvertiseURL)
	}
}
