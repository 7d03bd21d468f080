package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/gateway/api"
)

// TestEndToEndToolchainImage runs the agents' toolchain image (recipe
// toolchain, built once per test binary when absent) through the gate,
// named by language: every tool answers, as the sandbox user, and the
// run, its decision and the trail carry the image the data maps
// "toolchain" to, with its ID. "node" is the Node LTS image from trixie.
func TestEndToEndToolchainImage(t *testing.T) {
	tc := executortest.RequireRecipeImage(t, "toolchain")
	lts := executortest.RequireRecipeImage(t, "node-lts")
	s := startServer(t)

	run := s.submitWait(t, s.Token, `{"language":"toolchain","timeout_seconds":60,"command":["sh","-c",`+
		`"git --version && jq --version && rg --version && python3 --version && node --version && make --version && id -u"]}`)
	if outcome(run) != sandgate.OutcomeSucceeded {
		t.Fatalf("toolchain run: outcome %s, error %+v, stderr %q", outcome(run), run.Error, run.Stderr.Data)
	}
	for _, want := range []string{"git version 2.", "jq-1.", "ripgrep ", "Python 3.", "v20.", "GNU Make ", "\n10001\n"} {
		if !strings.Contains(run.Stdout.Data, want) {
			t.Errorf("toolchain stdout lacks %q: %q", want, run.Stdout.Data)
		}
	}
	if run.Spec.Image != tc.Image || run.Spec.Language != "" {
		t.Errorf("run spec image %q, language %q; want %q and none", run.Spec.Image, run.Spec.Language, tc.Image)
	}
	// The decision the trail keeps judged the image, and the image is
	// resolved to the ID the recipe built.
	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}}, func(evs []sandgate.AuditRecord) bool {
		for _, ev := range evs {
			if ev.Type == sandgate.EventImageResolved && ev.Payload["image_id"] == tc.ID {
				return true
			}
		}
		return false
	})
	judged := 0
	for _, ev := range events {
		if ev.Type != sandgate.EventAdmissionAllowed {
			continue
		}
		judged++
		doc, _ := json.Marshal(ev.Payload)
		if !strings.Contains(string(doc), `"image":"`+tc.Image+`"`) || strings.Contains(string(doc), `"language"`) {
			t.Errorf("admission.allowed does not judge %s alone: %s", tc.Image, doc)
		}
	}
	if judged != 1 {
		t.Errorf("%d admission.allowed events of the run, want 1", judged)
	}

	node := s.submitWait(t, s.Token, `{"language":"node","timeout_seconds":60,"command":["node","-e","console.log(process.versions.node)"]}`)
	if outcome(node) != sandgate.OutcomeSucceeded || !strings.HasPrefix(node.Stdout.Data, "20.") || node.Spec.Image != lts.Image {
		t.Errorf("node run: image %s, outcome %s, stdout %q, stderr %q", node.Spec.Image, outcome(node), node.Stdout.Data, node.Stderr.Data)
	}
}

// TestEndToEndLanguageRefusals attacks the language field: a language the
// data does not map (an image's name among them), a language with an
// image, and a language the data maps to an image the allowlist does not
// name. Each is refused before anything runs: the first two with 400
// INVALID-REQUEST naming the field, the last by policy (image_allowlist),
// so naming a language never widens what may run.
func TestEndToEndLanguageRefusals(t *testing.T) {
	policy := bundleWith(t, func(c map[string]any) {
		c["defaults"].(map[string]any)["languages"].(map[string]any)["busybox"] = "busybox:latest"
	})
	// The bundle's own tests refuse such data at load
	// (test_data_language_images_are_allowed); a site's bundle may lack
	// them, and the gate must hold without.
	if err := os.Remove(filepath.Join(policy, "images_test.rego")); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", policy))
	for _, body := range []string{
		`{"language":"cobol","command":["true"]}`,
		`{"language":"sandgate/sandbox:latest","command":["true"]}`,
		`{"language":"shell","image":"busybox:latest","command":["true"]}`,
	} {
		status, _, resp := s.do(t, http.MethodPost, "/v1/runs", body)
		var e api.ErrorBody
		if err := json.Unmarshal(resp, &e); status != http.StatusBadRequest || err != nil ||
			e.Error.Code != sandgate.CodeInvalidRequest || e.Error.Details["field"] != "language" {
			t.Errorf("POST %s = %d %s, want 400 INVALID-REQUEST on field language", body, status, resp)
		}
	}
	status, _, resp := s.do(t, http.MethodPost, "/v1/sessions", `{"language":"cobol"}`)
	if status != http.StatusBadRequest || !strings.Contains(string(resp), `"field":"language"`) {
		t.Errorf("POST /v1/sessions with language cobol = %d %s", status, resp)
	}
	status, _, resp = s.do(t, http.MethodPost, "/v1/runs", `{"language":"busybox","command":["true"]}`)
	var e api.ErrorBody
	if err := json.Unmarshal(resp, &e); status != http.StatusForbidden || err != nil || e.Error.Code != sandgate.CodePolicyDenied ||
		!strings.Contains(string(resp), "image_allowlist") || !strings.Contains(string(resp), "busybox:latest") {
		t.Errorf("language mapped off the allowlist = %d %s, want 403 denied by image_allowlist", status, resp)
	}
	// The shell language is the sandbox image, which the default policy
	// admits.
	run := s.submitWait(t, s.Token, `{"language":"shell","timeout_seconds":60,"command":["sh","-c","echo ok"]}`)
	if outcome(run) != sandgate.OutcomeSucceeded || run.Stdout.Data != "ok\n" || run.Spec.Image != sandgate.BuiltinDefaults.Image {
		t.Errorf("shell run: image %s, outcome %s, stdout %q", run.Spec.Image, outcome(run), run.Stdout.Data)
	}
}
