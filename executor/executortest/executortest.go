// Package executortest helps tests that need the real Docker daemon, the
// sandbox image and the language images.
package executortest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate"
	recipefiles "github.com/sandgate/sandgate/deploy/images"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

var (
	once     sync.Once
	readyErr error
)

// DockerHost is the daemon the tests use: DOCKER_HOST, or the local socket.
func DockerHost() string { return os.Getenv("DOCKER_HOST") }

// RequireDocker makes sure the Docker daemon answers and the sandbox image
// sandgate/sandbox:latest exists, building it when it does not. When the
// daemon is missing it skips the test, except under CI=true, where a
// missing daemon fails it: CI never silently skips integration tests.
// Under go test -short (the unit tier) it skips.
func RequireDocker(t testing.TB) {
	t.Helper()
	sandgatetest.SkipShort(t, "the Docker daemon")
	once.Do(func() { readyErr = prepare() })
	if readyErr == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("docker is required (CI=true): %v", readyErr)
	}
	t.Skipf("docker is not available: %v (run deploy/bootstrap.sh)", readyErr)
}

func prepare() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := executor.New(executor.Config{DockerHost: DockerHost(), Node: "executortest", MaxRetries: 1}, nil)
	if err != nil {
		return err
	}
	defer ex.Close()
	if err := ex.Ping(ctx); err != nil {
		return err
	}
	im, err := images.New(images.Config{DockerHost: DockerHost(), MaxRetries: 1})
	if err != nil {
		return err
	}
	defer im.Close()
	if _, err := im.ImageID(ctx, images.SandboxImage); err == nil {
		return nil
	} else if sandgate.ErrorCodeOf(err) != sandgate.CodeImageUnavailable {
		return err
	}
	if _, err := im.BuildSandboxImage(ctx, images.BuildOptions{}); err != nil {
		return fmt.Errorf("build %s: %w", images.SandboxImage, err)
	}
	return nil
}

var (
	recipeMu    sync.Mutex
	recipeBuilt = map[string]recipeResult{}
)

type recipeResult struct {
	build images.RecipeBuild
	err   error
}

// RequireRecipeImage makes sure the language image of recipe name
// (deploy/images/NAME.yaml) is on the daemon and returns what was built:
// an image tagged with the recipe's name whose recipe label matches is
// kept, otherwise it is built with mmdebstrap from the Debian mirror, once
// per test binary. Without Docker the test is skipped as RequireDocker
// does; a missing mmdebstrap skips it too, except under CI=true, where it
// fails; a failed build always fails it.
func RequireRecipeImage(t testing.TB, name string) images.RecipeBuild {
	t.Helper()
	RequireDocker(t)
	recipeMu.Lock()
	res, ok := recipeBuilt[name]
	if !ok {
		res.build, res.err = buildRecipe(name)
		recipeBuilt[name] = res
	}
	recipeMu.Unlock()
	if res.err == nil {
		return res.build
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil && os.Getenv("CI") != "true" {
		t.Skipf("image %s is not built and mmdebstrap is missing: %v (run deploy/bootstrap.sh)", name, err)
	}
	t.Fatalf("image %s: %v", name, res.err)
	return images.RecipeBuild{}
}

func buildRecipe(name string) (images.RecipeBuild, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	list, err := images.LoadRecipes(recipefiles.Recipes)
	if err != nil {
		return images.RecipeBuild{}, err
	}
	r, err := images.FindRecipe(list, name)
	if err != nil {
		return images.RecipeBuild{}, err
	}
	im, err := images.New(images.Config{DockerHost: DockerHost()})
	if err != nil {
		return images.RecipeBuild{}, err
	}
	defer im.Close()
	return im.BuildRecipeImage(ctx, r, images.RecipeBuildOptions{Reuse: true})
}

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// AgentBinary is a statically linked build of the sandgate binary of this
// module, to mount into sandboxes as their agent (the test binaries are
// linked dynamically, for the race detector). It is built once per test
// process, into a file of the system's temporary directory named after
// the module's directory, and replaced atomically.
func AgentBinary(t testing.TB) string {
	t.Helper()
	agentOnce.Do(func() { agentPath, agentErr = buildAgent() })
	if agentErr != nil {
		t.Fatalf("build the agent binary: %v", agentErr)
	}
	return agentPath
}

func buildAgent() (string, error) {
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	sum := sha256.Sum256(bytes.TrimSpace(dir))
	out := filepath.Join(os.TempDir(), "sandgate-agent-"+hex.EncodeToString(sum[:6]))
	tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "github.com/sandgate/sandgate/cmd/sandgate")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, b)
	}
	return out, os.Rename(tmp, out)
}

var (
	dockerOnce sync.Once
	dockerC    *client.Client
	dockerErr  error
)

// Docker is a plain client of the test daemon, for looking at what the
// code under test did; it requires Docker as RequireDocker does.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	RequireDocker(t)
	dockerOnce.Do(func() {
		opts := []client.Opt{client.WithAPIVersionNegotiation()}
		if h := DockerHost(); h != "" {
			opts = append(opts, client.WithHost(h))
		}
		dockerC, dockerErr = client.NewClientWithOpts(opts...)
	})
	if dockerErr != nil {
		t.Fatal(dockerErr)
	}
	return dockerC
}
