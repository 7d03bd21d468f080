package executor

import (
	"context"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/system"

	"github.com/sandgate/sandgate"
)

// checkRuntime refuses a run whose admitted OCI runtime the daemon does
// not have, before anything is created for it: a policy may admit runsc
// or kata for a team, but only the daemon's configuration (its runtimes,
// `docker info`) says whether this node can run it. The daemon's default
// ("") is always there. The daemon is asked each time: runtimes are added
// by a reload of its configuration, without a restart.
func (e *Executor) checkRuntime(ctx context.Context, r *run, runtime string) error {
	if runtime == "" {
		return nil
	}
	var info system.Info
	err := e.call(ctx, r, "docker info", func(ctx context.Context) error {
		var err error
		info, err = e.docker.Info(ctx)
		return err
	})
	if err != nil {
		if unreachable(err) {
			return dockerError(sandgate.CodeDockerUnavailable, err, "docker info")
		}
		return dockerError(sandgate.CodeContainerCreate, err, "docker info")
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
		Message: "the docker daemon of node " + e.cfg.Node + " has no runtime " + runtime + " (it has: " + strings.Join(have, ", ") + "); register it in the daemon's configuration (runtimes in daemon.json) or ask for another",
	}
}
