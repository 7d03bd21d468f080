package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/gateway/api"
)

// TestTwoGatewaysOneNode starts a second gateway with the first one's
// node name on the same daemon, with a database and state of its own, as
// `make run` beside another gateway did: it used to start, reap the first
// one's running container as an orphan ("removed orphans count=1") and
// adopt what it could. Now the first holds a lease on its node name on the
// daemon: the second is refused at start, naming the holder, and the
// first one's run goes on untouched. `sandbox list` on that node does not
// call the serving gateway's running container an orphan.
func TestTwoGatewaysOneNode(t *testing.T) {
	a := startServer(t)
	status, _, body := a.do(t, http.MethodPost, "/v1/runs", `{"command":["sleep","300"]}`)
	if status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", status, body)
	}
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, a, run.ID)

	// The second gateway: the same node and daemon, everything else its own.
	env := maps.Clone(a.Env)
	state := t.TempDir()
	env["SANDGATE_DATABASE_URL"] = audittest.NewDatabase(t)
	for k, dir := range map[string]string{"SANDGATE_SPOOL_DIR": "/spool", "SANDGATE_VOLUME_DIR": "/volumes",
		"SANDGATE_WORKSPACE_DIR": "/workspaces", "SANDGATE_UPLOAD_DIR": "/uploads"} {
		env[k] = state + dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	listened := false
	err := runApp(ctx, []string{"serve"}, env, &logs, func(string, string) { listened = true; cancel() })
	if listened || err == nil || !strings.Contains(err.Error(), a.Node) || !strings.Contains(err.Error(), "held by a live gateway") {
		t.Errorf("a second gateway on node %s: listened %t, err %v; want it refused at start naming the holder\n%s", a.Node, listened, err, logs.String())
	}

	// The first gateway's run was not touched.
	got := a.getRun(t, run.ID)
	if got.State != sandgate.StateRunning || countContainers(t, sandgate.LabelRunID, run.ID) != 1 {
		t.Errorf("the first gateway's run: state %s outcome %v, %d container(s); want it running in its container",
			got.State, got.Outcome, countContainers(t, sandgate.LabelRunID, run.ID))
	}

	// An admin's sandbox list of the node sees it as owned.
	var out bytes.Buffer
	if err := runApp(context.Background(), []string{"sandbox", "list", "--json"}, env, &out, nil); err != nil {
		t.Fatalf("sandbox list: %v\n%s", err, out.String())
	}
	var list struct {
		Sandboxes []sandgate.Sandbox `json:"sandboxes"`
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatalf("sandbox list: %v: %s", err, out.String())
	}
	seen := false
	for _, b := range list.Sandboxes {
		seen = seen || b.RunID == run.ID
		if b.RunID == run.ID && b.Orphan {
			t.Errorf("sandbox list marks the serving gateway's running container as an orphan: %+v", b)
		}
	}
	if !seen {
		t.Errorf("sandbox list does not show the run's container: %s", out.String())
	}
	if status, _, body := a.do(t, http.MethodDelete, "/v1/runs/"+run.ID, ""); status >= 300 {
		t.Fatalf("cancel: %d %s", status, body)
	}
}

// waitRunning waits until the run is running on s.
func waitRunning(t *testing.T, s *testServer, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.getRun(t, id).State != sandgate.StateRunning {
		if time.Now().After(deadline) {
			t.Fatalf("run %s did not start within a minute", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getRun is GET /v1/runs/{id}.
func (s *testServer) getRun(t *testing.T, id string) api.RunView {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, "/v1/runs/"+id, "")
	if status != http.StatusOK {
		t.Fatalf("get run %s: %d %s", id, status, body)
	}
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil {
		t.Fatal(err)
	}
	return run
}
