package executor

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandgate/sandgate"
)

// fakeDocker is an in-memory daemon for the calls in dockerAPI. Hooks
// decide, per call number (1-based), what a call does.
type fakeDocker struct {
	mu         sync.Mutex
	calls      map[string]int
	containers map[string]*fakeContainer
	volumes    map[string]*volume.Volume
	nextID     int

	// onCreate returns the error of create call n and whether the
	// container is made anyway (a create that timed out but happened).
	onCreate func(ctx context.Context, n int) (happened bool, err error)
	// onStart returns the error of start call n and whether the start
	// happened anyway.
	onStart        func(n int) (happened bool, err error)
	onImageInspect func(n int) error
	onPing         func(n int) error
	// exitCode and stdout are what every container does once started;
	// with hang it runs until a signal ends it, and with ignoreTERM only
	// SIGKILL does.
	exitCode   int64
	stdout     string
	hang       bool
	ignoreTERM bool
}

type fakeContainer struct {
	id, name string
	labels   map[string]string
	started  int // how many times user code was started
	running  bool
	exited   bool
	code     int64
	waiters  []chan container.WaitResponse
	out      net.Conn // the daemon's end of the attach stream
}

func newFakeDocker() *fakeDocker {
	return &fakeDocker{calls: map[string]int{}, containers: map[string]*fakeContainer{}, stdout: "hello\n"}
}

func (f *fakeDocker) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *fakeDocker) called(op string) int {
	f.calls[op]++
	return f.calls[op]
}

// find looks a container up by ID or name; f.mu is held.
func (f *fakeDocker) find(ref string) *fakeContainer {
	if c, ok := f.containers[ref]; ok {
		return c
	}
	for _, c := range f.containers {
		if c.name == ref {
			return c
		}
	}
	return nil
}

func (f *fakeDocker) Ping(context.Context) (types.Ping, error) {
	f.mu.Lock()
	n := f.called("ping")
	hook := f.onPing
	f.mu.Unlock()
	if hook != nil {
		return types.Ping{}, hook(n)
	}
	return types.Ping{APIVersion: "1.41"}, nil
}

func (f *fakeDocker) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	f.mu.Lock()
	n := f.called("image inspect")
	hook := f.onImageInspect
	f.mu.Unlock()
	if hook != nil {
		if err := hook(n); err != nil {
			return image.InspectResponse{}, err
		}
	}
	return image.InspectResponse{ID: "sha256:" + strings.Repeat("ab", 32)}, nil
}

func (f *fakeDocker) ImagePull(context.Context, string, image.PullOptions) (io.ReadCloser, error) {
	f.mu.Lock()
	f.called("image pull")
	f.mu.Unlock()
	return io.NopCloser(strings.NewReader(`{"status":"pulled"}`)), nil
}

func (f *fakeDocker) ContainerCreate(ctx context.Context, cfg *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	f.mu.Lock()
	n := f.called("create")
	hook := f.onCreate
	f.mu.Unlock()
	happened, err := true, error(nil)
	if hook != nil {
		happened, err = hook(ctx, n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if happened {
		if f.find(name) != nil {
			return container.CreateResponse{}, errConflict(fmt.Sprintf("name %s in use", name))
		}
		f.nextID++
		id := fmt.Sprintf("%064d", f.nextID)
		f.containers[id] = &fakeContainer{id: id, name: name, labels: cfg.Labels}
		if err == nil {
			return container.CreateResponse{ID: id}, nil
		}
	}
	return container.CreateResponse{}, err
}

func (f *fakeDocker) ContainerAttach(_ context.Context, id string, _ container.AttachOptions) (types.HijackedResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("attach")
	c := f.find(id)
	if c == nil {
		return types.HijackedResponse{}, errNotFound("no such container " + id)
	}
	client, daemon := net.Pipe()
	c.out = daemon
	return types.NewHijackedResponse(client, ""), nil
}

func (f *fakeDocker) ContainerWait(_ context.Context, id string, cond container.WaitCondition) (<-chan container.WaitResponse, <-chan error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("wait")
	res, errc := make(chan container.WaitResponse, 1), make(chan error, 1)
	c := f.find(id)
	switch {
	case c == nil:
		errc <- errNotFound("no such container " + id)
	case c.exited && cond != container.WaitConditionNextExit:
		res <- container.WaitResponse{StatusCode: c.code}
	default:
		c.waiters = append(c.waiters, res)
	}
	return res, errc
}

func (f *fakeDocker) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	f.mu.Lock()
	n := f.called("start")
	hook := f.onStart
	c := f.find(id)
	f.mu.Unlock()
	if c == nil {
		return errNotFound("no such container " + id)
	}
	happened, err := true, error(nil)
	if hook != nil {
		happened, err = hook(n)
	}
	if happened {
		f.run(c)
	}
	return err
}

// run plays the container: output on the attach stream, then the exit,
// unless the fake hangs, when only a signal ends it.
func (f *fakeDocker) run(c *fakeContainer) {
	f.mu.Lock()
	c.started++
	c.running = true
	out, stdout, code, hang := c.out, f.stdout, f.exitCode, f.hang
	f.mu.Unlock()
	go func() {
		if out != nil {
			w := stdcopy.NewStdWriter(out, stdcopy.Stdout)
			io.WriteString(w, stdout)
		}
		if !hang {
			f.exit(c, code)
		}
	}()
}

// exit ends the container with code.
func (f *fakeDocker) exit(c *fakeContainer, code int64) {
	f.mu.Lock()
	if !c.running {
		f.mu.Unlock()
		return
	}
	c.running, c.exited, c.code = false, true, code
	waiters, out := c.waiters, c.out
	c.waiters = nil
	f.mu.Unlock()
	if out != nil {
		out.Close()
	}
	for _, w := range waiters {
		w <- container.WaitResponse{StatusCode: code}
	}
}

func (f *fakeDocker) ContainerKill(_ context.Context, id, signal string) error {
	f.mu.Lock()
	f.called("kill " + signal)
	c := f.find(id)
	ignore := signal == "SIGTERM" && f.ignoreTERM
	f.mu.Unlock()
	switch {
	case c == nil:
		return errNotFound("no such container " + id)
	case ignore:
		return nil
	case signal == "SIGKILL":
		f.exit(c, 137)
	default:
		f.exit(c, 143)
	}
	return nil
}

func (f *fakeDocker) ContainerInspect(_ context.Context, ref string) (container.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("inspect")
	c := f.find(ref)
	if c == nil {
		return container.InspectResponse{}, errNotFound("no such container " + ref)
	}
	status, started := "created", "0001-01-01T00:00:00Z"
	if c.started > 0 {
		status, started = "exited", time.Unix(1, 0).UTC().Format(time.RFC3339Nano)
		if c.running {
			status = "running"
		}
	}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID:    c.id,
			Name:  "/" + c.name,
			State: &container.State{Status: container.ContainerState(status), Running: c.running, ExitCode: int(c.code), StartedAt: started},
		},
		Config: &container.Config{Labels: c.labels},
	}, nil
}

// ContainerStats is refused: the fake keeps no counters, so runs report
// their wall time only.
func (f *fakeDocker) ContainerStats(_ context.Context, _ string, _ bool) (container.StatsResponseReader, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("stats")
	return container.StatsResponseReader{}, fmt.Errorf("the fake daemon keeps no stats")
}

func (f *fakeDocker) ContainerRemove(_ context.Context, id string, _ container.RemoveOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("remove")
	c := f.find(id)
	if c == nil {
		return errNotFound("no such container " + id)
	}
	delete(f.containers, c.id)
	return nil
}

func (f *fakeDocker) ContainerList(context.Context, container.ListOptions) ([]container.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("list")
	var out []container.Summary
	for _, c := range f.containers {
		state := "created"
		if c.running {
			state = "running"
		} else if c.exited {
			state = "exited"
		}
		out = append(out, container.Summary{ID: c.id, Names: []string{"/" + c.name}, Labels: c.labels, State: container.ContainerState(state)})
	}
	return out, nil
}

func (f *fakeDocker) CopyFromContainer(_ context.Context, id, path string) (io.ReadCloser, container.PathStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("copy")
	if f.find(id) == nil {
		return nil, container.PathStat{}, errNotFound("no such container " + id)
	}
	// An image without account files: the user is what the spec says.
	return nil, container.PathStat{}, errNotFound("no such file " + path)
}

func (f *fakeDocker) VolumeInspect(_ context.Context, id string) (volume.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("volume inspect")
	if v, ok := f.volumes[id]; ok {
		return *v, nil
	}
	return volume.Volume{}, errNotFound("no such volume " + id)
}

// VolumeCreate keeps the volume, as the local driver does: a name that
// exists gives the volume there.
func (f *fakeDocker) VolumeCreate(_ context.Context, opts volume.CreateOptions) (volume.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("volume create")
	if v, ok := f.volumes[opts.Name]; ok {
		return *v, nil
	}
	if f.volumes == nil {
		f.volumes = map[string]*volume.Volume{}
	}
	v := &volume.Volume{Name: opts.Name, Options: opts.DriverOpts, Labels: opts.Labels, CreatedAt: time.Now().UTC().Format(time.RFC3339)}
	f.volumes[opts.Name] = v
	return *v, nil
}

// VolumeList lists the volumes with every label=value filter.
func (f *fakeDocker) VolumeList(_ context.Context, opts volume.ListOptions) (volume.ListResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("volume list")
	var out volume.ListResponse
	for _, v := range f.volumes {
		match := true
		for _, kv := range opts.Filters.Get("label") {
			k, val, _ := strings.Cut(kv, "=")
			if v.Labels[k] != val {
				match = false
			}
		}
		if match {
			c := *v
			out.Volumes = append(out.Volumes, &c)
		}
	}
	return out, nil
}

func (f *fakeDocker) VolumeRemove(_ context.Context, id string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("volume remove")
	delete(f.volumes, id)
	return nil
}

func (f *fakeDocker) NetworkInspect(_ context.Context, id string, _ network.InspectOptions) (network.Inspect, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("network inspect")
	return network.Inspect{Name: id, Driver: "bridge", Options: map[string]string{"com.docker.network.bridge.enable_icc": "false"}}, nil
}

func (f *fakeDocker) NetworkCreate(context.Context, string, network.CreateOptions) (network.CreateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("network create")
	return network.CreateResponse{}, nil
}

func (f *fakeDocker) Info(context.Context) (system.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called("info")
	return system.Info{NCPU: 2, SystemTime: time.Now().UTC().Format(time.RFC3339Nano)}, nil
}

// Errors as the Docker client classifies them.
type (
	errNotFound    string
	errConflict    string
	errUnavailable string
	errInternal    string
	errInvalid     string
)

func (e errNotFound) Error() string    { return string(e) }
func (errNotFound) NotFound()          {}
func (e errConflict) Error() string    { return string(e) }
func (errConflict) Conflict()          {}
func (e errUnavailable) Error() string { return string(e) }
func (errUnavailable) Unavailable()    {}
func (e errInternal) Error() string    { return string(e) }
func (errInternal) System()            {}
func (e errInvalid) Error() string     { return string(e) }
func (errInvalid) InvalidParameter()   {}

// text is what a stream captured, as a string.
func text(o sandgate.Output) string {
	b, _ := o.Content()
	return string(b)
}

// The fake has no sessions: exec calls fail as a daemon without the
// container would.
func (f *fakeDocker) ContainerExecCreate(_ context.Context, id string, _ container.ExecOptions) (container.ExecCreateResponse, error) {
	return container.ExecCreateResponse{}, errNotFound("no such container " + id)
}

func (f *fakeDocker) ContainerExecAttach(_ context.Context, id string, _ container.ExecAttachOptions) (types.HijackedResponse, error) {
	return types.HijackedResponse{}, errNotFound("no such exec " + id)
}

func (f *fakeDocker) ContainerExecInspect(_ context.Context, id string) (container.ExecInspect, error) {
	return container.ExecInspect{}, errNotFound("no such exec " + id)
}
