package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
	cmd.Env = append(os.Environ(), "SANDGATE_URL="+s.URL, "SANDGATE_TOKEN="+s.Token)
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
