package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// capacityServer is a gateway with 2 run slots, sessions places and
// the default team share (half of each), whose principals are
// submitters named in principals (name: team); the server's own token
// (do, Client) is an admin's of another team.
func capacityServer(t testing.TB, sessions int, principals map[string]string) (*testServer, map[string]*client.Client) {
	t.Helper()
	var b strings.Builder
	admin := "tok-root-" + sandgatetest.RandomHex(t, 8)
	fmt.Fprintf(&b, "principals:\n  - name: root\n    team: ops\n    roles: [admin, auditor]\n    token_sha256: %s\n", gateway.HashToken(admin))
	tokens := map[string]string{}
	for name, team := range principals {
		tok := "tok-" + name + "-" + sandgatetest.RandomHex(t, 8)
		tokens[name] = tok
		fmt.Fprintf(&b, "  - name: %s\n    team: %s\n    roles: [submitter]\n    token_sha256: %s\n", name, team, gateway.HashToken(tok))
	}
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withEnv("SANDGATE_TOKENS_FILE", path), withEnv("SANDGATE_DEV", "0"),
		withEnv("SANDGATE_MAX_CONCURRENT", "2"), withEnv("SANDGATE_MAX_SESSIONS", fmt.Sprint(sessions)))
	s.Token = admin
	tokens["root"] = admin
	clients := map[string]*client.Client{}
	for name, tok := range tokens {
		c, err := client.New(s.URL, tok)
		if err != nil {
			t.Fatal(err)
		}
		c.HTTP = s.HTTP
		clients[name] = c
	}
	return s, clients
}

// flood submits n runs that would hold a slot for an hour, spread over
// clients, and returns their IDs once every one is admitted.
func flood(t testing.TB, n int, clients ...*client.Client) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := clients[i%len(clients)].Submit(context.Background(),
				sandgate.RunSpec{Command: []string{"sleep", "3600"}, TimeoutSeconds: 3600}, client.SubmitOptions{})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = v.ID
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("flood run: %v", err)
	}
	return ids
}

// checkOrder checks that bRun started and finished while team a still
// held its sessions, and before every run of a's flood but the share of
// the slots a may hold (1 of 2): the others wait with no container.
func checkOrder(t *testing.T, s *testServer, bRun api.RunView, sessions []api.SessionView, aRuns []string) {
	t.Helper()
	if outcomeOf(bRun) != sandgate.OutcomeSucceeded || bRun.StartedAt == nil {
		t.Fatalf("team b's run: %s %+v", outcomeOf(bRun), bRun)
	}
	for _, ss := range sessions {
		if got, ok := s.sessionState(t, ss.ID); !ok || got != sandgate.SessionOpen {
			t.Errorf("team a's session %s is %s, want still open", ss.ID, got)
		}
	}
	started := 0
	for _, id := range aRuns {
		v, ok := s.runState(t, id)
		if !ok {
			t.Fatalf("run %s not found", id)
		}
		if v.StartedAt == nil {
			if v.ContainerID != "" || v.State == sandgate.StateFinished {
				t.Errorf("team a's queued run %s: %s, container %q", id, v.State, v.ContainerID)
			}
			continue
		}
		started++
	}
	if started > 1 {
		t.Errorf("%d of team a's runs hold a slot, more than its share of 1 of 2", started)
	}
	t.Logf("team b's run started %s after it was admitted", bRun.StartedAt.Sub(bRun.CreatedAt))
}

// sessionState is the session's state as GET /v1/sessions/{id} shows it.
func (s *testServer) sessionState(t *testing.T, id string) (sandgate.SessionState, bool) {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, "/v1/sessions/"+id, "")
	var ss api.SessionView
	if status != http.StatusOK || json.Unmarshal(body, &ss) != nil {
		return "", false
	}
	return ss.State, true
}

// TestFairCapacity: with 2 run slots, team a holds two long sessions and
// floods the node with hour-long runs; team b's run, submitted after all
// of them, starts and finishes before any of a's queued runs starts, and
// while a's sessions are open. Sessions hold places of their own, and a
// team never holds more than its share of the run slots.
func TestFairCapacity(t *testing.T) {
	s, c := capacityServer(t, 4, map[string]string{"alice": "team-a", "bob": "team-b"})
	sessions := []api.SessionView{
		openSession(t, c["alice"], api.SessionRequest{MaxLifetimeSeconds: 28800}),
		openSession(t, c["alice"], api.SessionRequest{MaxLifetimeSeconds: 28800}),
	}
	aRuns := flood(t, 4, c["alice"])
	b, err := c["bob"].Submit(context.Background(), sandgate.RunSpec{Command: []string{"echo", "b"}}, client.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, s, s.waitFinished(t, b.ID, 2*time.Minute), sessions, aRuns)
}

// TestFairCapacityManyPrincipals attacks the fix: team a's runs come from
// many principals at once, each with the longest timeout, and its
// sessions are opened all at once, past its share of the session budget
// (2 of 3) and past the budget. Exactly the share opens; the rest are
// refused with RATE-LIMITED naming team_limits.sessions; a session of
// team b still opens, a third team's finds the budget spent; and team
// b's run still starts before a's queued runs.
func TestFairCapacityManyPrincipals(t *testing.T) {
	principals := map[string]string{"bob": "team-b", "carol": "team-c"}
	var alices []string
	for i := range 4 {
		name := fmt.Sprintf("alice%d", i)
		principals[name] = "team-a"
		alices = append(alices, name)
	}
	s, c := capacityServer(t, 3, principals)
	var (
		mu       sync.Mutex
		opened   []api.SessionView
		refusals []error
		wg       sync.WaitGroup
	)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss, err := c[alices[i%len(alices)]].CreateSession(context.Background(), api.SessionRequest{MaxLifetimeSeconds: 28800})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refusals = append(refusals, err)
				return
			}
			opened = append(opened, ss)
		}()
	}
	wg.Wait()
	if len(opened) != 2 {
		t.Fatalf("team a opened %d sessions at once, want its share of 2 (refusals: %v)", len(opened), refusals)
	}
	for _, err := range refusals {
		var se *sandgate.Error
		if !errors.As(err, &se) || se.Code != sandgate.CodeRateLimited || se.Details["field"] != "team_limits.sessions" {
			t.Errorf("a session past team a's share: %v, want RATE-LIMITED naming team_limits.sessions", err)
		}
	}
	openSession(t, c["bob"], api.SessionRequest{})
	var se *sandgate.Error
	if _, err := c["carol"].CreateSession(context.Background(), api.SessionRequest{}); !errors.As(err, &se) ||
		se.Code != sandgate.CodeRateLimited || se.Details["field"] != "SANDGATE_MAX_SESSIONS" {
		t.Errorf("a session past the node's budget: %v, want RATE-LIMITED naming SANDGATE_MAX_SESSIONS", err)
	}

	var floods []*client.Client
	for _, name := range alices {
		floods = append(floods, c[name])
	}
	aRuns := flood(t, 6, floods...)
	b, err := c["bob"].Submit(context.Background(), sandgate.RunSpec{Command: []string{"echo", "b"}}, client.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, s, s.waitFinished(t, b.ID, 2*time.Minute), opened, aRuns)
}
