package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// TestCheckForwarded holds a forwarded request's signature to the
// cluster's secret, the forwarding node, the method, the path with its
// query, and a minute of clock skew.
func TestCheckForwarded(t *testing.T) {
	secret := []byte("0123456789abcdef-cluster")
	now := time.Unix(1_800_000_000, 0)
	at := strconv.FormatInt(now.Unix(), 10)
	sig := forwardMAC(secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1")
	tests := []struct {
		name                  string
		secret                []byte
		node, at, method, uri string
		sig                   string
		now                   time.Time
		want                  bool
	}{
		{"valid", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now, true},
		{"upper-case hex", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", toUpper(sig), now, true},
		{"skew within a minute", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now.Add(59 * time.Second), true},
		{"too old", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now.Add(2 * time.Minute), false},
		{"from the future", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now.Add(-2 * time.Minute), false},
		{"another secret", []byte("another-secret-of-16"), "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now, false},
		{"no secret here", nil, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now, false},
		{"another node", secret, "gw-b", at, "DELETE", "/v1/runs/x?y=1", sig, now, false},
		{"another method", secret, "gw-a", at, "GET", "/v1/runs/x?y=1", sig, now, false},
		{"another path", secret, "gw-a", at, "DELETE", "/v1/runs/z?y=1", sig, now, false},
		{"another query", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=2", sig, now, false},
		{"bad time", secret, "gw-a", "soon", "DELETE", "/v1/runs/x?y=1", sig, now, false},
		{"no signature", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", "", now, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkForwarded(tc.secret, tc.node, tc.at, tc.sig, tc.method, tc.uri, tc.now); got != tc.want {
				t.Errorf("checkForwarded = %v, want %v", got, tc.want)
			}
		})
	}
}

func toUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// fakeCluster is a node registry that lists what the test says and
// records the takeovers asked of it (none succeeds).
type fakeCluster struct {
	mu        sync.Mutex
	hbErr     error
	nodes     []sandgate.Node
	takeovers []string
}

func (f *fakeCluster) RegisterNode(context.Context, sandgate.Node) error { return nil }
func (f *fakeCluster) Heartbeat(context.Context, sandgate.Node) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hbErr
}
func (f *fakeCluster) LeaveNode(context.Context, string) error { return nil }
func (f *fakeCluster) ListNodes(context.Context, time.Duration) ([]sandgate.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sandgate.Node(nil), f.nodes...), nil
}
func (f *fakeCluster) TakeOver(_ context.Context, dead, _ string, _ time.Duration) (sandgate.Takeover, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.takeovers = append(f.takeovers, dead)
	return sandgate.Takeover{}, false, nil
}
func (f *fakeCluster) RecordTakeover(context.Context, string, []byte) error { return nil }
func (f *fakeCluster) ReserveSlot(context.Context, sandgate.Slot, sandgate.SlotLimits) (sandgate.SlotUse, bool, error) {
	return sandgate.SlotUse{}, true, nil
}
func (f *fakeCluster) HoldSlot(context.Context, sandgate.Slot) error            { return nil }
func (f *fakeCluster) ReleaseSlot(context.Context, string) error                { return nil }
func (f *fakeCluster) ReleaseNodeSlots(context.Context, string, []string) error { return nil }
func (f *fakeCluster) NodeSlots(context.Context) (map[string]int, error) {
	return map[string]int{}, nil
}

func (f *fakeCluster) taken() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.takeovers...)
}

// TestTakeoverWaitsForAHealthyLapse: a node tries to take a lapsed node
// over only once its own heartbeats have succeeded for a whole lapse,
// after its start and again after the database was away (when every
// node's heartbeat is old), and never while it stops.
func TestTakeoverWaitsForAHealthyLapse(t *testing.T) {
	fc := &fakeCluster{nodes: []sandgate.Node{
		{Name: "test-node", State: sandgate.NodeAlive},
		{Name: "other", State: sandgate.NodeLapsed},
	}}
	e := newEnv(t, func(c *Config, e *testEnv) {
		c.NodeHeartbeat, c.NodeLapse = time.Hour, 2*time.Hour
		e.cluster = fc
	})
	c := e.srv.node.cluster
	ctx := context.Background()
	beat := func() {
		c.beat(ctx)
		c.twg.Wait()
	}
	beat()
	if got := fc.taken(); len(got) != 0 {
		t.Fatalf("a node that just started took %v over", got)
	}
	c.healthySince = time.Now().Add(-3 * time.Hour)
	beat()
	if got := fc.taken(); len(got) != 1 || got[0] != "other" {
		t.Fatalf("after a healthy lapse, takeovers = %v, want [other]", got)
	}
	fc.mu.Lock()
	fc.hbErr = sandgate.Errorf(sandgate.CodeUnavailable, "database away")
	fc.mu.Unlock()
	beat()
	fc.mu.Lock()
	fc.hbErr = nil
	fc.mu.Unlock()
	beat()
	if got := fc.taken(); len(got) != 1 {
		t.Fatalf("right after the database came back, takeovers = %v, want none more", got)
	}
	c.healthySince = time.Now().Add(-3 * time.Hour)
	e.srv.node.draining.Store(true)
	beat()
	if got := fc.taken(); len(got) != 1 {
		t.Fatalf("a stopping node took %v over", got)
	}
}

// TestForwardOnlyWhatTheCallerMayReach: a request on a run that executes
// on another node is forwarded there when the caller may reach the run;
// another team's is answered here, exactly as a run that does not exist
// (forwarding it would tell the caller it exists, and where, by the
// other node's answer or its silence).
func TestForwardOnlyWhatTheCallerMayReach(t *testing.T) {
	var hits sync.Map
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.URL.Path, true)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"code":"SANDGATE-NOT-FOUND","message":"answered by node other","correlation_id":"c","details":{}}}`)
	}))
	defer other.Close()
	fc := &fakeCluster{nodes: []sandgate.Node{
		{Name: "test-node", State: sandgate.NodeAlive},
		{Name: "other", State: sandgate.NodeAlive, AdvertiseURL: other.URL},
	}}
	e := newEnv(t, func(c *Config, e *testEnv) {
		c.ClusterSecret = []byte("0123456789abcdef-cluster")
		e.cluster = fc
	})
	id := "01900000-0000-7000-8000-0000000000ab"
	run := sandgate.Run{ID: id, Team: "search", Principal: "bob", Node: "other", State: sandgate.StateRunning,
		Spec: sandgate.RunSpec{Command: []string{"block"}}}
	if err := e.store.CreateRun(t.Context(), &run); err != nil {
		t.Fatal(err)
	}
	none := "01900000-0000-7000-8000-0000000000ac"
	for _, path := range []string{"/v1/runs/" + id, "/v1/runs/" + id + "/logs"} {
		method := http.MethodDelete
		if strings.HasSuffix(path, "/logs") {
			method = http.MethodGet
		}
		r := e.do(method, path, tokAlice, "")
		absent := e.do(method, strings.ReplaceAll(path, id, none), tokAlice, "")
		if r.status != http.StatusNotFound || strings.ReplaceAll(string(r.errorBody().Error.Message), id, "X") !=
			strings.ReplaceAll(string(absent.errorBody().Error.Message), none, "X") {
			t.Errorf("%s %s as another team: %d %s; absent: %d %s", method, path, r.status, r.body, absent.status, absent.body)
		}
		if _, ok := hits.Load(path); ok {
			t.Errorf("%s %s of another team's run was forwarded", method, path)
		}
		if r := e.do(method, path, tokBob, ""); !strings.Contains(string(r.body), "answered by node other") {
			t.Errorf("%s %s as the run's team = %d %s, want it forwarded to its node", method, path, r.status, r.body)
		}
	}
}
