package cli

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/gateway"
)

// loadClusterSecret reads the secret the nodes of a cluster share; none
// when no file is named.
func loadClusterSecret(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_CLUSTER_SECRET_FILE: %w", err)
	}
	secret := []byte(strings.TrimSpace(string(data)))
	if len(secret) < 16 {
		return nil, fmt.Errorf("SANDGATE_CLUSTER_SECRET_FILE %s: the secret must be at least 16 bytes", path)
	}
	return secret, nil
}

// remoteExecutor is a dead node's Docker daemon, reached by a survivor:
// its Reconciler adopts the containers labelled with the dead node's
// name.
type remoteExecutor struct {
	*executor.Reconciler
	x *executor.Executor
}

func (r remoteExecutor) Close() error { return r.x.Close() }

// Sessions runs the commands of the sessions adopted on the dead node's
// daemon.
func (r remoteExecutor) Sessions() sandgate.SessionExecutor { return r.x }

// remoteReconcilers dials dead nodes' daemons for takeovers. The events
// of what it does there are recorded by this node (node = this node's
// name, taken_over_from = the dead node's) in this node's chain.
func remoteReconcilers(cfg *config, events sandgate.EventSink, logger *slog.Logger) gateway.RemoteReconcilers {
	return func(ctx context.Context, node, dockerHost string) (gateway.RemoteReconciler, error) {
		sink := sandgate.EventSinkFunc(func(ev sandgate.Event) {
			p := make(map[string]any, len(ev.Payload)+1)
			maps.Copy(p, ev.Payload)
			p["taken_over_from"] = node
			ev.Payload, ev.Node = p, cfg.Node
			events.Emit(ev)
		})
		x, err := executor.New(executor.Config{
			DockerHost:       dockerHost,
			Node:             node,
			MaxConcurrent:    cfg.MaxConcurrent,
			MaxSessions:      cfg.MaxSessions,
			TeamSharePercent: cfg.teamShare(),
			VolumeDir:        cfg.VolumeDir,
			WorkspaceDir:     cfg.WorkspaceDir,
			Logger:           logger.With("component", "takeover", "dead_node", node),
		}, sink)
		if err != nil {
			return nil, sandgate.WrapError(sandgate.CodeDockerUnavailable, err, "node %s's Docker daemon %q", node, dockerHost)
		}
		if err := x.Ping(ctx); err != nil {
			_ = x.Close()
			return nil, err
		}
		return remoteExecutor{Reconciler: x.Reconciler(), x: x}, nil
	}
}

// chainCloser closes dead nodes' chains with this node's key.
func chainCloser(store *audit.Store) gateway.ChainCloser {
	return func(ctx context.Context, dead, reason string) (int, error) {
		closed, err := store.Takeover().CloseChainsOf(ctx, dead, reason)
		return len(closed), err
	}
}
