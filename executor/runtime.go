package executor

import (
	"context"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/system"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// infoAPI is the Docker call that describes the daemon's configuration:
// the runtimes it has (runtimes) and its userns-remap (hostIDs).
type infoAPI interface {
	Info(ctx context.Context) (system.Info, error)
}

// runtimes checks a run's admitted OCI runtime against the daemon's.
type runtimes struct {
	docker infoAPI
	calls  calls
	node   string
}

// check refuses a run whose admitted OCI runtime the daemon does not
// have, before anything is created for it: a policy may admit runsc or
// kata for a team, but only the daemon's configuration (its runtimes,
// `docker info`) says whether this node can run it. The daemon's default
// ("") is always there. The daemon is asked each time: runtimes are added
// by a reload of its configuration, without a restart.
func (rt runtimes) check(ctx context.Context, t *trail, runtime string) error {
	if runtime == "" {
		return nil
	}
	var info system.Info
	err := rt.calls.do(ctx, t, "docker info", func(ctx context.Context) error {
		var err error
		info, err = rt.docker.Info(ctx)
		return err
	})
	if err != nil {
		// DOCKER-UNAVAILABLE when the daemon is away.
		return daemon.Error(sandgate.CodeContainerCreate, err, "docker info")
	}
	if _, ok := info.Runtimes[runtime]; ok {
		return nil
	}
	have := make([]string, 0, len(info.Runtimes))
	for name := range info.Runtimes {
		have = append(have, name)
	}
	slices.Sort(have)
	return &sandgate.Error{
		Code:    sandgate.CodeContainerCreate,
		Field:   "runtime",
		Message: "the docker daemon of node " + rt.node + " has no runtime " + runtime + " (it has: " + strings.Join(have, ", ") + "); register it in the daemon's configuration (runtimes in daemon.json) or ask for another",
	}
}
