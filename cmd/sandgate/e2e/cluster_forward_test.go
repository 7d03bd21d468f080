package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// forwardTap stands between the cluster and a node as the address the
// node advertises, and keeps the headers of every forwarded request it
// passes on: what anyone who can read a forward (a log of headers, a
// proxy between the nodes) holds.
type forwardTap struct {
	*httptest.Server
	mu      sync.Mutex
	target  *url.URL
	headers []http.Header
}

func newForwardTap(t *testing.T) *forwardTap {
	tap := &forwardTap{}
	tap.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tap.mu.Lock()
		target := tap.target
		if r.Header.Get("X-Sandgate-Forwarded-By") != "" {
			tap.headers = append(tap.headers, r.Header.Clone())
		}
		tap.mu.Unlock()
		if target == nil {
			http.Error(w, "no node behind the tap yet", http.StatusServiceUnavailable)
			return
		}
		p := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
		}, FlushInterval: -1}
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(tap.Close)
	return tap
}

func (tap *forwardTap) pointAt(t *testing.T, rawURL string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	tap.mu.Lock()
	tap.target = u
	tap.mu.Unlock()
}

// captured is the last forward the tap saw.
func (tap *forwardTap) captured(t *testing.T) http.Header {
	t.Helper()
	tap.mu.Lock()
	defer tap.mu.Unlock()
	if len(tap.headers) == 0 {
		t.Fatal("the tap saw no forwarded request")
	}
	return tap.headers[len(tap.headers)-1]
}

// replay sends method and path to s with the forward headers of h (every
// X-Sandgate-Forward* header), the bearer token and body given.
func replay(t *testing.T, s *testServer, h http.Header, token, method, path, body string) (int, []byte) {
	t.Helper()
	var header []string
	for name, vs := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(name), "X-Sandgate-Forward") {
			header = append(header, name, vs[0])
		}
	}
	if ct := h.Get("Content-Type"); ct != "" {
		header = append(header, "Content-Type", ct)
	}
	status, _, b := s.doAs(t, token, method, path, body, header...)
	return status, b
}

// TestClusterForwardReplay: node B forwards a session command to node A,
// the session's owner; a tap in front of A keeps the forward's headers.
// Sent again to A within the minute of skew, they must not mark another
// request as forwarded: not the same request once more, not with
// another principal's token, not with another body, and not to another
// node. Each is refused UNAUTHENTICATED; the genuine forward ran once.
func TestClusterForwardReplay(t *testing.T) {
	base, _ := clusterBase(t)
	tokens, tok := writeTokensFile(t, []authPrincipal{
		{"ops", "alpha", []sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleAdmin, sandgate.RoleAuditor}},
		{"mallory", "alpha", []sandgate.Role{sandgate.RoleSubmitter}},
	})
	base["SANDGATE_TOKENS_FILE"] = tokens
	tap := newForwardTap(t)
	envA := nodeEnv(t, base, "fwd-a-"+sandgatetest.RandomHex(t, 3))
	envA["SANDGATE_ADVERTISE_URL"] = tap.URL
	a := withToken(t, startServerWithEnv(t, envA), tok["ops"])
	tap.pointAt(t, a.URL)
	b := startNode(t, base, tok["ops"], "fwd-b-"+sandgatetest.RandomHex(t, 3))
	sandgatetest.WaitFor(t, "both nodes alive in the registry", 10*time.Second, func() bool {
		ns := b.nodes(t)
		return ns[a.Node].State == "alive" && ns[b.Node].State == "alive"
	})

	ss, err := a.Client.CreateSession(t.Context(), api.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Client.DeleteSession(t.Context(), ss.ID)
	path := "/v1/sessions/" + ss.ID + "/runs?wait=60s"
	genuine := `{"command":["echo","genuine"]}`
	status, _, body := b.do(t, http.MethodPost, path, genuine)
	if status != http.StatusOK || !strings.Contains(string(body), "genuine") {
		t.Fatalf("the command through %s: %d %s", b.Node, status, body)
	}
	h := tap.captured(t)

	for _, tc := range []struct {
		name, token, body string
		to                *testServer
	}{
		{"the same request again", tok["ops"], genuine, a},
		{"another principal's token", tok["mallory"], `{"command":["echo","mallory"]}`, a},
		{"another body", tok["ops"], `{"command":["echo","replayed"]}`, a},
		{"another node", tok["ops"], genuine, b},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := replay(t, tc.to, h, tc.token, http.MethodPost, path, tc.body)
			var e api.ErrorBody
			_ = json.Unmarshal(body, &e)
			if status != http.StatusUnauthorized || e.Error.Code != sandgate.CodeUnauthenticated {
				t.Errorf("a replayed forward signature answered %d %s; want 401 UNAUTHENTICATED", status, body)
			}
		})
	}

	// A body longer than the JSON limit is streamed through, signed by
	// its length: the forward is still bound to its caller and used once.
	big := strings.Repeat("b", 3<<19)
	filePath := "/v1/sessions/" + ss.ID + "/files?path=big.txt"
	status, _, body = b.do(t, http.MethodPut, filePath, big, "Content-Type", "application/octet-stream")
	if status != http.StatusOK {
		t.Fatalf("PUT %d bytes through %s: %d %s", len(big), b.Node, status, body)
	}
	h = tap.captured(t)
	if got := h.Get("X-Sandgate-Forward-Body"); got != fmt.Sprintf("length:%d", len(big)) {
		t.Errorf("the streamed body's claim is %q", got)
	}
	for _, token := range []string{tok["ops"], tok["mallory"]} {
		status, body := replay(t, a, h, token, http.MethodPut, filePath, big)
		if status != http.StatusUnauthorized {
			t.Errorf("a replayed streamed forward answered %d %s; want 401", status, body)
		}
	}

	// The session ran the genuine command once, nothing else.
	runs, err := a.Client.Runs(t.Context(), client.ListOptions{SessionID: ss.ID, WithOutput: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs.Runs) != 1 {
		var out []string
		for _, r := range runs.Runs {
			out = append(out, r.Stdout.Data)
		}
		t.Errorf("the session ran %d commands (output %q); want the genuine one only", len(runs.Runs), out)
	}
}
