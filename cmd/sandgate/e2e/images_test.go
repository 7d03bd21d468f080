package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/gateway/api"
)

// TestEndToEndLanguageImages runs code in the language images that
// `sandgate image build python|node` makes, through the whole gate: the
// default policy admits them by exact name (and by name pinned to their
// ID), the executor's identity check passes user 10001, the runs write
// and read files and exit non-zero on purpose, GET /v1/config lists the
// images with their IDs, and the images hold no shell or package manager.
// The images are built once per test binary when absent (mmdebstrap, from
// the Debian mirror).
func TestEndToEndLanguageImages(t *testing.T) {
	py := executortest.RequireRecipeImage(t, "python")
	node := executortest.RequireRecipeImage(t, "node")
	s := startServer(t)

	t.Run("config lists the images with their IDs", func(t *testing.T) {
		status, _, body := s.do(t, http.MethodGet, "/v1/config", "")
		var cfg api.ConfigView
		if err := json.Unmarshal(body, &cfg); status != http.StatusOK || err != nil {
			t.Fatalf("GET /v1/config = %d %s", status, body)
		}
		for _, want := range []images.RecipeBuild{py, node} {
			found := false
			for _, img := range cfg.Images {
				if img.ID == want.ID {
					found = true
					if img.Recipe != want.Recipe || !contains(img.RepoTags, want.Image) || len(img.Packages) == 0 {
						t.Errorf("image %s listed as %+v", want.Image, img)
					}
					pin := strings.SplitN(want.Image, ":", 2)[0] + "@" + want.ID
					if !contains(img.Pins, pin) {
						t.Errorf("image %s: pins %v lack %s", want.Image, img.Pins, pin)
					}
				}
			}
			if !found {
				t.Errorf("GET /v1/config does not list %s (%s): %+v", want.Image, want.ID, cfg.Images)
			}
		}
		for _, name := range []string{"sandgate/python:3", "sandgate/node:18"} {
			if !contains(cfg.AllowedImages, name) {
				t.Errorf("allowed_images %v lacks %s", cfg.AllowedImages, name)
			}
		}
	})

	// The runs go in parallel; the group ends when all have.
	t.Run("runs", func(t *testing.T) { testLanguageRuns(t, s, py) })

	t.Run("the trail records the image ID", func(t *testing.T) {
		s.waitAuditEvents(t, s.Token, url.Values{"type": {string(sandgate.EventImageResolved)}}, func(events []sandgate.AuditRecord) bool {
			for _, ev := range events {
				if ev.Payload["image_id"] == node.ID {
					return true
				}
			}
			return false
		})
	})
}

// testLanguageRuns are the runs of TestEndToEndLanguageImages.
func testLanguageRuns(t *testing.T, s *testServer, py images.RecipeBuild) {
	t.Run("python reads its workspace, writes an artifact and exits 3", func(t *testing.T) {
		t.Parallel()
		archive := tarGz(t,
			tarEntry{name: "main.py", body: `import json, pathlib, sys
lines = pathlib.Path("data/input.txt").read_text().splitlines()
out = pathlib.Path("out/result.json")
out.parent.mkdir()
out.write_text(json.dumps({"lines": len(lines)}))
print("wrote", json.loads(out.read_text()))
print("failing on purpose", file=sys.stderr)
sys.exit(3)
`},
			tarEntry{name: "data/input.txt", body: "three lines\nof input\nhere\n"})
		run := workspaceRun(t, s, "sandgate/python:3", archive, "python3", "main.py")
		assertFailedWith3(t, run, "wrote {'lines': 3}", "failing on purpose")
		assertArtifact(t, s, run, "out/result.json", `{"lines": 3}`)
	})

	t.Run("node reads its workspace, writes an artifact and exits 3", func(t *testing.T) {
		t.Parallel()
		archive := tarGz(t,
			tarEntry{name: "main.js", body: `const fs = require("fs");
const lines = fs.readFileSync("data/input.txt", "utf8").trim().split("\n");
fs.mkdirSync("out");
fs.writeFileSync("out/result.json", JSON.stringify({lines: lines.length}));
console.log("wrote", fs.readFileSync("out/result.json", "utf8"));
console.error("failing on purpose");
process.exit(3);
`},
			tarEntry{name: "data/input.txt", body: "three lines\nof input\nhere\n"})
		run := workspaceRun(t, s, "sandgate/node:18", archive, "node", "main.js")
		assertFailedWith3(t, run, `wrote {"lines":3}`, "failing on purpose")
		assertArtifact(t, s, run, "out/result.json", `{"lines":3}`)
	})

	t.Run("pinned to the image ID", func(t *testing.T) {
		t.Parallel()
		run := submitCommand(t, s, "sandgate/python:3@"+py.ID, "python3", "-c", "print('pinned')")
		if outcome(run) != sandgate.OutcomeSucceeded || !strings.Contains(run.Stdout.Data, "pinned") {
			t.Errorf("pinned run: outcome %s, stdout %q, error %+v", outcome(run), run.Stdout.Data, run.Error)
		}
	})

	t.Run("no shell, no package manager, the account and directories", func(t *testing.T) {
		t.Parallel()
		script := `import os, stat, json
absent = [p for p in ["/bin/sh", "/usr/bin/sh", "/bin/bash", "/usr/bin/dpkg", "/usr/bin/apt-get", "/etc/apt", "/usr/share/man", "/bin/tar"] if os.path.lexists(p)]
ws, cache = os.stat("/workspace"), os.stat("/cache")
print(json.dumps({"present": absent, "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
  "workspace": [ws.st_uid, ws.st_gid], "cache": oct(stat.S_IMODE(cache.st_mode)), "env": os.environ.get("PYTHONDONTWRITEBYTECODE")}))`
		run := submitCommand(t, s, "sandgate/python:3", "python3", "-c", script)
		if outcome(run) != sandgate.OutcomeSucceeded {
			t.Fatalf("outcome %s: %+v %q", outcome(run), run.Error, run.Stderr.Data)
		}
		want := `{"present": [], "uid": 10001, "gid": 10001, "groups": [10001], "workspace": [10001, 10001], "cache": "0o1777", "env": "1"}`
		if got := strings.TrimSpace(run.Stdout.Data); got != want {
			t.Errorf("image layout:\n got %s\nwant %s", got, want)
		}
		shell := submitCommand(t, s, "sandgate/node:18", "sh", "-c", "true")
		if outcome(shell) == sandgate.OutcomeSucceeded {
			t.Errorf("sh ran in sandgate/node:18: %+v", shell)
		}
	})

	t.Run("other tags are denied", func(t *testing.T) {
		t.Parallel()
		body, _ := json.Marshal(map[string]any{"image": "sandgate/python:3.12", "command": []string{"python3", "-V"}})
		status, _, resp := s.do(t, http.MethodPost, "/v1/runs", string(body))
		if status != http.StatusForbidden || !strings.Contains(string(resp), "image_allowlist") {
			t.Errorf("sandgate/python:3.12 = %d %s", status, resp)
		}
	})
}

// workspaceRun runs command in image with archive as its workspace,
// collecting out/**, and waits for its end.
func workspaceRun(t *testing.T, s *testServer, image string, archive []byte, command ...string) api.RunView {
	t.Helper()
	body, err := json.Marshal(map[string]any{"image": image, "command": command, "timeout_seconds": 60, "artifacts": []string{"out/**"}})
	if err != nil {
		t.Fatal(err)
	}
	status, resp := s.postMultipart(t, "?wait=60s", string(body), archive)
	if status != http.StatusOK {
		t.Fatalf("POST multipart = %d %s", status, resp)
	}
	var run api.RunView
	if err := json.Unmarshal(resp, &run); err != nil {
		t.Fatal(err)
	}
	return run
}

// assertArtifact checks that run left the artifact path holding want.
func assertArtifact(t *testing.T, s *testServer, run api.RunView, path, want string) {
	t.Helper()
	var got bytes.Buffer
	if _, err := s.Client.Artifact(context.Background(), run.ID, path, &got); err != nil {
		t.Fatalf("artifact %s: %v", path, err)
	}
	if got.String() != want {
		t.Errorf("artifact %s = %q, want %q", path, got.String(), want)
	}
}

// submitCommand runs command in image and waits for its end.
func submitCommand(t *testing.T, s *testServer, image string, command ...string) api.RunView {
	t.Helper()
	body, err := json.Marshal(map[string]any{"image": image, "command": command, "timeout_seconds": 60})
	if err != nil {
		t.Fatal(err)
	}
	return s.submitWait(t, s.Token, string(body))
}

// assertFailedWith3 checks a run that exits 3 on purpose.
func assertFailedWith3(t *testing.T, run api.RunView, stdout, stderr string) {
	t.Helper()
	if outcome(run) != sandgate.OutcomeFailed || run.ExitCode == nil || *run.ExitCode != 3 {
		t.Errorf("outcome %s, exit code %v, error %+v; want failed with 3", outcome(run), run.ExitCode, run.Error)
	}
	if !strings.Contains(run.Stdout.Data, stdout) || !strings.Contains(run.Stderr.Data, stderr) {
		t.Errorf("stdout %q, stderr %q; want %q and %q", run.Stdout.Data, run.Stderr.Data, stdout, stderr)
	}
}

func outcome(run api.RunView) sandgate.Outcome {
	if run.Outcome == nil {
		return ""
	}
	return *run.Outcome
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
