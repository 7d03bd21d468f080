package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// TestEndToEndCallback: through a real gateway, Docker and Postgres, a run
// with a callback_url to a loopback receiver (which the test bundle's data
// allows; the default data allows no host) ends, the receiver gets the
// finished run without its output data, signed with the key of
// SANDGATE_CALLBACK_KEY_FILE, and the trail holds callback.delivered with
// the run's correlation ID. A host the data does not name is denied by
// policy before anything runs.
func TestEndToEndCallback(t *testing.T) {
	type received struct {
		header http.Header
		body   []byte
	}
	got := make(chan received, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()

	hexKey := strings.Repeat("c4", 32)
	keyFile := filepath.Join(t.TempDir(), "callback.key")
	if err := os.WriteFile(keyFile, []byte(hexKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, _ := hex.DecodeString(hexKey)
	policy := bundleWith(t, func(c map[string]any) {
		c["callback_hosts"] = []any{"127.0.0.1"}
		c["callback_insecure_hosts"] = []any{"127.0.0.1"}
	})
	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", policy), withEnv("SANDGATE_CALLBACK_KEY_FILE", keyFile))

	target := recv.URL + "/hooks/sandgate?team=payments"
	spec := `{"command":["sh","-c","echo out; echo err >&2; exit 3"],"callback_url":` + strconv.Quote(target) + `}`
	status, _, body := s.doAs(t, s.Token, http.MethodPost, "/v1/runs?wait=60s", spec, "X-Correlation-ID", "corr-e2e-callback")
	if status != http.StatusOK {
		t.Fatalf("POST /v1/runs = %d %s", status, body)
	}
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil {
		t.Fatal(err)
	}
	if run.ExitCode == nil || *run.ExitCode != 3 || run.Spec.CallbackURL != target {
		t.Fatalf("run: exit %v, callback_url %q", run.ExitCode, run.Spec.CallbackURL)
	}

	var r received
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the receiver got no callback")
	}
	ts := r.header.Get("X-Sandgate-Timestamp")
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(ts + "." + string(r.body)))
	if want := "v1=" + hex.EncodeToString(mac.Sum(nil)); !hmac.Equal([]byte(r.header.Get("X-Sandgate-Signature")), []byte(want)) {
		t.Errorf("signature %q does not verify with the key file's key", r.header.Get("X-Sandgate-Signature"))
	}
	if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)).Abs() > time.Minute {
		t.Errorf("timestamp %q", ts)
	}
	if r.header.Get("X-Sandgate-Run-ID") != run.ID || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", r.header)
	}
	var view api.RunView
	if err := json.Unmarshal(r.body, &view); err != nil {
		t.Fatalf("callback body: %v\n%s", err, r.body)
	}
	if view.ID != run.ID || view.CorrelationID != "corr-e2e-callback" || !view.Finished() || view.ExitCode == nil || *view.ExitCode != 3 {
		t.Errorf("callback body %s", r.body)
	}
	if view.Stdout.Data != "" || view.Stderr.Data != "" || view.Stdout.Bytes != 4 || view.Stderr.Bytes != 4 ||
		view.Stdout.SHA256 != run.Stdout.SHA256 || view.Stdout.SHA256 == "" {
		t.Errorf("callback output: stdout %+v stderr %+v (the run's stdout digest %s)", view.Stdout, view.Stderr, run.Stdout.SHA256)
	}

	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}, "type": {string(sandgate.EventCallbackDelivered)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 1 })
	ev := events[0]
	if ev.CorrelationID != "corr-e2e-callback" || ev.Outcome != "delivered" {
		t.Errorf("callback.delivered: correlation %q outcome %q", ev.CorrelationID, ev.Outcome)
	}
	if ev.Payload["url"] != target || ev.Payload["status"] != float64(204) || ev.Payload["attempts"] != float64(1) {
		t.Errorf("callback.delivered payload %v", ev.Payload)
	}

	// A host the data does not name: denied before anything runs.
	status, _, body = s.doAs(t, s.Token, http.MethodPost, "/v1/runs", `{"command":["true"],"callback_url":"https://hooks.example.com/x"}`)
	if status != http.StatusForbidden || !strings.Contains(string(body), "callback_host_allowlist") {
		t.Errorf("callback to an unlisted host: %d %s", status, body)
	}
}
