package executor

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandgate/sandgate"
)

// dockerAPI is every Docker Engine call the run lifecycle, the reaper and
// Ping make. *client.Client satisfies it; unit tests fake exactly these.
type dockerAPI interface {
	Ping(ctx context.Context) (types.Ping, error)
	Info(ctx context.Context) (system.Info, error)
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error)
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networking *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerAttach(ctx context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error)
	ContainerWait(ctx context.Context, id string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerKill(ctx context.Context, id, signal string) error
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerStats(ctx context.Context, id string, stream bool) (container.StatsResponseReader, error)
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	CopyFromContainer(ctx context.Context, id, srcPath string) (io.ReadCloser, container.PathStat, error)
	// A command in a session (exec.go).
	ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
	VolumeInspect(ctx context.Context, id string) (volume.Volume, error)
	VolumeCreate(ctx context.Context, opts volume.CreateOptions) (volume.Volume, error)
	VolumeRemove(ctx context.Context, id string, force bool) error
	NetworkInspect(ctx context.Context, id string, opts network.InspectOptions) (network.Inspect, error)
	NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error)
}

// imageAPI is the Docker calls that build, load, list and prune images.
type imageAPI interface {
	ImageBuild(ctx context.Context, buildContext io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error)
	ImageLoad(ctx context.Context, input io.Reader, opts ...client.ImageLoadOption) (image.LoadResponse, error)
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageList(ctx context.Context, opts image.ListOptions) ([]image.Summary, error)
	ImageRemove(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error)
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	// The checks of a recipe image (recipe_build.go) run in a container.
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networking *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerWait(ctx context.Context, id string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error)
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
}

// localDaemon reports whether host names a daemon on this machine (the
// default socket or a unix socket), whose containers' cgroup files this
// process can read.
func localDaemon(host string) bool {
	return host == "" || strings.HasPrefix(host, "unix://")
}

// dial connects to the daemon at host (the local socket when empty), with
// the API version negotiated down to what the daemon speaks.
func dial(host string) (*client.Client, error) {
	if host == "" {
		host = client.DefaultDockerHost
	}
	c, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeDockerUnavailable, err, "docker client for %s", host)
	}
	return c, nil
}

// transient reports whether a Docker call that failed with err may succeed
// when tried again: the daemon could not be reached, answered 5xx, or the
// attempt timed out. The caller's own cancellation is never transient, and
// neither is anything the daemon refused on its merits (not found, invalid,
// conflict, forbidden).
func transient(ctx context.Context, err error) bool {
	switch {
	case err == nil, ctx.Err() != nil:
		return false
	case cerrdefs.IsNotFound(err), cerrdefs.IsInvalidArgument(err), cerrdefs.IsConflict(err),
		cerrdefs.IsPermissionDenied(err), cerrdefs.IsUnauthorized(err), cerrdefs.IsNotImplemented(err),
		cerrdefs.IsFailedPrecondition(err), cerrdefs.IsNotModified(err), cerrdefs.IsCanceled(err):
		return false
	case client.IsErrConnectionFailed(err):
		return true
	case cerrdefs.IsUnavailable(err), cerrdefs.IsInternal(err), cerrdefs.IsDeadlineExceeded(err),
		cerrdefs.IsUnknown(err), cerrdefs.IsResourceExhausted(err):
		// 503, 500, per-attempt timeouts, and other unexpected statuses
		// (502, 504) that errhttp maps to Unknown.
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ENOENT),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// unreachable reports whether err means the daemon itself is away, as
// opposed to a call it answered with an error.
func unreachable(err error) bool {
	if client.IsErrConnectionFailed(err) || cerrdefs.IsUnavailable(err) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// dockerError turns a failed Docker call into a sandgate error: the daemon
// being away is DOCKER-UNAVAILABLE, anything else the code given.
func dockerError(code sandgate.ErrorCode, err error, format string, args ...any) *sandgate.Error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return se
	}
	if unreachable(err) || (transient(context.Background(), err) && !cerrdefs.IsInternal(err)) {
		code = sandgate.CodeDockerUnavailable
	}
	return sandgate.WrapError(code, err, format, args...)
}
