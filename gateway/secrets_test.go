package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/runstore"
	"github.com/sandgate/sandgate/secrets"
)

// withVault is an edit that gives the gateway a real vault over a fresh,
// migrated database, its changes recorded by the test's recorder.
func withVault(t *testing.T) func(*Config, *testEnv) {
	return func(cfg *Config, e *testEnv) {
		store, err := runstore.New(audittest.OpenDB(t, audittest.NewMigratedDatabase(t)), runstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "secrets.keys")
		line, _ := secrets.NewKeyLine("k1")
		if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		keys, err := secrets.LoadKeyring(path)
		if err != nil {
			t.Fatal(err)
		}
		v, err := secrets.New(secrets.Options{Keys: keys, Store: store, Recorder: e.recorder, Masker: sandgate.NewMasker(cfg.MaskKey)})
		if err != nil {
			t.Fatal(err)
		}
		e.secrets = v
	}
}

const secretValue = "sk-live-4f1c2a9e7d"

// TestSecretsAPI: /v1/secrets is for security and admin; a value is set,
// rotated, listed without itself, removed, each change recorded with who
// made it; bad input is 400 naming the field; no answer holds the value.
func TestSecretsAPI(t *testing.T) {
	e := newEnv(t, withVault(t))
	put := func(tok, name, body string) response {
		return e.do(http.MethodPut, "/v1/secrets/"+name, tok, body)
	}
	for _, tok := range []string{tokAlice, tokAuditor} {
		if r := put(tok, "demo", `{"value": "`+secretValue+`"}`); r.status != http.StatusForbidden {
			t.Errorf("%s: %d %s", tok, r.status, r.body)
		}
		if r := e.do(http.MethodGet, "/v1/secrets", tok, ""); r.status != http.StatusForbidden {
			t.Errorf("%s lists: %d", tok, r.status)
		}
	}
	r := put(tokSec, "demo", `{"value": "`+secretValue+`"}`)
	var info sandgate.SecretInfo
	if err := json.Unmarshal(r.body, &info); r.status != http.StatusCreated || err != nil || info.Version != 1 || info.SetBy != "sec" {
		t.Fatalf("first put: %d %s", r.status, r.body)
	}
	r = put(tokAdmin, "demo", `{"value": "`+secretValue+`-2"}`)
	if err := json.Unmarshal(r.body, &info); r.status != http.StatusOK || err != nil || info.Version != 2 || info.SetBy != "adm" || info.CreatedBy != "sec" {
		t.Fatalf("second put: %d %s", r.status, r.body)
	}
	r = e.do(http.MethodGet, "/v1/secrets", tokSec, "")
	var list api.SecretList
	if err := json.Unmarshal(r.body, &list); r.status != http.StatusOK || err != nil || len(list.Secrets) != 1 || list.Secrets[0].Version != 2 ||
		!strings.HasPrefix(list.Secrets[0].ValueHash, sandgate.MaskPrefix) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	long := strings.Repeat("x", sandgate.MaxSecretValueBytes+1)
	for name, tc := range map[string]struct{ name, body, field string }{
		"empty value":       {"demo", `{"value": ""}`, "value"},
		"no value":          {"demo", `{}`, "value"},
		"value over 64 KiB": {"demo", `{"value": "` + long + `"}`, "value"},
		"value with CRLF":   {"demo", `{"value": "a\r\nX-Evil: 1"}`, "value"},
		"value with NUL":    {"demo", `{"value": "a\u0000"}`, "value"},
		"upper case name":   {"Demo", `{"value": "x"}`, "name"},
		"long name":         {strings.Repeat("n", 65), `{"value": "x"}`, "name"},
		"name with a dot":   {"a.b", `{"value": "x"}`, "name"},
		"unknown field":     {"demo", `{"value": "x", "teams": ["a"]}`, "teams"},
	} {
		t.Run(name, func(t *testing.T) {
			r := put(tokSec, tc.name, tc.body)
			if r.status != http.StatusBadRequest || r.errorCode() != string(sandgate.CodeInvalidRequest) || !strings.HasPrefix(r.errorBody().Error.Message, tc.field+": ") {
				t.Errorf("%d %s; want 400 naming %s", r.status, r.body, tc.field)
			}
		})
	}
	if r := e.do(http.MethodDelete, "/v1/secrets/demo", tokAlice, ""); r.status != http.StatusForbidden {
		t.Errorf("a submitter deletes: %d", r.status)
	}
	if r := e.do(http.MethodDelete, "/v1/secrets/demo", tokSec, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodDelete, "/v1/secrets/demo", tokSec, ""); r.status != http.StatusNotFound {
		t.Errorf("second delete: %d %s", r.status, r.body)
	}
	var got []string
	for _, ev := range e.recorder.all() {
		if strings.HasPrefix(string(ev.Type), "secret.") {
			got = append(got, fmt.Sprintf("%s:%s:%v", ev.Type, ev.Actor, ev.Payload["version"]))
		}
		if doc, _ := json.Marshal(ev); strings.Contains(string(doc), secretValue) {
			t.Errorf("an event holds the value: %s", doc)
		}
	}
	if want := "secret.set:sec:1 secret.rotated:adm:2 secret.deleted:sec:2"; strings.Join(got, " ") != want {
		t.Errorf("events %v, want %s", got, want)
	}
}

// TestSecretsNotConfigured: without a vault /v1/secrets is NOT-FOUND and
// a run that names secrets is refused, naming the field.
func TestSecretsNotConfigured(t *testing.T) {
	e := newEnv(t)
	if r := e.do(http.MethodGet, "/v1/secrets", tokSec, ""); r.status != http.StatusNotFound {
		t.Errorf("list: %d %s", r.status, r.body)
	}
	r := e.do(http.MethodPost, "/v1/runs", tokAlice, `{"command": ["echo"], "network": "egress", "egress": ["api.example.test:443"], "secrets": ["demo"]}`)
	if r.status != http.StatusBadRequest || !strings.HasPrefix(r.errorBody().Error.Message, "secrets: ") {
		t.Errorf("run: %d %s", r.status, r.body)
	}
}

// TestRunSecretsRevealed: the job of a run admitted with a secret carries
// its value for the proxy, while the stored run and every answer carry
// its name only; a secret removed after the admission fails the run
// before it starts, recorded as run.failed naming the field.
func TestRunSecretsRevealed(t *testing.T) {
	e := newEnv(t, withVault(t))
	if r := e.do(http.MethodPut, "/v1/secrets/demo", tokSec, `{"value": "`+secretValue+`"}`); r.status != http.StatusCreated {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	spec := `{"command": ["echo", "hi"], "network": "egress", "egress": ["api.example.test:443"], "secrets": ["demo"]}`
	r := e.do(http.MethodPost, "/v1/runs?wait=5s", tokAlice, spec)
	if r.status != http.StatusOK || strings.Contains(string(r.body), secretValue) {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	run := r.run(t)
	e.exec.mu.Lock()
	job := e.exec.jobs[len(e.exec.jobs)-1]
	e.exec.mu.Unlock()
	if len(job.Secrets) != 1 || job.Secrets[0].Value.Reveal() != secretValue || job.Secrets[0].Version != 1 || job.Secrets[0].Env != "DEMO_TOKEN" {
		t.Fatalf("job secrets %+v", job.Secrets)
	}
	stored, _ := e.store.GetRun(t.Context(), run.ID)
	if doc, _ := json.Marshal(stored); strings.Contains(string(doc), secretValue) || strings.Join(stored.Spec.Secrets, ",") != "demo" {
		t.Errorf("stored run %s", doc)
	}
	if in, _ := e.admitter.last(sandgate.OperationRun); in.Secrets["demo"].Version != 1 {
		t.Errorf("input.secrets %+v", in.Secrets)
	}

	if r := e.do(http.MethodDelete, "/v1/secrets/demo", tokSec, ""); r.status != http.StatusNoContent {
		t.Fatal(r.status)
	}
	// The fake admitter admits it regardless (the bundle's secret_exists
	// would not): the gateway refuses to start it without its value.
	r = e.do(http.MethodPost, "/v1/runs?wait=5s", tokAlice, spec)
	if r.status != http.StatusOK {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	failed := r.run(t)
	if failed.Outcome == nil || *failed.Outcome != sandgate.OutcomeError || failed.Error == nil || failed.Error.Code != sandgate.CodeNotFound || !strings.HasPrefix(failed.Error.Message, "secrets: ") {
		t.Errorf("run without its secret: %s", r.body)
	}
	if evs := e.recorder.ofType(sandgate.EventRunFailed); len(evs) != 1 || evs[0].RunID != failed.ID {
		t.Errorf("run.failed %+v", evs)
	}
}
