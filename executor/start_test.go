package executor_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// gatedDocker is a loopback proxy to the test's daemon that refuses every
// connection until it is opened: a daemon that is away, then comes.
type gatedDocker struct {
	ln   net.Listener
	open atomic.Bool
	wg   sync.WaitGroup
}

func startGatedDocker(t *testing.T) *gatedDocker {
	t.Helper()
	host := executortest.DockerHost()
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	network, addr, ok := strings.Cut(host, "://")
	if !ok || (network != "unix" && network != "tcp") {
		t.Fatalf("cannot proxy DOCKER_HOST %q", host)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedDocker{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !g.open.Load() {
				c.Close()
				continue
			}
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				defer c.Close()
				up, err := net.Dial(network, addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return g
}

func (g *gatedDocker) host() string { return "tcp://" + g.ln.Addr().String() }

// TestStartWhenDockerComesLater: an executor started while its daemon is
// away answers DOCKER-UNAVAILABLE, and once the daemon answers it reaps
// the orphans a previous process left and fills its warm pool without
// being started again.
func TestStartWhenDockerComesLater(t *testing.T) {
	executortest.RequireDocker(t)
	node := "test-" + sandgatetest.RandomHex(t, 6)
	// An orphan of this node, as a killed process would leave it.
	ctx := t.Context()
	orphan, err := docker(t).ContainerCreate(ctx, &container.Config{Image: images.SandboxImage, Cmd: []string{"true"},
		Labels: map[string]string{sandgate.LabelManaged: "true", sandgate.LabelNode: node, sandgate.LabelRunID: "gone"}},
		nil, nil, nil, "sandgate-orphan-"+node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = docker(t).ContainerRemove(context.Background(), orphan.ID, container.RemoveOptions{Force: true})
	})

	g := startGatedDocker(t)
	ex, err := executor.New(executor.Config{DockerHost: g.host(), Node: node, WarmPool: 1, MaxRetries: 1,
		CallTimeout: 2 * time.Second, VolumeDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := ex.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		ex.Close()
		if left := managed(t, node); len(left) > 0 {
			t.Errorf("%d container(s) of node %s left behind", len(left), node)
		}
	})
	if err := ex.Start(ctx); sandgate.ErrorCodeOf(err) != sandgate.CodeDockerUnavailable {
		t.Fatalf("Start with the daemon away = %v, want DOCKER-UNAVAILABLE", err)
	}
	g.open.Store(true)
	deadline := time.Now().Add(time.Minute)
	for ex.WarmIdle() < 1 || len(managedByRun(t, node, "gone")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the daemon came: %d warm, orphan still there: %v", ex.WarmIdle(), len(managedByRun(t, node, "gone")) > 0)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// managedByRun lists the containers of node labelled with run ID runID.
func managedByRun(t *testing.T, node, runID string) []container.Summary {
	t.Helper()
	var out []container.Summary
	for _, c := range managed(t, node) {
		if c.Labels[sandgate.LabelRunID] == runID {
			out = append(out, c)
		}
	}
	return out
}
