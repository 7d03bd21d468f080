package e2e

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/api/apitest"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/policies"
)

// TestEndToEndOpenAPI drives the main flows of the API through a real
// gateway (Docker, Postgres, the default policy bundle loaded from a
// directory, a tokens file): the harness's checker validates every
// request and answer against the OpenAPI document, and the test then
// requires a validated success of every operation and the error answers
// clients rely on.
// validatedElsewhere are the operations whose successful answers are
// validated against the document by the end-to-end test of their own
// capability (its gateway's clients go through the same checker), which
// sets up what they need: secrets with a key file, a session's terminal
// and ports, approvals with an approver, MCP clients, recipe images.
var validatedElsewhere = map[string]string{
	"putSecret": "TestEndToEndSecrets", "listSecrets": "TestEndToEndSecrets", "deleteSecret": "TestEndToEndSecrets",
	"openSessionTerminal": "TestEndToEndTerminal",
	"getSessionPort":      "TestEndToEndPortPreview", "putSessionPort": "TestEndToEndPortPreview", "postSessionPort": "TestEndToEndPortPreview",
	"patchSessionPort": "TestEndToEndPortPreview", "deleteSessionPort": "TestEndToEndPortPreview",
	"listApprovals": "TestApprovalsEndToEnd", "getApproval": "TestApprovalsEndToEnd",
	"approveApproval": "TestApprovalsEndToEnd", "denyApproval": "TestApprovalsEndToEnd",
	"postMCP": "TestMCPGoClientHTTP", "getMCP": "TestMCPGoClientHTTP", "deleteMCP": "TestMCPGoClientHTTP",
	"imagePackages":      "TestImagePackagesEndToEnd",
	"mintSessionPreview": "TestPortPreviewLinks", "getSessionPreview": "TestPortPreviewLinks", "putSessionPreview": "TestPortPreviewLinks",
	"postSessionPreview": "TestPortPreviewLinks", "patchSessionPreview": "TestPortPreviewLinks", "deleteSessionPreview": "TestPortPreviewLinks",
}

func TestEndToEndOpenAPI(t *testing.T) {
	tokens, tok := writeTokensFile(t, authPrincipals)
	policy := bundleWith(t, func(c map[string]any) {
		// Team beta has a memory budget smaller than one run's ask.
		c["team_limits"].(map[string]any)["teams"] = map[string]any{
			"beta": map[string]any{"concurrent": 8, "queued": 64, "memory_mb": 100, "cpus": 0},
		}
	})
	// The witness the gateway's operator pins (its cosignature and alarm
	// are posted below).
	_, wkey, _ := ed25519.GenerateKey(nil)
	signer := proof.NewCosigner("witness.e2e", wkey)
	witnesses := filepath.Join(t.TempDir(), "witnesses")
	if err := os.WriteFile(witnesses, []byte(signer.VerifierKey()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withEnv("SANDGATE_TOKENS_FILE", tokens), withEnv("SANDGATE_DEV", "0"),
		withEnv("SANDGATE_POLICY_DIR", policy), withEnv("SANDGATE_CHECKPOINT_EVERY", "2"),
		withEnv("SANDGATE_AUDIT_WITNESS_KEYS_FILE", witnesses))
	alice := clientAs(t, s, tok["alice"])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	want := func(r request, status int) []byte {
		t.Helper()
		got, _, body := s.send(t, http.DefaultClient, r)
		if got != status {
			t.Errorf("%s %s as %s: %d, want %d: %.300s", r.method, r.path, tokenName(tok, r.token), got, status, body)
		}
		return body
	}

	// Runs: submit and wait, get, list, stream, cancel.
	var done api.RunView
	if err := json.Unmarshal(want(request{method: "POST", path: "/v1/runs?wait=60s", token: tok["alice"],
		body: `{"command":["sh","-c","echo hello; echo oops >&2"]}`}, 200), &done); err != nil || done.Stdout.Data != "hello\n" {
		t.Fatalf("run = %+v, %v", done, err)
	}
	want(request{method: "GET", path: "/v1/runs/" + done.ID, token: tok["audrey"]}, 200)
	want(request{method: "GET", path: "/v1/runs?state=finished&limit=10", token: tok["alice"]}, 200)
	var withOutput api.RunList
	if err := json.Unmarshal(want(request{method: "GET", path: "/v1/runs?include=output", token: tok["adam"]}, 200), &withOutput); err != nil ||
		len(withOutput.Runs) == 0 || withOutput.Runs[0].Stdout.Data != "hello\n" {
		t.Errorf("runs with output = %+v, %v", withOutput, err)
	}
	list, err := alice.Runs(ctx, client.ListOptions{WithOutput: true, Limit: 1})
	if err != nil || len(list.Runs) != 1 || list.Runs[0].Stdout.Data != "hello\n" {
		t.Errorf("client list with output = %+v, %v", list, err)
	}
	_, header, _ := s.send(t, http.DefaultClient, request{method: "GET", path: "/v1/runs/" + done.ID + "/logs", token: tok["alice"]})
	if ct := header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("logs Content-Type = %q", ct)
	}
	short, err := alice.Submit(ctx, sandgate.RunSpec{Command: []string{"sh", "-c", "echo one; sleep 1; echo two"}}, client.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	err = alice.Logs(ctx, short.ID, true, func(ev api.LogEvent) error {
		if ev.Event == api.EventStdout {
			b, err := ev.Chunk()
			streamed.Write(b)
			return err
		}
		return nil
	})
	if err != nil || streamed.String() != "one\ntwo\n" {
		t.Errorf("followed logs = %q, %v", streamed.String(), err)
	}
	long, err := alice.Submit(ctx, sandgate.RunSpec{Command: []string{"sleep", "60"}}, client.SubmitOptions{IdempotencyKey: "openapi-1"})
	if err != nil {
		t.Fatal(err)
	}
	want(request{method: "POST", path: "/v1/runs", token: tok["alice"], body: `{"command":["sleep","60"]}`,
		header: map[string]string{"Idempotency-Key": "openapi-1"}}, 202)
	want(request{method: "POST", path: "/v1/runs", token: tok["alice"], body: `{"command":["sleep","61"]}`,
		header: map[string]string{"Idempotency-Key": "openapi-1"}}, 409)
	if _, err := alice.Cancel(ctx, long.ID); err != nil {
		t.Errorf("cancel: %v", err)
	}
	want(request{method: "DELETE", path: "/v1/runs/" + done.ID, token: tok["alice"]}, 409)

	// Artifacts: a run that leaves one; listed, fetched whole, by range
	// and as tar.
	var art api.RunView
	if err := json.Unmarshal(want(request{method: "POST", path: "/v1/runs?wait=60s", token: tok["alice"],
		body: `{"command":["sh","-c","mkdir out; echo result > out/r.txt"],"artifacts":["out/**"]}`}, 200), &art); err != nil || art.Artifacts == nil || art.Artifacts.Count != 1 {
		t.Errorf("run with an artifact = %+v, %v", art, err)
	}
	want(request{method: "GET", path: "/v1/runs/" + art.ID + "/artifacts", token: tok["audrey"]}, 200)
	if got := want(request{method: "GET", path: "/v1/runs/" + art.ID + "/artifacts/out/r.txt", token: tok["alice"]}, 200); string(got) != "result\n" {
		t.Errorf("artifact = %q", got)
	}
	want(request{method: "GET", path: "/v1/runs/" + art.ID + "/artifacts/out/r.txt", token: tok["alice"], header: map[string]string{"Range": "bytes=0-2"}}, 206)
	want(request{method: "GET", path: "/v1/runs/" + art.ID + "/artifacts/out/none", token: tok["alice"]}, 404)
	want(request{method: "GET", path: "/v1/runs/" + art.ID + "/artifacts.tar", token: tok["adam"]}, 200)
	want(request{method: "GET", path: "/v1/runs/" + art.ID + "/artifacts", token: tok["bob"]}, 404)

	// Refusals: a bad field, policy, roles, tokens, other teams, limits.
	var bad api.ErrorBody
	if err := json.Unmarshal(want(request{method: "POST", path: "/v1/runs", token: tok["alice"],
		body: `{"command":["true"],"priviledged":true}`}, 400), &bad); err != nil || bad.Error.Details["field"] != "priviledged" {
		t.Errorf("field error = %+v, %v", bad, err)
	}
	_, err = alice.Submit(ctx, sandgate.RunSpec{Command: []string{"true"}, Privileged: true}, client.SubmitOptions{})
	if d, derr := api.DecisionFromDetails(detailsOf(err)); sandgate.ErrorCodeOf(err) != sandgate.CodePolicyDenied || derr != nil || len(d.Violations) == 0 {
		t.Errorf("denied submit = %v, decision %+v %v", err, d, derr)
	}
	want(request{method: "POST", path: "/v1/runs", token: tok["audrey"], body: `{"command":["true"]}`}, 403)
	want(request{method: "POST", path: "/v1/runs", token: "", body: `{"command":["true"]}`}, 401)
	want(request{method: "GET", path: "/v1/runs/" + done.ID, token: tok["bob"]}, 404)
	want(request{method: "GET", path: "/v1/runs/01900000-0000-7000-8000-000000000000/logs", token: tok["alice"]}, 404)
	want(request{method: "POST", path: "/v1/runs", token: tok["bob"], body: `{"command":["true"],"resources":{"memory_mb":128}}`}, 429)
	want(request{method: "GET", path: "/v1/runs?limit=5000", token: tok["alice"]}, 400)
	want(request{method: "PUT", path: "/v1/runs", token: tok["alice"]}, 405)

	// Policy.
	var d api.DecisionView
	if err := json.Unmarshal(want(request{method: "POST", path: "/v1/admission/review", token: tok["bob"],
		body: `{"command":["true"],"privileged":true}`}, 200), &d); err != nil || d.Allow || d.Spec == nil {
		t.Errorf("review = %+v, %v", d, err)
	}
	want(request{method: "GET", path: "/v1/policies", token: tok["sam"]}, 200)
	want(request{method: "POST", path: "/v1/policies/reload", token: tok["sam"]}, 200)
	files, err := policies.BundleFiles(policy)
	if err != nil {
		t.Fatal(err)
	}
	replay := api.ReplayRequest{Files: map[string]string{}}
	for name, data := range files {
		replay.Files[name] = string(data)
	}
	body, _ := json.Marshal(replay)
	var replayed api.ReplayReport
	if err := json.Unmarshal(want(request{method: "POST", path: "/v1/policies/replay?examples=1", token: tok["sam"], body: string(body)}, 200), &replayed); err != nil ||
		replayed.Replayed == 0 || replayed.NewlyDenied.Count+replayed.NewlyAllowed.Count+replayed.Changed.Count != 0 {
		t.Errorf("replay with the bundle in force = %+v, %v", replayed, err)
	}
	replay.Files["broken.rego"] = "package sandgate.admission\n\nbroken := {"
	body, _ = json.Marshal(replay)
	want(request{method: "POST", path: "/v1/policies/replay", token: tok["adam"], body: string(body)}, 422)

	// The audit trail.
	q := url.Values{"run_id": {done.ID}}.Encode()
	want(request{method: "GET", path: "/v1/audit/events?" + q, token: tok["audrey"]}, 200)
	want(request{method: "GET", path: "/v1/audit/export?" + q, token: tok["audrey"]}, 200)
	want(request{method: "GET", path: "/v1/audit/export?format=csv&" + q, token: tok["adam"]}, 200)
	var rep api.VerifyReport
	if err := json.Unmarshal(want(request{method: "GET", path: "/v1/audit/verify", token: tok["audrey"]}, 200), &rep); err != nil || !rep.OK {
		t.Errorf("verify = %+v, %v", rep, err)
	}
	// Proofs: the run's first lifecycle event is under a checkpoint note
	// by now (one every 2 events); its tree's hashes follow the note.
	var evs api.AuditEventList
	json.Unmarshal(want(request{method: "GET", path: "/v1/audit/events?type=container.created&" + q, token: tok["audrey"]}, 200), &evs)
	if len(evs.Events) == 0 {
		t.Fatal("no container.created event")
	}
	ev := evs.Events[0]
	incl := "/v1/audit/proof/inclusion?event_id=" + ev.ID
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, _, _ := s.send(t, http.DefaultClient, request{method: "GET", path: incl, token: tok["audrey"]}); got == 200 {
			break
		}
	}
	want(request{method: "GET", path: incl, token: tok["audrey"]}, 200)
	want(request{method: "GET", path: "/v1/audit/proof/consistency?from=1&chain=" + ev.ChainID, token: tok["adam"]}, 200)
	want(request{method: "GET", path: "/v1/audit/checkpoint?chain=" + ev.ChainID, token: tok["audrey"]}, 200)
	var cp api.CheckpointView
	json.Unmarshal(want(request{method: "GET", path: "/v1/audit/checkpoint?chain=" + ev.ChainID, token: tok["audrey"],
		header: map[string]string{"Accept": "application/json"}}, 200), &cp)
	cosigned, err := note.Sign(&note.Note{Text: strings.SplitN(cp.Note, "\n\n", 2)[0] + "\n"}, signer)
	if err != nil {
		t.Fatal(err)
	}
	cosignBody, _ := json.Marshal(api.CosignatureRequest{Note: string(cosigned), WitnessKey: signer.VerifierKey()})
	want(request{method: "POST", path: "/v1/audit/checkpoint/cosignature", token: tok["audrey"], body: string(cosignBody)}, 200)
	want(request{method: "POST", path: "/v1/audit/checkpoint/cosignature", token: tok["audrey"],
		body: `{"note":"x\n","witness_key":"` + signer.VerifierKey() + `"}`}, 400)
	want(request{method: "GET", path: "/v1/audit/proof/inclusion?event_id=nope", token: tok["audrey"]}, 400)
	// A witness's alarm, signed with its key.
	wit, err := proof.NewWitness(t.TempDir(), proof.Anchors{Pinned: []ed25519.PublicKey{wkey.Public().(ed25519.PublicKey)}}, signer)
	if err != nil {
		t.Fatal(err)
	}
	alarm, err := wit.AlarmNote(&proof.WitnessAlarm{Kind: proof.AlarmInconsistent, Origin: cp.Origin, Detail: "a test alarm",
		SeenSize: 1, SeenRoot: cp.RootHash, OfferedSize: cp.TreeSize, OfferedRoot: cp.RootHash})
	if err != nil {
		t.Fatal(err)
	}
	alarmBody, _ := json.Marshal(api.WitnessAlarmRequest{Alarm: alarm, WitnessKey: signer.VerifierKey()})
	want(request{method: "POST", path: "/v1/audit/witness/alarm", token: tok["audrey"], body: string(alarmBody)}, 201)
	want(request{method: "POST", path: "/v1/audit/witness/alarm", token: tok["audrey"],
		body: `{"alarm":"x\n","witness_key":"` + signer.VerifierKey() + `"}`}, 400)
	// The run's receipt, once every event of it is under a checkpoint note.
	receipt := "/v1/runs/" + done.ID + "/receipt"
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, _, _ := s.send(t, http.DefaultClient, request{method: "GET", path: receipt, token: tok["alice"]}); got == 200 {
			break
		}
	}
	want(request{method: "GET", path: receipt, token: tok["alice"]}, 200)
	want(request{method: "GET", path: receipt, token: tok["audrey"]}, 200)
	want(request{method: "GET", path: receipt, token: tok["bob"]}, 404)
	want(request{method: "GET", path: "/v1/audit/checkpoint", token: tok["bob"]}, 403)

	// Sessions: open, a command, files in and out, list, read, end.
	var ss api.SessionView
	if err := json.Unmarshal(want(request{method: "POST", path: "/v1/sessions", token: tok["alice"],
		body: `{"idle_timeout_seconds":120}`}, 201), &ss); err != nil || ss.State != sandgate.SessionOpen {
		t.Fatalf("session = %+v, %v", ss, err)
	}
	want(request{method: "POST", path: "/v1/sessions", token: tok["alice"], body: `{"command":["sh"]}`}, 400)
	want(request{method: "POST", path: "/v1/sessions", token: tok["alice"], body: `{"idle_timeout_seconds":999999}`}, 403)
	want(request{method: "PUT", path: "/v1/sessions/" + ss.ID + "/files?path=in.txt", token: tok["alice"], body: "data\n",
		header: map[string]string{"Content-Type": "application/octet-stream"}}, 200)
	want(request{method: "POST", path: "/v1/sessions/" + ss.ID + "/runs?wait=60s", token: tok["alice"], body: `{"command":["cat","in.txt"]}`}, 200)
	want(request{method: "POST", path: "/v1/sessions/" + ss.ID + "/runs", token: tok["bob"], body: `{"command":["true"]}`}, 404)
	want(request{method: "GET", path: "/v1/sessions/" + ss.ID + "/files?path=in.txt", token: tok["audrey"]}, 200)
	want(request{method: "GET", path: "/v1/sessions?state=open", token: tok["alice"]}, 200)
	want(request{method: "GET", path: "/v1/sessions/" + ss.ID, token: tok["adam"]}, 200)
	want(request{method: "DELETE", path: "/v1/sessions/" + ss.ID, token: tok["alice"]}, 200)
	want(request{method: "DELETE", path: "/v1/sessions/" + ss.ID, token: tok["alice"]}, 409)

	// Administration and the gateway itself.
	want(request{method: "GET", path: "/v1/sandboxes", token: tok["adam"]}, 200)
	want(request{method: "POST", path: "/v1/sandboxes/cleanup", token: tok["adam"]}, 200)
	want(request{method: "GET", path: "/v1/volumes", token: tok["adam"]}, 200)
	want(request{method: "DELETE", path: "/v1/volumes/alpha/none", token: tok["adam"]}, 404)
	want(request{method: "GET", path: "/v1/nodes", token: tok["adam"]}, 200)
	want(request{method: "GET", path: "/v1/config", token: tok["bob"]}, 200)
	want(request{method: "GET", path: "/v1/openapi.json", token: tok["bob"]}, 200)
	want(request{method: "GET", path: "/v1/whoami", token: tok["bob"]}, 200)
	want(request{method: "GET", path: "/healthz"}, 200)
	want(request{method: "GET", path: "/readyz"}, 200)
	want(request{method: "GET", path: "/metrics"}, 200)

	seen := s.check.Seen()
	ops, err := apitest.Operations()
	if err != nil {
		t.Fatal(err)
	}
	for key, id := range ops {
		if id == "removeVolume" {
			continue // removing a real cache volume is TestCacheVolumeAdmin's
		}
		if _, ok := validatedElsewhere[id]; ok {
			continue
		}
		ok := false
		for k := range seen {
			op, status, _ := strings.Cut(k, " ")
			ok = ok || (op == id && status[0] == '2')
		}
		if !ok {
			t.Errorf("%s (%s): no successful answer validated", key, id)
		}
	}
	for _, k := range []string{"submitRun 200", "submitRun 202", "submitRun 400", "submitRun 401", "submitRun 403",
		"submitRun 409", "submitRun 429", "getRun 404", "runLogs 200", "runLogs 404", "cancelRun 409", "listRuns 400",
		"removeVolume 404", "unrouted 405", "policyReplay 422"} {
		if seen[k] == 0 {
			t.Errorf("no %s answer validated", k)
		}
	}
	n := 0
	for _, c := range seen {
		n += c
	}
	t.Logf("%d answers validated against the OpenAPI document: %v", n, seen)
}

// clientAs returns a Go client of s that authenticates with token and
// goes through the server's OpenAPI checker.
func clientAs(t testing.TB, s *testServer, token string) *client.Client {
	t.Helper()
	c, err := client.New(s.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	c.HTTP = s.HTTP
	return c
}

// detailsOf returns the details of the gateway's error answer in err.
func detailsOf(err error) map[string]any {
	var se *sandgate.Error
	if !errors.As(err, &se) {
		return nil
	}
	return se.Details
}

// tokenName names the principal whose token tok is, for messages.
func tokenName(tokens map[string]string, tok string) string {
	for name, t := range tokens {
		if t == tok {
			return name
		}
	}
	if tok == "" {
		return "nobody"
	}
	return "an unknown token"
}
