package executor

import (
	"context"
	"errors"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate"
)

// create creates the run's container. A create that failed in a way that
// leaves open whether the daemon made the container (a timeout, a broken
// connection, a 5xx) is followed by a look-up by name before any new
// attempt, and a name conflict with a container of this very run adopts
// it: a run never gets two containers.
func (e *Executor) create(ctx context.Context, r *run, set settings) (id string, err error) {
	tried, adopted := false, false
	adopt := func(ctx context.Context) (bool, error) {
		found, ok, err := e.findOwn(ctx, r, set.name)
		if ok {
			id, adopted = found, true
		}
		return ok, err
	}
	err = e.call(ctx, r, "create", func(ctx context.Context) error {
		if tried {
			if ok, err := adopt(ctx); ok || err != nil {
				return err
			}
		}
		tried = true
		resp, err := e.docker.ContainerCreate(ctx, set.config, set.host, nil, nil, set.name)
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
			e.log.Info("adopted container created by an earlier attempt", "run_id", r.job.RunID, "container_id", id)
		}
		return id, nil
	}
	return "", e.createError(ctx, r, set, err)
}

// createError classifies a create the daemon refused.
func (e *Executor) createError(ctx context.Context, r *run, set settings, err error) error {
	var se *sandgate.Error
	switch {
	case errors.As(err, &se):
		return se
	case cerrdefs.IsNotFound(err):
		// The image went away since it was resolved, or the network does
		// not exist: ask about the image to tell which.
		e.forgetImage(set.config.Image)
		_, ierr := e.docker.ImageInspect(ctx, set.config.Image)
		if cerrdefs.IsNotFound(ierr) {
			e.emit(r, sandgate.EventImageUnavailable, map[string]any{"image": set.config.Image, "reason": "removed before create"})
			return sandgate.WrapError(sandgate.CodeImageUnavailable, err, "image %s is not present", set.config.Image)
		}
		return sandgate.WrapError(sandgate.CodeContainerCreate, err, "create container: %s", daemonMessage(err))
	case cerrdefs.IsInvalidArgument(err):
		// The spec was validated and the hardening is fixed, so what the
		// daemon still refuses is a mount it cannot set up, or a value
		// of the spec only the daemon can judge.
		code := sandgate.CodeContainerCreate
		if len(r.job.Spec.Mounts)+len(r.job.Spec.Volumes) > 0 {
			code = sandgate.CodeMountError
		}
		return sandgate.WrapError(code, err, "create container: %s", daemonMessage(err))
	}
	return dockerError(sandgate.CodeContainerCreate, err, "create container %s", set.name)
}

// daemonMessage is the daemon's own explanation of a refusal it made on
// the merits of the request; it is about the request, so the client may
// see it.
func daemonMessage(err error) string {
	const max = 512
	msg := err.Error()
	if len(msg) > max {
		msg = msg[:max] + "…"
	}
	return msg
}

// findOwn looks up the container named name and reports whether it belongs
// to run r on this node.
func (e *Executor) findOwn(ctx context.Context, r *run, name string) (string, bool, error) {
	c, err := e.docker.ContainerInspect(ctx, name)
	switch {
	case cerrdefs.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, err
	case c.Config == nil || c.ContainerJSONBase == nil:
		return "", false, nil
	}
	l := c.Config.Labels
	if l[sandgate.LabelRunID] != r.job.RunID || l[sandgate.LabelNode] != e.cfg.Node {
		return "", false, nil
	}
	return c.ID, true, nil
}

// start starts the container exactly once. After a start that failed
// transiently, the container's state says whether it started after all
// (then it is not started again: user code never runs twice) or why it
// could not start (then trying again would not help).
func (e *Executor) start(ctx context.Context, r *run, id string) (*int, error) {
	tried := false
	var st container.InspectResponse
	// settled looks at the container after a failed start: started after
	// all (done), or refused for a reason the daemon recorded.
	settled := func(ctx context.Context) (bool, error) {
		var err error
		if st, err = e.docker.ContainerInspect(ctx, id); err != nil {
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
	err := e.call(ctx, r, "start", func(ctx context.Context) error {
		if tried {
			if done, err := settled(ctx); done || err != nil {
				return err
			}
		}
		tried = true
		err := e.docker.ContainerStart(ctx, id, container.StartOptions{})
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
	ictx, cancel := e.cleanupContext(ctx)
	defer cancel()
	if s, ierr := e.docker.ContainerInspect(ictx, id); ierr == nil {
		st = s
	}
	if s := stateOf(st); s != nil && s.Error != "" {
		var code *int
		if s.ExitCode != 0 {
			c := s.ExitCode
			code = &c
		}
		return code, &sandgate.Error{Code: sandgate.CodeContainerCreate, Message: "container did not start: " + trimMessage(s.Error), Err: err}
	}
	if errors.Is(err, errStartRefused) {
		return nil, sandgate.WrapError(sandgate.CodeContainerCreate, err, "container did not start")
	}
	if cerrdefs.IsInvalidArgument(err) {
		return nil, sandgate.WrapError(sandgate.CodeContainerCreate, err, "container did not start: %s", daemonMessage(err))
	}
	return nil, dockerError(sandgate.CodeContainerCreate, err, "start container %s", id)
}

// errStartRefused ends the start retries once the daemon has recorded why
// the container cannot start.
var errStartRefused = errors.New("the daemon recorded a start failure")

func trimMessage(s string) string {
	const max = 512
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

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
