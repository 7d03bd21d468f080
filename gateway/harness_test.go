package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/console"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/api/apitest"
	"github.com/sandgate/sandgate/mcp"
	"github.com/sandgate/sandgate/policies/policytest"
)

// The test principals and their tokens.
const (
	tokAlice   = "tok-alice"   // submitter, team payments
	tokBob     = "tok-bob"     // submitter, team search
	tokSec     = "tok-sec"     // security
	tokAuditor = "tok-auditor" // auditor
	tokAdmin   = "tok-admin"   // admin
	tokCarol   = "tok-carol"   // approver, team security
)

type testEnv struct {
	t         testing.TB
	srv       *Server
	ts        *httptest.Server
	admitter  *fakeAdmitter
	policies  *fakePolicies
	recorder  *fakeRecorder
	audit     *fakeAudit
	store     *fakeStore
	exec      *fakeExecutor
	sessions  *fakeSessions
	approvals *fakeApprovals
	boxes     *fakeSandboxes
	arts      *fakeArtifacts
	images    sandgate.ImageCatalog
	// imagePackages answers GET /v1/images/{ref}/packages.
	imagePackages sandgate.ImagePackageLister
	// sinks, when an edit sets it, reports audit sinks.
	sinks SinkReporter
	// volumes, when an edit sets it, lists and removes cache volumes.
	volumes sandgate.VolumeAdmin
	// cluster, when an edit sets it, is the node registry.
	cluster ClusterStore
	// secrets, when an edit sets it, keeps secrets.
	secrets SecretVault
	// noConsole, when an edit sets it, leaves Deps.Console unset.
	noConsole bool
	reg       *prometheus.Registry
	// check holds every answer of e.ts.Client() to the OpenAPI document
	// (nil in benchmarks).
	check *apitest.Checker
}

// newEnv starts a gateway over fakes on a loopback test server. edit may
// change the config before New.
func newEnv(t testing.TB, edit ...func(*Config, *testEnv)) *testEnv {
	t.Helper()
	princ, err := NewPrincipals([]PrincipalEntry{
		{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}, TokenSHA256: HashToken(tokAlice)},
		{Name: "bob", Team: "search", Roles: []sandgate.Role{sandgate.RoleSubmitter}, TokenSHA256: HashToken(tokBob)},
		{Name: "sec", Team: "security", Roles: []sandgate.Role{sandgate.RoleSecurity}, TokenSHA256: HashToken(tokSec)},
		{Name: "aud", Team: "compliance", Roles: []sandgate.Role{sandgate.RoleAuditor}, TokenSHA256: HashToken(tokAuditor)},
		{Name: "adm", Team: "ops", Roles: []sandgate.Role{sandgate.RoleAdmin}, TokenSHA256: HashToken(tokAdmin)},
		{Name: "carol", Team: "security", Roles: []sandgate.Role{sandgate.RoleApprover}, TokenSHA256: HashToken(tokCarol)},
	})
	if err != nil {
		t.Fatalf("principals: %v", err)
	}
	e := &testEnv{
		t:         t,
		admitter:  &fakeAdmitter{},
		policies:  &fakePolicies{status: sandgate.PolicyStatus{Revision: "sha256:test", Source: "embedded"}},
		recorder:  &fakeRecorder{},
		audit:     &fakeAudit{},
		store:     newFakeStore(),
		exec:      newFakeExecutor(),
		sessions:  newFakeSessions(),
		approvals: &fakeApprovals{m: map[string]sandgate.Approval{}},
		boxes:     &fakeSandboxes{},
		arts:      newFakeArtifacts(),
		reg:       prometheus.NewRegistry(),
	}
	e.audit.trail = e.recorder
	cfg := Config{
		Node: "test-node", MountRoots: []string{"/srv/work"}, MaskKey: []byte("0123456789abcdef0123"),
		MaxWait: 2 * time.Second, ShutdownGrace: time.Second, AuthFailureBurst: 1000, AuthFailureRate: 1000,
		UploadDir: t.TempDir(),
	}
	for _, f := range edit {
		f(&cfg, e)
	}
	var consoleHandler http.Handler
	if !e.noConsole {
		consoleHandler = console.Handler()
	}
	e.srv, err = New(cfg, Deps{
		Admitter: e.admitter, Policies: e.policies, Recorder: e.recorder, Audit: e.audit, Proofs: e.audit,
		Runs: e.store, Sessions: e.sessions, Approvals: e.approvals, Executor: e.exec, Sandboxes: e.boxes, Volumes: e.volumes, Artifacts: e.arts, Principals: princ, Authorizer: policytest.Default(t), Registry: e.reg,
		Console: consoleHandler, Images: e.images, Sinks: e.sinks, Cluster: e.cluster, MCP: mcp.Handler, Secrets: e.secrets,
		ImagePackages: e.imagePackages,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.ts = httptest.NewServer(e.srv.Handler())
	if _, bench := t.(*testing.B); !bench {
		e.check = apitest.New(t)
		e.ts.Client().Transport = e.check.Transport(e.ts.Client().Transport)
	}
	t.Cleanup(func() {
		e.ts.CloseClientConnections()
		e.ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return e
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the error code of an error answer.
func (r response) errorCode() string {
	var b api.ErrorBody
	_ = json.Unmarshal(r.body, &b)
	return string(b.Error.Code)
}

func (r response) errorBody() api.ErrorBody {
	var b api.ErrorBody
	_ = json.Unmarshal(r.body, &b)
	return b
}

func (r response) run(t testing.TB) api.RunView {
	t.Helper()
	var v api.RunView
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode run: %v in %s", err, r.body)
	}
	return v
}

// do sends a request; token "" sends none. headers are "Key: value".
func (e *testEnv) do(method, path, token, body string, headers ...string) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatalf("request: %v", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("read body: %v", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// submit posts a run for token and fails the test unless it is accepted.
func (e *testEnv) submit(token string, cmd ...string) api.RunView {
	e.t.Helper()
	body, _ := json.Marshal(map[string]any{"command": cmd})
	r := e.do(http.MethodPost, "/v1/runs", token, string(body))
	if r.status != http.StatusAccepted && r.status != http.StatusOK {
		e.t.Fatalf("submit %v: status %d: %s", cmd, r.status, r.body)
	}
	return r.run(e.t)
}

// waitFinished polls until the run has finished.
func (e *testEnv) waitFinished(id string) sandgate.Run {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := e.store.GetRun(context.Background(), id); err == nil && r.State == sandgate.StateFinished && e.srv.node.runs.live.get(id) == nil {
			return *r
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatalf("run %s did not finish", id)
	return sandgate.Run{}
}

// waitRunning polls until the executor holds the run.
func (e *testEnv) waitRunning(id string) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		e.exec.mu.Lock()
		_, ok := e.exec.running[id]
		e.exec.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	e.t.Fatalf("run %s never reached the executor", id)
}

// readResponse reads a whole response.
func readResponse(t *testing.T, resp *http.Response) response {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}
