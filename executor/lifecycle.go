package executor

import (
	"context"
	"errors"
	"io"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// containerAPI is the Docker calls a handle makes about its container:
// create, attach, wait, start, signal, inspect, remove, read a file out
// of it, and the image and ping a failed create or a signal death are
// checked with.
type containerAPI interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networking *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerAttach(ctx context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error)
	ContainerWait(ctx context.Context, id string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerKill(ctx context.Context, id, signal string) error
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	CopyFromContainer(ctx context.Context, id, srcPath string) (io.ReadCloser, container.PathStat, error)
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	Ping(ctx context.Context) (types.Ping, error)
}

// create creates the run's container. A create that failed in a way that
// leaves open whether the daemon made the container (a timeout, a broken
// connection, a 5xx) is followed by a look-up by name before any new
// attempt, and a name conflict with a container of this very run adopts
// it: a run never gets two containers.
func (h *handle) create(ctx context.Context, set settings) (id string, err error) {
	tried, adopted := false, false
	adopt := func(ctx context.Context) (bool, error) {
		found, ok, err := h.findOwn(ctx, set.name)
		if ok {
			id, adopted = found, true
		}
		return ok, err
	}
	err = h.calls.do(ctx, h.trail, "create", func(ctx context.Context) error {
		if tried {
			if ok, err := adopt(ctx); ok || err != nil {
				return err
			}
		}
		tried = true
		resp, err := h.docker.ContainerCreate(ctx, set.config, set.host, nil, nil, set.name)
		if err == nil {
			id = resp.ID
			return nil
		}
		if cerrdefs.IsConflict(err) {
			if ok, ferr := adopt(ctx); ok || ferr != nil {
				return ferr
			}
			return sandgate.WrapError(sandgate.CodeContainerCreate, err, "container name %s is taken by a container of another run", set.name)
		}
		return err
	})
	if err == nil {
		if adopted {
			h.log.Info("adopted container created by an earlier attempt", "run_id", h.job.RunID, "container_id", id)
		}
		return id, nil
	}
	return "", h.createError(ctx, set, err)
}

// createError classifies a create the daemon refused.
func (h *handle) createError(ctx context.Context, set settings, err error) error {
	var se *sandgate.Error
	switch {
	case errors.As(err, &se):
		return se
	case cerrdefs.IsNotFound(err):
		// The image went away since it was resolved, or the network does
		// not exist: ask about the image to tell which.
		h.e.resolver.forget(set.config.Image)
		_, ierr := h.docker.ImageInspect(ctx, set.config.Image)
		if cerrdefs.IsNotFound(ierr) {
			h.trail.imageUnavailable(set.config.Image, "removed before create", nil)
			return sandgate.WrapError(sandgate.CodeImageUnavailable, err, "image %s is not present", set.config.Image)
		}
		return sandgate.WrapError(sandgate.CodeContainerCreate, err, "create container: %s", daemon.RefusalMessage(err))
	case cerrdefs.IsInvalidArgument(err):
		// The spec was validated and the hardening is fixed, so what the
		// daemon still refuses is a mount it cannot set up, or a value
		// of the spec only the daemon can judge.
		code := sandgate.CodeContainerCreate
		if len(h.job.Spec.Mounts)+len(h.job.Spec.Volumes) > 0 {
			code = sandgate.CodeMountError
		}
		return sandgate.WrapError(code, err, "create container: %s", daemon.RefusalMessage(err))
	}
	return daemon.Error(sandgate.CodeContainerCreate, err, "create container %s", set.name)
}

// findOwn looks up the container named name and reports whether it belongs
// to this run on this node.
func (h *handle) findOwn(ctx context.Context, name string) (string, bool, error) {
	c, err := h.docker.ContainerInspect(ctx, name)
	switch {
	case cerrdefs.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, err
	case c.Config == nil || c.ContainerJSONBase == nil:
		return "", false, nil
	}
	l := c.Config.Labels
	if l[sandgate.LabelRunID] != h.job.RunID || l[sandgate.LabelNode] != h.e.cfg.Node {
		return "", false, nil
	}
	return c.ID, true, nil
}

// start starts the container exactly once. After a start that failed
// transiently, the container's state says whether it started after all
// (then it is not started again: user code never runs twice) or why it
// could not start (then trying again would not help).
func (h *handle) start(ctx context.Context) (*int, error) {
	id := h.res.ContainerID
	tried := false
	var st container.InspectResponse
	// settled looks at the container after a failed start: started after
	// all (done), or refused for a reason the daemon recorded.
	settled := func(ctx context.Context) (bool, error) {
		var err error
		if st, err = h.docker.ContainerInspect(ctx, id); err != nil {
			return false, err
		}
		if everStarted(st) {
			return true, nil
		}
		if s := stateOf(st); s != nil && s.Error != "" {
			return false, errStartRefused
		}
		return false, nil
	}
	err := h.calls.do(ctx, h.trail, "start", func(ctx context.Context) error {
		if tried {
			if done, err := settled(ctx); done || err != nil {
				return err
			}
		}
		tried = true
		err := h.docker.ContainerStart(ctx, id, container.StartOptions{})
		if err == nil || !cerrdefs.IsInternal(err) {
			return err
		}
		// A 500 is mostly the runtime refusing the process (no such user,
		// no such binary), which the daemon records; look before retrying.
		if done, serr := settled(ctx); done || errors.Is(serr, errStartRefused) {
			return serr
		}
		return err
	})
	if err == nil {
		return nil, nil
	}
	if ctx.Err() != nil {
		return nil, err
	}
	// The daemon keeps the reason, and the exit code a shell would give
	// (127 not found, 126 not executable), in the container's state.
	ictx, cancel := h.calls.cleanup(ctx)
	defer cancel()
	if s, ierr := h.docker.ContainerInspect(ictx, id); ierr == nil {
		st = s
	}
	if s := stateOf(st); s != nil && s.Error != "" {
		var code *int
		if s.ExitCode != 0 {
			c := s.ExitCode
			code = &c
		}
		return code, &sandgate.Error{Code: sandgate.CodeContainerCreate, Message: "container did not start: " + daemon.Trim(s.Error), Err: err}
	}
	if errors.Is(err, errStartRefused) {
		return nil, sandgate.WrapError(sandgate.CodeContainerCreate, err, "container did not start")
	}
	if cerrdefs.IsInvalidArgument(err) {
		return nil, sandgate.WrapError(sandgate.CodeContainerCreate, err, "container did not start: %s", daemon.RefusalMessage(err))
	}
	return nil, daemon.Error(sandgate.CodeContainerCreate, err, "start container %s", id)
}

// errStartRefused ends the start retries once the daemon has recorded why
// the container cannot start.
var errStartRefused = errors.New("the daemon recorded a start failure")

// everStarted reports whether the container's process was ever started.
func everStarted(c container.InspectResponse) bool {
	s := stateOf(c)
	if s == nil {
		return false
	}
	if s.Running || s.Paused || s.Restarting {
		return true
	}
	t, err := time.Parse(time.RFC3339Nano, s.StartedAt)
	return err == nil && !t.IsZero()
}

// stateOf is the container's state, nil when the daemon sent none.
func stateOf(c container.InspectResponse) *container.State {
	if c.ContainerJSONBase == nil {
		return nil
	}
	return c.State
}

// remove removes the run's container id and records it. A container that
// cannot be removed now is left to the reaper.
func (h *handle) remove(id string) {
	ctx, cancel := h.calls.cleanup(h.ctx)
	defer cancel()
	err := h.calls.do(ctx, h.trail, "remove", func(ctx context.Context) error {
		return h.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	})
	switch {
	case err == nil:
		h.trail.removed()
	case cerrdefs.IsNotFound(err):
		// Gone already: a lost run, or removed by hand.
	default:
		h.log.Error("remove container; the reaper will retry", "run_id", h.job.RunID, "container_id", id, "err", err)
	}
}

// removeByName removes the container a cancelled create may have made:
// the handle's end (close) removes what it finds.
func (h *handle) removeByName(name string) {
	ctx, cancel := h.calls.cleanup(h.ctx)
	defer cancel()
	id, ok, err := h.findOwn(ctx, name)
	if err != nil || !ok {
		return
	}
	h.setContainer(id, h.now())
}

// startAndFollow starts a created container and follows it to its end:
// attached to and waited on first, so no output and no exit is missed,
// then started exactly once. A session's container's agent is dialled
// before the session counts as open.
func (h *handle) startAndFollow(useAgent bool) ending {
	ctx := h.ctx
	if h.main == nil {
		h.main = newMainProc(h)
	}
	stdin := h.job.Spec.Stdin
	if err := h.main.attach(ctx, stdin != "" || useAgent, container.WaitConditionNextExit); err != nil {
		return h.failedOr(err)
	}
	code, err := h.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return cancelledBeforeStart()
		}
		x := failed(err)
		x.code = code
		return x
	}
	if useAgent {
		// An agent that does not answer (it exited at once, the binary
		// does not run in the image) fails the run before it is started:
		// a session is not open until its agent is.
		l, err := dialAgent(h.main.hj, h.stderr)
		if err != nil {
			err = sandgate.WrapError(sandgate.CodeContainerCreate, err, "the sandbox agent of container %s", h.res.ContainerID)
			h.main.stop()
			return failed(err)
		}
		_, ws := h.link()
		h.setLink(l, ws)
	}
	h.started(h.now(), nil, true)
	h.e.nets.registerEgress(ctx, h)
	if stdin != "" {
		h.main.writeStdin(stdin)
	}
	return h.follow(h.main)
}
