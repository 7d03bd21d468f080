// Package executortest helps tests that need the real Docker daemon and
// the sandbox image.
package executortest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
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
func RequireDocker(t testing.TB) {
	t.Helper()
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
	images, err := executor.NewImages(executor.Config{DockerHost: DockerHost(), Node: "executortest", MaxRetries: 1})
	if err != nil {
		return err
	}
	defer images.Close()
	if _, err := images.ImageID(ctx, executor.SandboxImage); err == nil {
		return nil
	} else if sandgate.ErrorCodeOf(err) != sandgate.CodeImageUnavailable {
		return err
	}
	if _, err := images.BuildSandboxImage(ctx, executor.BuildOptions{}); err != nil {
		return fmt.Errorf("build %s: %w", executor.SandboxImage, err)
	}
	return nil
}
