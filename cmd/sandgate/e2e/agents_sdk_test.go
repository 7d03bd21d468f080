package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/executor/executortest"
)

// The SDKs (sdk/python, sdk/typescript) and the reference TypeScript MCP
// client, each driven by its own language's test runner against a real
// gateway this test starts.

// requireTool returns the path of a program the test needs; without it
// the test skips, except under CI=true, where it fails.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required (CI=true): deploy/bootstrap.sh installs it", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// sdkDir is the absolute path of sdk/<lang> in the repository.
func sdkDir(t *testing.T, lang string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("../../../sdk", lang))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// runTool runs a program in dir with the gateway's address and a token in
// its environment and fails the test with its output when it fails.
func runTool(t *testing.T, s *testServer, dir string, argv ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	if s != nil {
		cmd.Env = append(cmd.Env, "SANDGATE_URL="+s.URL, "SANDGATE_TOKEN="+s.Token)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// TestPythonSDK installs sdk/python into a fresh venv with no package
// index (pip install --no-index: the standard library only, the build
// backend in the tree) and runs its tests against a real gateway: runs,
// their output, follow, cancel, artifacts with their SHA-256 checked, a
// denial's violations, sessions' files and commands.
func TestPythonSDK(t *testing.T) {
	py := requireTool(t, "python3")
	s := startServer(t)
	venv := filepath.Join(t.TempDir(), "venv")
	runTool(t, s, ".", py, "-m", "venv", venv)
	dir := sdkDir(t, "python")
	runTool(t, s, ".", filepath.Join(venv, "bin", "pip"), "install", "--quiet", "--no-index", dir)
	out := runTool(t, s, filepath.Join(dir, "tests"), filepath.Join(venv, "bin", "python"), "test_gateway.py")
	if strings.Contains(out, "skipped") || !strings.Contains(out, "OK") {
		t.Errorf("the Python SDK's tests did not all run:\n%s", out)
	}
	t.Log(out)
}

// npmReady makes sure sdk/typescript's dependencies are installed, from
// the committed lockfile (npm ci) when they are not.
func npmReady(t *testing.T, s *testServer, dir string) string {
	t.Helper()
	npm := requireTool(t, "npm")
	requireTool(t, "node")
	// Tests run in concurrent processes (deploy/test-e2e.sh's shards):
	// one npm ci at a time, under an exclusive lock on the directory
	// itself, and the next one finds node_modules installed.
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock %s: %v", dir, err)
	}
	defer syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err != nil {
		runTool(t, s, dir, npm, "ci", "--no-audit", "--no-fund")
	}
	return npm
}

// TestTypeScriptSDK checks that sdk/typescript's generated types are
// those of today's OpenAPI document, builds it (ESM and CommonJS with
// tsc) and runs its tests with node's test runner against a real
// gateway: the SDK's surface as TestPythonSDK's, and the reference
// TypeScript MCP client (@modelcontextprotocol/sdk) over streamable HTTP
// and over stdio through `sandgate mcp`.
func TestTypeScriptSDK(t *testing.T) {
	s := startServer(t)
	dir := sdkDir(t, "typescript")
	npm := npmReady(t, s, dir)
	runTool(t, s, dir, npm, "run", "--silent", "check-generated")
	runTool(t, s, dir, npm, "run", "--silent", "build")
	cmd := exec.Command(npm, "test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SANDGATE_URL="+s.URL, "SANDGATE_TOKEN="+s.Token, "SANDGATE_BIN="+executortest.AgentBinary(t))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "# fail 0") || !strings.Contains(string(out), "# skipped 0") {
		t.Fatalf("npm test: %v\n%s", err, out)
	}
	t.Log(string(out))
}

// TestOpenAPIRedocly lints the OpenAPI document under Redocly CLI's
// recommended rules (gateway/api/redocly.yaml): no error, no warning.
func TestOpenAPIRedocly(t *testing.T) {
	dir := sdkDir(t, "typescript")
	npm := npmReady(t, nil, dir)
	cmd := exec.Command(npm, "run", "--silent", "lint-openapi")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	// Redocly ends with "You have N warnings" (or errors) when it found
	// any, and with "Your API description is valid" only when it found
	// none.
	if err != nil || strings.Contains(string(out), "You have ") || !strings.Contains(string(out), "Your API description is valid") {
		t.Fatalf("redocly lint: %v\n%s", err, out)
	}
}
