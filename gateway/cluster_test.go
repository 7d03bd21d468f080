package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
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
// cluster's secret, both nodes, the time within a minute of skew, the
// nonce, the method, the path with its query, the caller's
// credentials, the content type and the body.
func TestCheckForwarded(t *testing.T) {
	secret := []byte("0123456789abcdef-cluster")
	now := time.Unix(1_800_000_000, 0)
	signed := forwardClaim{
		From: "gw-a", To: "gw-b", At: strconv.FormatInt(now.Unix(), 10), Nonce: newForwardNonce(),
		Method: "POST", URI: "/v1/sessions/x/runs?wait=1s", Caller: callerDigest("Bearer alice"),
		ContentType: "application/json", Body: digestClaim([]byte(`{"command":["true"]}`)),
	}
	sig := signed.mac(secret)
	change := func(f func(*forwardClaim)) forwardClaim {
		c := signed
		f(&c)
		return c
	}
	tests := []struct {
		name   string
		secret []byte
		claim  forwardClaim
		sig    string
		now    time.Time
		want   bool
	}{
		{"valid", secret, signed, sig, now, true},
		{"upper-case hex", secret, signed, toUpper(sig), now, true},
		{"skew within a minute", secret, signed, sig, now.Add(59 * time.Second), true},
		{"too old", secret, signed, sig, now.Add(2 * time.Minute), false},
		{"from the future", secret, signed, sig, now.Add(-2 * time.Minute), false},
		{"another secret", []byte("another-secret-of-16"), signed, sig, now, false},
		{"no secret here", nil, signed, sig, now, false},
		{"another sender", secret, change(func(c *forwardClaim) { c.From = "gw-c" }), sig, now, false},
		{"another receiver", secret, change(func(c *forwardClaim) { c.To = "gw-c" }), sig, now, false},
		{"another nonce", secret, change(func(c *forwardClaim) { c.Nonce = newForwardNonce() }), sig, now, false},
		{"no nonce", secret, change(func(c *forwardClaim) { c.Nonce = "" }), signed.mac(secret), now, false},
		{"another method", secret, change(func(c *forwardClaim) { c.Method = "DELETE" }), sig, now, false},
		{"another path", secret, change(func(c *forwardClaim) { c.URI = "/v1/sessions/y/runs?wait=1s" }), sig, now, false},
		{"another query", secret, change(func(c *forwardClaim) { c.URI = "/v1/sessions/x/runs?wait=2s" }), sig, now, false},
		{"another caller", secret, change(func(c *forwardClaim) { c.Caller = callerDigest("Bearer mallory") }), sig, now, false},
		{"another content type", secret, change(func(c *forwardClaim) { c.ContentType = "text/plain" }), sig, now, false},
		{"another body", secret, change(func(c *forwardClaim) { c.Body = digestClaim([]byte("{}")) }), sig, now, false},
		{"a body by length", secret, change(func(c *forwardClaim) { c.Body = "length:20" }), sig, now, false},
		{"bad time", secret, change(func(c *forwardClaim) { c.At = "soon" }), sig, now, false},
		{"no signature", secret, signed, "", now, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.claim.check(tc.secret, tc.sig, tc.now); (err == nil) != tc.want {
				t.Errorf("check = %v, want ok %v", err, tc.want)
			}
		})
	}
}

// TestForwardBody: a body up to the limit is named by its digest and
// sent on whole; a longer one by its length, streamed; the receiver
// holds each to its claim.
func TestForwardBody(t *testing.T) {
	const limit = 16
	send := func(body string, length int64) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/runs", strings.NewReader(body))
		r.ContentLength = length
		return r
	}
	for _, tc := range []struct {
		name      string
		body      string
		length    int64
		wantClaim string
	}{
		{"empty", "", 0, digestClaim(nil)},
		{"short", "short body", 10, digestClaim([]byte("short body"))},
		{"short, length unknown", "short body", -1, digestClaim([]byte("short body"))},
		{"long", "a body longer than the limit", 28, "length:28"},
		{"long, length unknown", "a body longer than the limit", -1, "length:-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := send(tc.body, tc.length)
			claim, err := bodyClaim(out, limit)
			if err != nil || claim != tc.wantClaim {
				t.Fatalf("claim %q %v, want %q", claim, err, tc.wantClaim)
			}
			if sent, _ := io.ReadAll(out.Body); string(sent) != tc.body {
				t.Errorf("sent on %q, want %q", sent, tc.body)
			}
			in := send(tc.body, tc.length)
			if err := checkBody(in, claim, limit); err != nil {
				t.Errorf("the genuine body: %v", err)
			} else if got, _ := io.ReadAll(in.Body); string(got) != tc.body {
				t.Errorf("the handler reads %q, want %q", got, tc.body)
			}
			if err := checkBody(send(tc.body+"x", tc.length+1), claim, limit); err == nil && tc.length >= 0 {
				t.Errorf("another body passed its claim %q", claim)
			}
		})
	}
	if err := checkBody(send("short bodX", 10), digestClaim([]byte("short body")), limit); err == nil {
		t.Error("a body of the same length and another digest passed")
	}
	if err := checkBody(send("short body", 10), "", limit); err == nil {
		t.Error("a body with no claim passed")
	}
}

// TestForwardNonceOnce: a nonce is accepted once, and the memory of
// them is bounded: full, it refuses until some expire.
func TestForwardNonceOnce(t *testing.T) {
	var u usedNonces
	now := time.Unix(1_800_000_000, 0)
	n := newForwardNonce()
	if err := u.use(n, now); err != nil {
		t.Fatal(err)
	}
	if err := u.use(n, now.Add(time.Second)); !errors.Is(err, errForwardReplayed) {
		t.Fatalf("the nonce again: %v, want errForwardReplayed", err)
	}
	for i := 1; i < maxForwardNonces; i++ {
		if err := u.use(strconv.Itoa(i), now); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.use("one more", now); err == nil || errors.Is(err, errForwardReplayed) {
		t.Fatalf("a nonce past the bound: %v, want a refusal", err)
	}
	if err := u.use("one more", now.Add(2*forwardSkew+time.Second)); err != nil {
		t.Fatalf("once the others expired: %v", err)
	}
	if len(u.seen) != 1 {
		t.Errorf("%d nonces kept after the expiry; want 1", len(u.seen))
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
	held      []int64
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
func (f *fakeCluster) ReportHeld(_ context.Context, _ string, held int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = append(f.held, held)
	return nil
}
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

// fencedTrail is a trail's writer that was refused as fenced, holding
// events.
type fencedTrail struct {
	sandgate.Recorder
	held int64
}

func (f fencedTrail) Fenced() (int64, error) {
	return f.held, sandgate.Errorf(sandgate.CodeAuditUnavailable, "chain x was fenced at seq 3 by node other")
}

// TestFencedNodeStartsNoWork: a node whose heartbeat finds its row taken
// over is fenced: it takes no one over, refuses new runs UNAVAILABLE
// naming the node that took it over, says so on /readyz and in
// GET /v1/nodes, and counts sandgate_node_fenced. A node whose trail
// reports its chain fenced is fenced the same way, and its row is told
// the events it holds.
func TestFencedNodeStartsNoWork(t *testing.T) {
	t.Run("heartbeat", func(t *testing.T) {
		fc := &fakeCluster{hbErr: sandgate.Errorf(sandgate.CodeNotFound, "node test-node is not registered as active"),
			nodes: []sandgate.Node{{Name: "test-node", State: sandgate.NodeGone, TakenOverBy: "other"}, {Name: "third", State: sandgate.NodeLapsed}}}
		e := newEnv(t, func(c *Config, e *testEnv) {
			c.NodeHeartbeat, c.NodeLapse = time.Hour, 2*time.Hour
			e.cluster = fc
		})
		c := e.srv.node.cluster
		c.healthySince = time.Now().Add(-3 * time.Hour)
		c.beat(context.Background())
		c.twg.Wait()
		if got := fc.taken(); len(got) != 0 {
			t.Errorf("a fenced node took %v over", got)
		}
		r := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody)
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "taken over by node other") {
			t.Errorf("a run on a fenced node: %d %s", r.status, r.body)
		}
		if r := e.do(http.MethodPost, "/v1/sessions", tokAlice, "{}"); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "taken over by node other") {
			t.Errorf("a session on a fenced node: %d %s", r.status, r.body)
		}
		if r := e.do(http.MethodGet, "/readyz", "", ""); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "gateway: this node was taken over by node other") {
			t.Errorf("readyz: %d %s", r.status, r.body)
		}
		if r := e.do(http.MethodGet, "/v1/nodes", tokAdmin, ""); !strings.Contains(string(r.body), `"fenced":"this node was taken over by node other`) {
			t.Errorf("GET /v1/nodes: %d %s", r.status, r.body)
		}
	})
	t.Run("trail", func(t *testing.T) {
		fc := &fakeCluster{nodes: []sandgate.Node{{Name: "test-node", State: sandgate.NodeAlive}}}
		e := newEnv(t, func(c *Config, e *testEnv) {
			c.NodeHeartbeat, c.NodeLapse = time.Hour, 2*time.Hour
			e.cluster = fc
		})
		e.srv.node.d.Recorder = fencedTrail{Recorder: e.srv.node.d.Recorder, held: 7}
		e.srv.node.cluster.beat(context.Background())
		if r := e.do(http.MethodPost, "/v1/runs", tokAlice, echoBody); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "fenced at seq 3") {
			t.Errorf("a run on a node whose chain is fenced: %d %s", r.status, r.body)
		}
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if len(fc.held) != 1 || fc.held[0] != 7 {
			t.Errorf("held events reported %v, want [7]", fc.held)
		}
	})
}
