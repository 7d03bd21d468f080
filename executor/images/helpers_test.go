package images_test

import (
	"testing"

	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
)

// newTestImages is the image administration of the test's daemon.
func newTestImages(t testing.TB) *images.Images {
	t.Helper()
	executortest.RequireDocker(t)
	im, err := images.New(images.Config{DockerHost: executortest.DockerHost()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { im.Close() })
	return im
}

func docker(t testing.TB) *client.Client { return executortest.Docker(t) }
