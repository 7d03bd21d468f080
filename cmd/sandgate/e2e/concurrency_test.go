package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// TestConcurrentRunsThroughServer submits 200 runs, 16 at a time, to a
// real server with SANDGATE_MAX_CONCURRENT=16, with a mix of exit codes.
// Every run must come back with its exact code, leave no container, and
// have a complete audit trail of its own: requested, allowed, image
// resolved, created, started, exited (with its code), removed, once each,
// all with the run's correlation ID and container. The trail verifies
// afterwards. The rate is logged, never asserted.
func TestConcurrentRunsThroughServer(t *testing.T) {
	const runs, workers = 200, 16
	s := startServer(t, withEnv("SANDGATE_MAX_CONCURRENT", "16"), withEnv("SANDGATE_TEAM_SHARE", "100"))
	codes := []int{0, 1, 2, 3, 7, 42, 100, 255}
	bodyOf := func(code int) string {
		if code == 0 {
			return `{"command":["true"]}`
		}
		return fmt.Sprintf(`{"command":["sh","-c","exit %d"]}`, code)
	}

	client := s.checked(&http.Client{Timeout: 3 * time.Minute})
	type result struct {
		want int
		run  api.RunView
	}
	results := make([]result, runs)
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				want := codes[i%len(codes)]
				req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/runs?wait=120s", strings.NewReader(bodyOf(want)))
				if err != nil {
					t.Error(err)
					continue
				}
				req.Header.Set("Authorization", "Bearer "+s.Token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("run %d: %v", i, err)
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				var run api.RunView
				if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(body, &run) != nil {
					t.Errorf("run %d: %d %s (%v)", i, resp.StatusCode, body, err)
					continue
				}
				results[i] = result{want: want, run: run}
			}
		}()
	}
	for i := range runs {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d runs at %d concurrent in %v: %.2f runs/s (load %s)", runs, workers, elapsed.Round(time.Millisecond),
		float64(runs)/elapsed.Seconds(), loadAverage())
	if t.Failed() {
		t.FailNow()
	}

	containers := map[string]int{}
	for i, r := range results {
		run := r.run
		wantOutcome := sandgate.OutcomeSucceeded
		if r.want != 0 {
			wantOutcome = sandgate.OutcomeFailed
		}
		if run.State != sandgate.StateFinished || run.Outcome == nil || *run.Outcome != wantOutcome ||
			run.ExitCode == nil || *run.ExitCode != r.want || run.Error != nil {
			t.Errorf("run %d (%s): state %s outcome %v exit %v error %v, want finished %s exit %d",
				i, run.ID, run.State, orNil(run.Outcome), orNil(run.ExitCode), run.Error, wantOutcome, r.want)
		}
		if prev, dup := containers[run.ContainerID]; dup || run.ContainerID == "" {
			t.Errorf("run %d has container %q, as run %d does", i, run.ContainerID, prev)
		}
		containers[run.ContainerID] = i
	}
	if n := countContainers(t, sandgate.LabelNode, s.Node); n != 0 {
		t.Errorf("%d container(s) of node %s left behind", n, s.Node)
	}

	wantTypes := []sandgate.EventType{
		sandgate.EventRunRequested, sandgate.EventAdmissionAllowed, sandgate.EventImageResolved,
		sandgate.EventContainerCreated, sandgate.EventContainerStarted, sandgate.EventContainerExited,
		sandgate.EventContainerRemoved,
	}
	for i, r := range results {
		run := r.run
		events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}}, func(ev []sandgate.AuditRecord) bool {
			return hasEvent(ev, sandgate.EventContainerRemoved)
		})
		var got []sandgate.EventType
		for _, ev := range events {
			got = append(got, ev.Type)
			if ev.CorrelationID != run.CorrelationID || ev.RunID != run.ID {
				t.Errorf("run %d: %s has correlation %q run %q, want %q %q", i, ev.Type, ev.CorrelationID, ev.RunID, run.CorrelationID, run.ID)
			}
			switch ev.Type {
			case sandgate.EventContainerCreated, sandgate.EventContainerStarted, sandgate.EventContainerExited, sandgate.EventContainerRemoved:
				if ev.ContainerID != run.ContainerID {
					t.Errorf("run %d: %s container %q, want %q", i, ev.Type, ev.ContainerID, run.ContainerID)
				}
			}
			if ev.Type == sandgate.EventContainerExited && (ev.ExitCode == nil || *ev.ExitCode != r.want) {
				t.Errorf("run %d: container.exited exit code %v, want %d", i, orNil(ev.ExitCode), r.want)
			}
		}
		if diff := cmp.Diff(wantTypes, got); diff != "" {
			t.Errorf("run %d (%s) event types (-want +got):\n%s", i, run.ID, diff)
		}
	}

	status, _, body := s.do(t, http.MethodGet, "/v1/audit/verify", "")
	var report sandgate.VerifyReport
	if status != http.StatusOK || json.Unmarshal(body, &report) != nil || !report.OK || report.Checked == 0 {
		t.Errorf("GET /v1/audit/verify = %d %s", status, body)
	}
}

// orNil is *p, or nil for a nil pointer, for messages.
func orNil[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
