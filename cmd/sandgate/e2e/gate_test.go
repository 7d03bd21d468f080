package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/policies"
)

// The one gate, end to end: what it promises that only the whole stack
// can show (real policy engine, real Postgres trail, real Docker).

// gatePrincipals are a submitter of each of two teams, and an admin.
var gatePrincipals = []authPrincipal{
	{"alice", "alpha", []sandgate.Role{sandgate.RoleSubmitter}},
	{"bob", "beta", []sandgate.Role{sandgate.RoleSubmitter}},
	{"adam", "alpha", []sandgate.Role{sandgate.RoleAdmin}},
}

// startGateServer starts a server with the gate's principals and returns
// it, their tokens and a client of each.
func startGateServer(t *testing.T, opts ...serverOption) (*testServer, map[string]string, map[string]*client.Client) {
	t.Helper()
	tokensFile, tok := writeTokensFile(t, gatePrincipals)
	opts = append([]serverOption{withEnv("SANDGATE_DEV", "0"), withEnv("SANDGATE_TOKENS_FILE", tokensFile)}, opts...)
	s := startServer(t, opts...)
	clients := map[string]*client.Client{}
	for name, token := range tok {
		c, err := client.New(s.URL, token)
		if err != nil {
			t.Fatal(err)
		}
		c.HTTP = s.HTTP
		clients[name] = c
	}
	return s, tok, clients
}

// TestReplaySessionCommandsExact: ten commands run in a session are
// recorded in the decision record's one shape, so that a candidate that
// denies sh in sessions reports each of them newly denied by its rule,
// exactly (not approximately), and the session's own decision unchanged.
// Before the one shape, every session and command replayed as operation
// run, approximately, and the candidate looked safe: "0 newly denied".
func TestReplaySessionCommandsExact(t *testing.T) {
	s, tok, c := startGateServer(t)
	ctx := context.Background()
	since := time.Now().Add(-time.Second)
	ss := openSession(t, c["alice"], api.SessionRequest{})
	t.Cleanup(func() { c["alice"].DeleteSession(context.Background(), ss.ID) })
	for i := range 10 {
		run := execWait(t, c["alice"], ss.ID, api.ExecRequest{Command: []string{"sh", "-c", fmt.Sprintf("echo %d", i)}})
		if outcomeOf(run) != sandgate.OutcomeSucceeded {
			t.Fatalf("command %d = %+v", i, run)
		}
	}
	candidate := bundleWith(t, func(cfg map[string]any) { cfg["denied_exec_commands"] = []string{"sh"} })
	files, err := policies.BundleFiles(candidate)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c["adam"].ReplayPolicy(ctx, files, client.ReplayOptions{Since: since, Examples: 20})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if rep.Replayed != 11 || rep.Approximate != 0 || rep.Unchanged != 1 || rep.NewlyDenied.Count != 10 {
		t.Errorf("replayed %d approximate %d unchanged %d newly denied %d; want 11 0 1 10",
			rep.Replayed, rep.Approximate, rep.Unchanged, rep.NewlyDenied.Count)
	}
	if diff := cmp.Diff([]string{"denied_exec_command added 10"}, replayGroups(rep.NewlyDenied)); diff != "" {
		t.Fatalf("newly denied (-want +got):\n%s", diff)
	}
	for _, ex := range rep.NewlyDenied.Rules[0].Examples {
		if ex.Operation != string(sandgate.OperationExec) || ex.Approximate || ex.Principal != "alice" || !ex.RecordedAllow || ex.CandidateAllow {
			t.Errorf("example %+v, want an exact exec of alice's, allowed then, denied now", ex)
		}
	}
	// The records say how the principal signed in and with which roles.
	evs := s.auditEvents(t, tok["adam"], map[string][]string{"type": {string(sandgate.EventRunRequested)}})
	for _, ev := range evs {
		rec, ok := sandgate.ReadDecisionRecord(ev.Payload)
		if !ok || rec.SignIn != sandgate.SignInToken || len(rec.Input.Principal.Roles) != 1 || rec.Input.Session == nil {
			t.Errorf("run.requested %s: record %+v (%v)", ev.RunID, rec, ok)
		}
	}
}

// TestUploadRefusedBeforeRead: a 256 MiB upload streamed to another
// team's session, and to a session that does not exist, is answered 404,
// the same for both, before 1 MiB of it is on the gateway's disk: the
// upload directory is looked at while the body is still being sent.
// Before the gate, the whole body was spooled, then the session checked.
func TestUploadRefusedBeforeRead(t *testing.T) {
	s, tok, c := startGateServer(t)
	ss := openSession(t, c["alice"], api.SessionRequest{})
	t.Cleanup(func() { c["alice"].DeleteSession(context.Background(), ss.ID) })
	uploads := s.Env["SANDGATE_UPLOAD_DIR"]
	answers := map[string]string{}
	for name, id := range map[string]string{"another team's": ss.ID, "none": uuid.Must(uuid.NewV7()).String()} {
		t.Run(name, func(t *testing.T) {
			up := startUpload(t, s, tok["bob"], "/v1/sessions/"+id+"/files?path=big.bin", 256<<20)
			defer up.stop()
			// Wait for the answer, or for 8 MiB to have gone out.
			select {
			case <-up.answered:
			case <-up.reached:
			case <-time.After(2 * time.Minute):
				t.Fatal("no answer and no progress")
			}
			held := dirBytes(t, uploads)
			if sent := up.sent.Load(); sent >= 256<<20 {
				t.Fatalf("the whole body was sent (%d bytes) before the check", sent)
			}
			if held >= 1<<20 {
				t.Errorf("%d bytes of the upload are on the gateway's disk while it is being sent, want less than 1 MiB", held)
			}
			up.resume()
			status, body := up.answer(t)
			if status != http.StatusNotFound {
				t.Fatalf("PUT to %s session = %d %s, want 404", name, status, body)
			}
			var e api.ErrorBody
			_ = json.Unmarshal(body, &e)
			answers[name] = string(e.Error.Code) + " " + strings.ReplaceAll(e.Error.Message, id, "{id}")
		})
	}
	if answers["another team's"] != answers["none"] {
		t.Errorf("another team's session answered %q, one that does not exist %q", answers["another team's"], answers["none"])
	}
	if held := dirBytes(t, uploads); held != 0 {
		t.Errorf("%d bytes left in the upload directory", held)
	}
}

// upload is a PUT whose body a goroutine streams.
type upload struct {
	sent     atomic.Int64
	reached  chan struct{}
	go_      chan struct{}
	answered chan struct{}
	status   int
	body     []byte
	err      error
	cancel   context.CancelFunc
}

// startUpload PUTs size bytes to path as token, declaring them, with the
// body written 64 KiB at a time; after 8 MiB it waits for resume.
func startUpload(t *testing.T, s *testServer, token, path string, size int64) *upload {
	return startUploadPaused(t, s, token, path, size, 8<<20)
}

// startUploadPaused is startUpload pausing after pauseAt bytes: an upload
// that stalls until resumed or stopped.
func startUploadPaused(t *testing.T, s *testServer, token, path string, size, pauseAt int64) *upload {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	up := &upload{reached: make(chan struct{}), go_: make(chan struct{}), answered: make(chan struct{}), cancel: cancel}
	pr, pw := io.Pipe()
	go func() {
		chunk := make([]byte, 64<<10)
		paused := false
		for up.sent.Load() < size {
			n := min(int64(len(chunk)), size-up.sent.Load())
			if _, err := pw.Write(chunk[:n]); err != nil {
				return
			}
			up.sent.Add(n)
			if !paused && up.sent.Load() >= pauseAt {
				paused = true
				close(up.reached)
				select {
				case <-up.go_:
				case <-ctx.Done():
					pw.CloseWithError(ctx.Err())
					return
				}
			}
		}
		pw.Close()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.URL+path, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/octet-stream")
	go func() {
		defer close(up.answered)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			up.err = err
			return
		}
		defer resp.Body.Close()
		up.status = resp.StatusCode
		up.body, _ = io.ReadAll(resp.Body)
	}()
	return up
}

// resume lets the body go on after its pause.
func (u *upload) resume() {
	select {
	case <-u.go_:
	default:
		close(u.go_)
	}
}

// stop ends the upload from the client's side.
func (u *upload) stop() { u.cancel() }

// answer waits for the answer.
func (u *upload) answer(t *testing.T) (int, []byte) {
	t.Helper()
	select {
	case <-u.answered:
	case <-time.After(2 * time.Minute):
		t.Fatal("no answer to the upload")
	}
	if u.err != nil {
		t.Fatalf("upload: %v", u.err)
	}
	return u.status, u.body
}

// dirBytes is how many bytes the files under dir hold on disk.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStalledUploadsHoldNoMoreThanQuota: eight uploads of one principal
// that stall after their first MiB cannot hold more than the principal's
// quota: two are read (64 MiB declared), six are refused at once,
// RATE-LIMITED, before a byte of theirs is read. A stalled upload is cut
// at the minimum rate's window and its bytes freed; one whose client goes
// away is freed too, so that reconnecting does not keep space held.
// Before the quotas, eight stalled uploads held 2 GiB until the read
// timeout.
func TestStalledUploadsHoldNoMoreThanQuota(t *testing.T) {
	const quota = 64 << 20
	s, tok, c := startGateServer(t,
		withEnv("SANDGATE_UPLOAD_PRINCIPAL_BYTES", fmt.Sprint(quota)),
		withEnv("SANDGATE_UPLOAD_RATE_WINDOW", "3s"))
	ss := openSession(t, c["alice"], api.SessionRequest{})
	t.Cleanup(func() { c["alice"].DeleteSession(context.Background(), ss.ID) })
	path := "/v1/sessions/" + ss.ID + "/files?path=stalled.bin"
	uploadDir := s.Env["SANDGATE_UPLOAD_DIR"]

	// stall starts n uploads of 32 MiB that stall after their first MiB,
	// and waits until every one is either answered or being read: the
	// gateway's count of uploads in flight says how many it reads.
	stall := func(n int) ([]*upload, int) {
		var all []*upload
		for range n {
			all = append(all, startUploadPaused(t, s, tok["alice"], path, 32<<20, 1<<20))
		}
		deadline := time.Now().Add(time.Minute)
		for {
			var ups []*upload
			refused := 0
			for _, up := range all {
				select {
				case <-up.answered:
					if up.status != http.StatusTooManyRequests || !strings.Contains(string(up.body), string(sandgate.CodeRateLimited)) {
						t.Fatalf("an upload past the quota = %d %s (%v), want 429 RATE-LIMITED", up.status, up.body, up.err)
					}
					refused++
				default:
					ups = append(ups, up)
				}
			}
			if int(uploadGauge(t, s, "sandgate_uploads_in_flight")) == len(ups) && refused+len(ups) == n {
				return ups, refused
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d uploads refused, %d not answered, %d in flight", refused, len(ups), uploadGauge(t, s, "sandgate_uploads_in_flight"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ups, refused := stall(8)
	if len(ups) != 2 || refused != 6 {
		t.Fatalf("%d uploads read, %d refused; want 2 and 6 (a quota of %d bytes, 32 MiB each)", len(ups), refused, quota)
	}
	if held := uploadGauge(t, s, "sandgate_upload_bytes"); held > quota {
		t.Errorf("uploads hold %d bytes, more than the quota %d", held, quota)
	}
	if held := dirBytes(t, uploadDir); held > 2*(1<<20)+64<<10 {
		t.Errorf("the upload directory holds %d bytes for two stalled uploads of 1 MiB", held)
	}
	// The stalled uploads are cut at the end of their window.
	for _, up := range ups {
		select {
		case <-up.answered:
		case <-time.After(time.Minute):
			t.Fatal("a stalled upload was not cut")
		}
		if up.err == nil && (up.status != http.StatusBadRequest || !strings.Contains(string(up.body), "slower than")) {
			t.Errorf("a stalled upload was answered %d %s, want 400 naming the minimum rate", up.status, up.body)
		}
	}
	waitGauge(t, s, "sandgate_upload_bytes", 0)
	if held := dirBytes(t, uploadDir); held != 0 {
		t.Errorf("%d bytes left in the upload directory after the stalled uploads were cut", held)
	}

	// A client that goes away frees what its upload held: it may
	// reconnect and upload as much again.
	ups, refused = stall(4)
	if len(ups) != 2 || refused != 2 {
		t.Fatalf("again: %d uploads read, %d refused; want 2 and 2", len(ups), refused)
	}
	for _, up := range ups {
		up.stop()
	}
	waitGauge(t, s, "sandgate_upload_bytes", 0)
	r, err := c["alice"].PutFile(context.Background(), ss.ID, "after.bin", 0o644, strings.NewReader(strings.Repeat("x", 32<<20)))
	if err != nil || r.Bytes != 32<<20 {
		t.Fatalf("an upload after the others went away = %+v, %v", r, err)
	}
	if held := dirBytes(t, uploadDir); held != 0 {
		t.Errorf("%d bytes left in the upload directory", held)
	}
}

// uploadGauge reads one of the uploads' gauges from /metrics.
func uploadGauge(t *testing.T, s *testServer, name string) int64 {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return int64(f)
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// waitGauge waits until a gauge reads want.
func waitGauge(t *testing.T, s *testServer, name string, want int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for uploadGauge(t, s, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d, want %d", name, uploadGauge(t, s, name), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestExistenceAnswersAlike: every route that names a run or a session
// answers another team's object exactly as one that does not exist: the
// same status, code and message (the ID aside), and nothing of the object.
// Before, a run naming another team's session_id answered 400 "names a
// session", where a session that does not exist was taken as a label.
func TestExistenceAnswersAlike(t *testing.T) {
	s, tok, c := startGateServer(t)
	finished := s.submitWait(t, tok["alice"], `{"command":["true"]}`)
	status, _, body := s.doAs(t, tok["alice"], http.MethodPost, "/v1/runs", `{"command":["sleep","60"]}`)
	var running api.RunView
	if err := json.Unmarshal(body, &running); status != http.StatusAccepted || err != nil {
		t.Fatalf("a running run: %d %s", status, body)
	}
	t.Cleanup(func() { s.doAs(t, tok["alice"], http.MethodDelete, "/v1/runs/"+running.ID, "") })
	ss := openSession(t, c["alice"], api.SessionRequest{})
	t.Cleanup(func() { c["alice"].DeleteSession(context.Background(), ss.ID) })

	type route struct {
		method, path, body string
		// object is the alpha object the path names: a run or a session.
		object string
	}
	routes := []route{
		{http.MethodGet, "/v1/runs/{id}", "", finished.ID},
		{http.MethodGet, "/v1/runs/{id}", "", running.ID},
		{http.MethodGet, "/v1/runs/{id}/logs", "", running.ID},
		{http.MethodGet, "/v1/runs/{id}/logs?follow=true", "", running.ID},
		{http.MethodGet, "/v1/runs/{id}/artifacts", "", finished.ID},
		{http.MethodGet, "/v1/runs/{id}/artifacts/out.txt", "", finished.ID},
		{http.MethodGet, "/v1/runs/{id}/artifacts.tar", "", finished.ID},
		{http.MethodGet, "/v1/runs/{id}/receipt", "", finished.ID},
		{http.MethodDelete, "/v1/runs/{id}", "", finished.ID},
		{http.MethodDelete, "/v1/runs/{id}", "", running.ID},
		{http.MethodGet, "/v1/sessions/{id}", "", ss.ID},
		{http.MethodDelete, "/v1/sessions/{id}", "", ss.ID},
		{http.MethodPost, "/v1/sessions/{id}/runs", `{"command":["true"]}`, ss.ID},
		{http.MethodPut, "/v1/sessions/{id}/files?path=a.txt", "x", ss.ID},
		{http.MethodGet, "/v1/sessions/{id}/files?path=.", "", ss.ID},
		{http.MethodPost, "/v1/runs", `{"command":["true"],"session_id":"{id}"}`, ss.ID},
		{http.MethodGet, "/v1/runs?session_id={id}", "", ss.ID},
	}
	answer := func(token string, r route, id string) string {
		t.Helper()
		req := request{method: r.method, path: strings.ReplaceAll(r.path, "{id}", id), body: strings.ReplaceAll(r.body, "{id}", id), token: token}
		status, _, body := s.send(t, http.DefaultClient, req)
		return fmt.Sprintf("%d %s", status, strings.ReplaceAll(string(body), id, "{id}"))
	}
	for _, r := range routes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			other := answer(tok["bob"], r, r.object)
			none := answer(tok["bob"], r, uuid.Must(uuid.NewV7()).String())
			if !strings.HasPrefix(none, "404 ") && !strings.HasPrefix(none, "200 ") {
				t.Errorf("an object that does not exist = %s, want 404 (or an empty list)", none)
			}
			// The correlation ID differs from answer to answer.
			if diff := cmp.Diff(withoutCorrelation(none), withoutCorrelation(other)); diff != "" {
				t.Errorf("another team's object answers otherwise than none (-none +another team's):\n%s", diff)
			}
			if strings.Contains(other, "alpha") || strings.Contains(other, "alice") {
				t.Errorf("the answer names the object's team or owner: %s", other)
			}
		})
	}
	// The owner's own requests reach the objects.
	if got := answer(tok["alice"], route{http.MethodGet, "/v1/runs/{id}", "", ""}, finished.ID); !strings.HasPrefix(got, "200 ") {
		t.Errorf("alice's own run = %s", got)
	}
	if got := answer(tok["alice"], route{http.MethodPost, "/v1/runs", `{"command":["true"],"session_id":"{id}"}`, ""}, ss.ID); !strings.HasPrefix(got, "400 ") {
		t.Errorf("a run naming alice's own session = %s, want 400 naming session_id", got)
	}
}

// withoutCorrelation drops an error answer's correlation ID.
func withoutCorrelation(answer string) string {
	status, body, _ := strings.Cut(answer, " ")
	var e map[string]any
	if json.Unmarshal([]byte(body), &e) != nil {
		return answer
	}
	if inner, ok := e["error"].(map[string]any); ok {
		delete(inner, "correlation_id")
	}
	raw, _ := json.Marshal(e)
	return status + " " + string(raw)
}
