package gateway

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate"
)

// fakeReconciler is an executor that adopts runs with canned results.
type fakeReconciler struct {
	*fakeExecutor
	results map[string]sandgate.Result

	mu             sync.Mutex
	held           []string
	heldContainers []string
	adopted        []string
	// containers are the container IDs the adopted jobs carried, by run.
	containers map[string]string
}

func (f *fakeReconciler) Hold(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = append(f.held, ids...)
}

func (f *fakeReconciler) HoldContainers(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heldContainers = append(f.heldContainers, ids...)
}

func (f *fakeReconciler) Adopt(_ context.Context, job sandgate.Job) (sandgate.Result, error) {
	f.mu.Lock()
	f.adopted = append(f.adopted, job.RunID)
	if f.containers == nil {
		f.containers = map[string]string{}
	}
	f.containers[job.RunID] = job.ContainerID
	f.mu.Unlock()
	return f.results[job.RunID], nil
}

// TestReconcile adopts this node's unfinished runs, and only those, and
// stores how each ended; an executor that cannot adopt loses them.
func TestReconcile(t *testing.T) {
	seven := 7
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seed := []sandgate.Run{
		{ID: "run-running", Node: "test-node", State: sandgate.StateRunning, ContainerID: "c1"},
		{ID: "run-pending", Node: "test-node", State: sandgate.StatePending},
		{ID: "run-other-node", Node: "other", State: sandgate.StateRunning},
		{ID: "run-finished", Node: "test-node", State: sandgate.StateFinished, Outcome: sandgate.OutcomeSucceeded},
	}
	tests := []struct {
		name       string
		reconciler bool
		want       map[string]sandgate.Outcome
		wantHeld   []string
		// wantContainers are the held container IDs, and the container
		// IDs the adopted jobs carried, by run.
		wantHeldContainers []string
		wantContainers     map[string]string
		wantLost           int
	}{
		{
			name:       "reconciler adopts",
			reconciler: true,
			want: map[string]sandgate.Outcome{"run-running": sandgate.OutcomeFailed, "run-pending": sandgate.OutcomeLost,
				"run-other-node": "", "run-finished": sandgate.OutcomeSucceeded},
			wantHeld:           []string{"run-pending", "run-running"},
			wantHeldContainers: []string{"c1"},
			wantContainers:     map[string]string{"run-running": "c1", "run-pending": ""},
		},
		{
			name: "executor without Adopt loses the runs",
			want: map[string]sandgate.Outcome{"run-running": sandgate.OutcomeLost, "run-pending": sandgate.OutcomeLost,
				"run-other-node": "", "run-finished": sandgate.OutcomeSucceeded},
			wantLost: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for _, r := range seed {
				r.Principal, r.Team, r.CreatedAt = "alice", "payments", now
				if err := e.store.CreateRun(context.Background(), &r); err != nil {
					t.Fatal(err)
				}
			}
			var exec sandgate.Executor = e.exec
			rec := &fakeReconciler{fakeExecutor: e.exec, results: map[string]sandgate.Result{
				"run-running": {Outcome: sandgate.OutcomeFailed, ExitCode: &seven, ContainerID: "c1", FinishedAt: now.Add(time.Minute)},
				"run-pending": {Outcome: sandgate.OutcomeLost, FinishedAt: now.Add(time.Minute),
					Error: &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: "no container"}},
			}}
			if tc.reconciler {
				exec = rec
			}
			princ, err := NewPrincipals([]PrincipalEntry{{Name: "alice", Team: "payments",
				Roles: []sandgate.Role{sandgate.RoleSubmitter}, TokenSHA256: HashToken(tokAlice)}})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := New(Config{Node: "test-node", MaskKey: []byte("0123456789abcdef0123"), ShutdownGrace: time.Second},
				Deps{Admitter: e.admitter, Policies: e.policies, Recorder: e.recorder, Audit: e.audit, Runs: e.store,
					Executor: exec, Sandboxes: e.boxes, Principals: princ, Registry: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			n, err := srv.Reconcile(context.Background())
			if err != nil || n != 2 {
				t.Fatalf("Reconcile = %d, %v; want 2 runs", n, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			got := map[string]sandgate.Outcome{}
			for _, r := range seed {
				run, err := e.store.GetRun(context.Background(), r.ID)
				if err != nil {
					t.Fatal(err)
				}
				got[r.ID] = run.Outcome
				if run.Outcome == sandgate.OutcomeLost && (run.Error == nil || run.Error.Message == "") {
					t.Errorf("run %s lost without a reason", r.ID)
				}
				if r.ID == "run-running" && run.Outcome == sandgate.OutcomeFailed && (run.ExitCode == nil || *run.ExitCode != 7 || run.State != sandgate.StateFinished) {
					t.Errorf("adopted run = %s exit %v, want finished exit 7", run.State, run.ExitCode)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			sort.Strings(rec.held)
			if diff := cmp.Diff(tc.wantHeld, rec.held); diff != "" {
				t.Errorf("held (-want +got):\n%s", diff)
			}
			sort.Strings(rec.heldContainers)
			if diff := cmp.Diff(tc.wantHeldContainers, rec.heldContainers); diff != "" {
				t.Errorf("held containers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantContainers, rec.containers); diff != "" {
				t.Errorf("container IDs of the adopted jobs (-want +got):\n%s", diff)
			}
			if n := len(e.recorder.ofType(sandgate.EventRunLost)); n != tc.wantLost {
				t.Errorf("%d run.lost events from the gateway, want %d", n, tc.wantLost)
			}
		})
	}
}
