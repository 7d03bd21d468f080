package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The docs' shell examples run: every fenced sh block of README.md and
// docs/*.md is marked, by an HTML comment on the line before it, as an
// example to run or one to leave out with the reason:
//
//	<!-- docs-test: run -->
//	<!-- docs-test: skip: needs root and a second Docker daemon -->
//
// TestDocsExamples fails on a block that is not marked, and runs each
// marked one with bash -e -o pipefail against a real gateway (`make
// docs-test` runs it alone; `make test` runs it with the rest). A block
// runs in a fresh directory holding the fixtures the docs name (repo/,
// src/, project/, main.py, policies/ and policies-next/), with sandgate,
// curl and jq on PATH, SANDGATE_URL and SANDGATE_TOKEN set (an export of
// either in the example keeps the test gateway's), and RUN, CID and
// SESSION naming a finished run, its correlation ID and an open session.

// docBlock is one fenced shell block of a document.
type docBlock struct {
	file string
	line int
	// mark is the marker's text after "docs-test:" ("run", "skip: …"),
	// "" when the block has none.
	mark string
	body string
}

var (
	fenceOpen  = regexp.MustCompile("^( {0,4})```(\\w*)\\s*$")
	docsMarker = regexp.MustCompile(`^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$`)
)

// docBlocks reads the fenced shell blocks of the documents under root.
func docBlocks(t *testing.T, root string) []docBlock {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var out []docBlock
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		out = append(out, parseBlocks(rel, data)...)
	}
	return out
}

// parseBlocks finds the sh, bash and shell fences of one document, with
// the marker on the line before each.
func parseBlocks(file string, data []byte) []docBlock {
	var out []docBlock
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, lang := m[1], m[2]
		var body []string
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, strings.TrimPrefix(lines[j], indent))
		}
		if lang == "sh" || lang == "bash" || lang == "shell" {
			b := docBlock{file: file, line: i + 1, body: strings.Join(body, "\n") + "\n"}
			for k := i - 1; k >= 0; k-- {
				if strings.TrimSpace(lines[k]) == "" {
					continue
				}
				if mm := docsMarker.FindStringSubmatch(lines[k]); mm != nil {
					b.mark = mm[1]
				}
				break
			}
			out = append(out, b)
		}
		i = j
	}
	return out
}

// TestDocsMarkers holds every shell block of the docs to a decision: run
// it, or skip it with a reason. It needs nothing but the files.
func TestDocsMarkers(t *testing.T) {
	blocks := docBlocks(t, moduleRoot(t))
	if len(blocks) < 40 {
		t.Fatalf("found only %d shell blocks in README.md and docs/", len(blocks))
	}
	runnable := 0
	for _, b := range blocks {
		switch {
		case b.mark == "run":
			runnable++
		case strings.HasPrefix(b.mark, "skip: ") && len(strings.TrimPrefix(b.mark, "skip: ")) >= 8:
		default:
			t.Errorf("%s:%d: a shell example without <!-- docs-test: run --> or <!-- docs-test: skip: REASON --> before it (got %q):\n%s",
				b.file, b.line, b.mark, b.body)
		}
	}
	if runnable < 15 {
		t.Errorf("only %d shell examples are run", runnable)
	}
}

// moduleRoot is the repository's top directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestDocsExamples runs every example marked to run against a real
// gateway; one that stops working fails here.
func TestDocsExamples(t *testing.T) {
	sandgatetest.SkipShort(t, "runs the docs' examples against a real gateway")
	for _, tool := range []string{"bash", "curl", "jq", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is needed to run the docs' examples (CI=true)", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	root := moduleRoot(t)
	executortest.RequireRecipeImage(t, "python")
	policy := t.TempDir()
	copyDir(t, filepath.Join(root, "policies"), policy)
	key := filepath.Join(t.TempDir(), "checkpoint.key")
	s := startServer(t, withEnv("SANDGATE_POLICY_DIR", policy), withEnv("SANDGATE_CHECKPOINT_EVERY", "2"),
		withEnv("SANDGATE_SIGNING_KEY_FILE", key))
	binary := executortest.AgentBinary(t)
	bin := t.TempDir()
	if err := os.Symlink(binary, filepath.Join(bin, "sandgate")); err != nil {
		t.Fatal(err)
	}
	run := s.submitWait(t, s.Token, `{"command":["sh","-c","mkdir -p out; echo '{\"ok\": true}' > out/result.json; echo hello"],"artifacts":["out/**"]}`)
	ses := runCLI(t, s, nil, "session", "create")
	if ses.code != 0 {
		t.Fatalf("session create: %s", ses.stderr)
	}
	session := strings.TrimSpace(ses.stdout)
	t.Cleanup(func() { runCLI(t, s, nil, "session", "rm", session) })
	env := []string{
		"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + t.TempDir(),
		"SANDGATE_URL=" + s.URL, "SANDGATE_TOKEN=" + s.Token, "AUDITOR_TOKEN=" + s.Token,
		// The gateway's host's settings: its node and its key, so that
		// verify there trusts the node's own registered key.
		"DSN=" + s.DSN, "SANDGATE_SIGNING_KEY_FILE=" + key, "SANDGATE_NODE=" + s.Node,
		"RUN=" + run.ID, "CID=" + run.CorrelationID, "SESSION=" + session,
		"LANG=C.UTF-8",
	}
	for _, b := range docBlocks(t, root) {
		if b.mark != "run" {
			continue
		}
		t.Run(fmt.Sprintf("%s:%d", b.file, b.line), func(t *testing.T) {
			dir := t.TempDir()
			writeDocFixtures(t, dir, root, binary)
			out, err := runDocBlock(dir, env, b.body)
			if err != nil {
				t.Errorf("the example at %s:%d failed: %v\n--- example\n%s--- output\n%s", b.file, b.line, err, b.body, out)
			}
		})
	}
}

// docPrelude keeps the test gateway's URL and token when an example
// exports the documented defaults (http://127.0.0.1:8080, sgdev_…), and
// stops at the first failing command.
const docPrelude = `set -e -o pipefail
export() {
	local a
	for a in "$@"; do
		case $a in SANDGATE_URL=*|SANDGATE_TOKEN=*) ;; *) builtin export "$a" ;; esac
	done
}
`

// runDocBlock runs body with bash in dir.
func runDocBlock(dir string, env []string, body string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", docPrelude+body)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = strings.NewReader("")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// writeDocFixtures makes the files the examples name, and bin/sandgate
// (the README runs ./bin/sandgate, as make run builds it).
func writeDocFixtures(t *testing.T, dir, root, binary string) {
	t.Helper()
	mainPy := "import json, os\nos.makedirs('build', exist_ok=True)\nopen('build/app.txt', 'w').write('app\\n')\n" +
		"json.dump({'ok': True}, open('out.json', 'w'))\nprint('hello from main.py')\n"
	files := map[string]string{
		"repo/test.sh":            "#!/bin/sh\necho tests pass\n",
		"repo/run.sh":             "#!/bin/sh\nmkdir -p out\necho '{\"ok\": true}' > out/report.json\necho \"ran, DEBUG=$DEBUG\"\n",
		"src/main.py":             mainPy,
		"spec.json":               `{"command": ["true"]}` + "\n",
		"main.py":                 mainPy,
		"project/main.py":         "import os\nos.makedirs('out', exist_ok=True)\nopen('out/result.txt', 'w').write('done\\n')\nprint('project ran')\n",
		"project/.sandgateignore": ".git/\n",
		"body.json":               "{}\n",
	}
	for rel, body := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(dir, "bin", "sandgate")); err != nil {
		t.Fatal(err)
	}
	copyDir(t, filepath.Join(root, "policies"), filepath.Join(dir, "policies"))
	copyDir(t, filepath.Join(root, "policies"), filepath.Join(dir, "policies-next"))
}

// copyDir copies the regular files of src (not recursively: a bundle is
// flat) into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if ext := filepath.Ext(e.Name()); ext != ".rego" && ext != ".json" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
