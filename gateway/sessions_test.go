package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

func (r response) session(t testing.TB) api.SessionView {
	t.Helper()
	var ss api.SessionView
	if err := json.Unmarshal(r.body, &ss); err != nil {
		t.Fatalf("decode session: %v: %s", err, r.body)
	}
	return ss
}

// TestSessionAdmission: a session is decided with operation session and
// its limits in input.session, a command with operation exec, the
// session's spec and the session's ID; a denied command is recorded and
// refused with the decision.
func TestSessionAdmission(t *testing.T) {
	e := newEnv(t)
	r := e.do("POST", "/v1/sessions", tokAlice, `{"idle_timeout_seconds":30,"env":{"A":"1"},"resources":{"memory_mb":64}}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	ss := r.session(t)
	in, ok := e.admitter.last(sandgate.OperationSession)
	if !ok || in.Session == nil || in.Session.IdleTimeoutSeconds != 30 || in.Session.MaxLifetimeSeconds != 3600 ||
		in.Request.Command[0] != "sleep" || in.Request.SessionID != ss.ID {
		t.Fatalf("session input: %+v %+v", in.Session, in.Request.RunSpec)
	}
	r = e.do("POST", "/v1/sessions/"+ss.ID+"/runs?wait=2s", tokAlice, `{"command":["echo","hi"],"env":{"B":"2"},"timeout_seconds":9}`)
	run := r.run(t)
	if r.status != 200 || run.Spec.SessionID != ss.ID || run.Stdout.Data != "hi\n" {
		t.Fatalf("exec: %d %+v", r.status, run)
	}
	in, _ = e.admitter.last(sandgate.OperationExec)
	if in.Session == nil || in.Session.ID != ss.ID || in.Request.TimeoutSeconds != 9 || in.Request.Resources.MemoryMB != 64 ||
		in.Request.Env["B"] != "2" || in.Request.Command[0] != "echo" {
		t.Errorf("exec input: %+v %+v", in.Session, in.Request.RunSpec)
	}
	if job := e.exec.lastJob(); job.SessionID != "" && job.SessionID != ss.ID {
		t.Errorf("job session %q", job.SessionID)
	}
	if r := e.do("POST", "/v1/runs", tokAlice, `{"command":["true"],"session_id":"`+ss.ID+`"}`); r.status != 400 || !strings.Contains(string(r.body), "session_id") {
		t.Errorf("a run naming the session: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/v1/sessions/"+ss.ID+"/runs", tokAlice, `{"command":["forbidden"]}`)
	if r.status != 403 || r.errorCode() != string(sandgate.CodePolicyDenied) {
		t.Errorf("denied command: %d %s", r.status, r.body)
	}
	denied := e.recorder.ofType(sandgate.EventAdmissionDenied)
	if len(denied) == 0 || denied[len(denied)-1].Payload["session_id"] != ss.ID || denied[len(denied)-1].Payload["operation"] != "exec" {
		t.Errorf("admission.denied of the command: %+v", denied)
	}
	// A session whose container cannot be made answers the executor's
	// error and is recorded as ended.
	r = e.do("POST", "/v1/sessions", tokAlice, `{"keepalive":["unavailable"]}`)
	if r.errorCode() != string(sandgate.CodeImageUnavailable) {
		t.Errorf("session without its image: %d %s", r.status, r.body)
	}
	var failed []sandgate.Event
	for _, ev := range e.recorder.ofType(sandgate.EventSessionEnded) {
		if ev.Outcome == string(sandgate.SessionError) && ev.Payload["error_code"] == string(sandgate.CodeImageUnavailable) {
			failed = append(failed, ev)
		}
	}
	if len(failed) != 1 {
		t.Errorf("session.ended of the failed session: %+v", e.recorder.ofType(sandgate.EventSessionEnded))
	}
	if got := e.do("GET", "/v1/sessions/"+ss.ID, tokAlice, "").session(t); got.Runs != 1 {
		t.Errorf("session runs = %d, want 1 (a denied command is no run)", got.Runs)
	}
}

// TestSessionTeamLimits: a session holds its place in its team's limits
// (a run's place, its memory and CPUs) for its whole life, and gives it
// back when it ends; its commands run inside it.
func TestSessionTeamLimits(t *testing.T) {
	e := newEnv(t, func(c *Config, e *testEnv) {
		e.admitter.limits = map[string]sandgate.TeamLimits{"payments": {MemoryMB: 512}}
	})
	ss := e.do("POST", "/v1/sessions", tokAlice, `{}`).session(t)
	if r := e.do("POST", "/v1/sessions", tokAlice, `{}`); r.status != 429 {
		t.Errorf("second session: %d, want 429", r.status)
	}
	if r := e.do("POST", "/v1/runs", tokAlice, echoBody); r.status != 429 {
		t.Errorf("a run beside the session: %d, want 429", r.status)
	}
	// A command in the session is inside the session's place.
	if r := e.do("POST", "/v1/sessions/"+ss.ID+"/runs?wait=2s", tokAlice, echoBody); r.status != 200 {
		t.Errorf("command in the session: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/metrics", "", ""); !strings.Contains(string(r.body), "sandgate_sessions_open 1") {
		t.Errorf("metrics do not count the open session")
	}
	if r := e.do("DELETE", "/v1/sessions/"+ss.ID, tokBob, ""); r.status != 404 {
		t.Errorf("another team's delete: %d, want 404", r.status)
	}
	if r := e.do("DELETE", "/v1/sessions/"+ss.ID, tokAlice, ""); r.status != 200 || r.session(t).EndReason != sandgate.SessionDeleted {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := e.do("POST", "/v1/runs?wait=2s", tokAlice, echoBody)
		if r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run after the session ended: %d %s", r.status, r.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ended := e.recorder.ofType(sandgate.EventSessionEnded)
	if len(ended) != 1 || ended[0].Outcome != "deleted" {
		t.Errorf("session.ended events: %+v", ended)
	}
}
