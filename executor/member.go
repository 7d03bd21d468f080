package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandgate/sandgate"
)

// A warm pool's members: each a started container waiting, without a
// byte of output, for the one run that claims it.

// launcher is the entrypoint of a warm container: under the init process
// it waits, without a byte of output, for one NUL-terminated shell script
// on its attached stdin, and evaluates it. The script (see warmScript)
// only sets the run's environment and execs its command, so from then on
// the container's process is the run's command, exactly as on the cold
// path: its exit code is the container's, a memory-cgroup OOM kill marks
// the container OOMKilled, and a stop signal reaches it through the init
// process. busybox ash reads a pipe one byte at a time, so whatever
// follows the NUL (the run's stdin) is left for the command. When stdin
// closes before a script came (the pool was drained, the attach broke) it
// exits with launcherNoScript and the pool replaces it.
const launcher = `IFS= read -r -d '' s || exit 211; eval "$s"`

// launcherNoScript is the exit code of a launcher whose stdin closed before
// a script came. A claimed warm container that exited with it while no
// gateway watched (the gateway died between claiming it and handing the
// command over) never ran the command, so adoption records the run as
// lost, not as a success. A command that itself exits 211 in a warm
// container and is adopted after such a crash is recorded as lost too.
const launcherNoScript = 211

// poolAPI is the Docker calls that make, watch and remove warm
// containers.
type poolAPI interface {
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networking *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerAttach(ctx context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error)
	ContainerWait(ctx context.Context, id string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
}

// member is one warm container.
type member struct {
	prof       *profile
	name       string
	id         string
	imageID    string
	env        map[string]bool // names in the container's environment
	entrypoint []string        // the image's, prepended to the command as Docker would
	created    time.Time

	hj         types.HijackedResponse
	waitC      <-chan container.WaitResponse
	errC       <-chan error
	cancelWait context.CancelFunc

	// claimed is closed by the run that takes the member; watched is
	// closed when the idle watcher has stopped, after setting died when
	// it saw the container exit first.
	claimed chan struct{}
	watched chan struct{}
	died    bool

	job *sandgate.Job // the run that claimed it

	// ws is a session member's workspace, named after the member.
	ws *runWorkspace

	// agent is the connection to the container's agent, when its main
	// process is one (Config.AgentBinary): it reads the attach stream.
	agent *agentLink
}

// makeMember creates, attaches to and starts one warm container of prof
// and adds it to the idle members.
func (p *pool) makeMember(prof *profile) {
	e := p.e
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout*time.Duration(e.cfg.MaxRetries+2))
	defer cancel()
	m, err := p.newMember(ctx, prof)
	p.mu.Lock()
	prof.filling--
	if err != nil {
		prof.failures++
		wait := time.Second << min(prof.failures-1, 5)
		prof.notBefore = e.now().Add(wait)
		p.mu.Unlock()
		e.log.Warn("warm pool: container not made", "profile", prof.key, "retry_in", wait, "err", err)
		return
	}
	prof.failures, prof.notBefore = 0, time.Time{}
	if p.stopped || !p.current(prof) {
		// Stopping, or the profile was replaced while this was made.
		p.mu.Unlock()
		p.discard(m)
		return
	}
	prof.idle = append(prof.idle, m)
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.watch(m)
	}()
}

// newMember makes one warm container: created with the profile's
// settings and the launcher as entrypoint, attached to (stdin included)
// and waited on before it starts, as the cold path does, so nothing it
// does is missed.
func (p *pool) newMember(ctx context.Context, prof *profile) (*member, error) {
	e := p.e
	if string(prof.set.host.NetworkMode) == e.cfg.BridgeNetwork {
		if err := e.nets.ensureBridge(ctx, nil); err != nil {
			return nil, err
		}
	}
	img, err := p.docker.ImageInspect(ctx, prof.set.config.Image)
	if err != nil {
		return nil, fmt.Errorf("inspect image %s: %w", prof.set.config.Image, err)
	}
	m := &member{
		prof:    prof,
		name:    poolPrefix + e.cfg.Node + "-" + prof.key[:8] + "-" + randomSuffix(),
		imageID: img.ID,
		env:     map[string]bool{},
		claimed: make(chan struct{}),
		watched: make(chan struct{}),
	}
	if img.Config != nil {
		m.entrypoint = append([]string(nil), img.Config.Entrypoint...)
		for _, kv := range img.Config.Env {
			name, _, _ := strings.Cut(kv, "=")
			m.env[name] = true
		}
	}
	cfg := *prof.set.config
	cfg.Image = img.ID
	cfg.Entrypoint = []string{"/bin/sh", "-c", launcher, "sandgate-launcher"}
	cfg.Cmd = nil
	cfg.Env = nil
	cfg.AttachStdin, cfg.OpenStdin, cfg.StdinOnce = true, true, true
	cfg.Labels = map[string]string{
		sandgate.LabelManaged: "true",
		sandgate.LabelNode:    e.cfg.Node,
		LabelInstance:         e.cfg.Instance,
		LabelPool:             prof.key,
	}
	// Owned from before the create (and the workspace), so a reaper pass
	// that lists the container before its ID is known, or the workspace,
	// leaves them alone.
	p.mu.Lock()
	p.owned[m.name] = m
	p.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			p.discard(m)
		}
	}()

	if err := p.createMember(ctx, m, cfg); err != nil {
		return nil, err
	}
	if err := p.startMember(ctx, m); err != nil {
		return nil, err
	}
	ok = true
	return m, nil
}

// createMember makes m's workspace (a session member's) and its
// container, with cfg and the profile's host configuration.
func (p *pool) createMember(ctx context.Context, m *member, cfg container.Config) error {
	e, prof := p.e, m.prof
	var err error
	hostCfg := prof.set.host
	if prof.session {
		// The member's workspace, named after it, made now: a session that
		// claims it finds its file system mounted at its workdir.
		host := *hostCfg
		host.Mounts = append([]mount.Mount(nil), host.Mounts...)
		set := settings{config: &cfg, host: &host}
		if m.ws, _, err = e.workspaces.prepare(ctx, nil, sandgate.Job{RunID: m.name, Spec: prof.spec}, &set); err != nil {
			return fmt.Errorf("the workspace of %s: %w", m.name, err)
		}
		hostCfg = set.host
	}
	if e.cfg.AgentBinary != "" {
		set := settings{config: &cfg, host: hostCfg}
		withAgent(&set, e.cfg.AgentBinary)
		cfg, hostCfg = *set.config, set.host
	}

	err = p.calls.do(ctx, nil, "create warm container", func(ctx context.Context) error {
		// The client normalises the capabilities in place: every create
		// gets its own copy of the profile's.
		host := *hostCfg
		resp, err := p.docker.ContainerCreate(ctx, &cfg, &host, nil, nil, m.name)
		if cerrdefs.IsConflict(err) {
			// An earlier attempt made it after all.
			c, ierr := p.docker.ContainerInspect(ctx, m.name)
			if ierr != nil {
				return err
			}
			resp.ID, err = c.ID, nil
		}
		m.id = resp.ID
		return err
	})
	if err != nil {
		return fmt.Errorf("create %s: %w", m.name, err)
	}
	m.created = e.now()
	return nil
}

// startMember attaches to m's container (stdin included), waits on it,
// starts it, and dials its agent when it runs one.
func (p *pool) startMember(ctx context.Context, m *member) error {
	err := p.calls.do(ctx, nil, "attach warm container", func(ctx context.Context) error {
		var err error
		m.hj, err = p.docker.ContainerAttach(ctx, m.id, container.AttachOptions{
			Stream: true, Stdin: true, Stdout: true, Stderr: true,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("attach to %s: %w", m.name, err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	m.cancelWait = wcancel
	m.waitC, m.errC = p.docker.ContainerWait(wctx, m.id, container.WaitConditionNextExit)
	err = p.calls.do(ctx, nil, "start warm container", func(ctx context.Context) error {
		return p.docker.ContainerStart(ctx, m.id, container.StartOptions{})
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", m.name, err)
	}
	if p.e.cfg.AgentBinary != "" {
		// Authenticated now, off any run's path; the output of a run
		// comes framed by the agent.
		if m.agent, err = dialAgent(m.hj, io.Discard); err != nil {
			return fmt.Errorf("the agent of %s: %w", m.name, err)
		}
	}
	return nil
}

// watch is the health check of an idle member: a member whose container
// exits (killed, out of memory, the daemon restarted) before a run claims
// it is removed and replaced.
func (p *pool) watch(m *member) {
	select {
	case <-m.claimed:
		close(m.watched)
		return
	case <-m.waitC:
	case <-m.errC:
	}
	m.died = true
	close(m.watched)
	if p.takeIdle(m) {
		p.e.log.Warn("warm pool: idle container exited; replacing it", "container_id", m.id)
		p.discard(m)
		p.refill()
	}
	// Otherwise a claim is taking it and sees died.
}

// agentGone reports whether the member's agent has stopped answering.
func (m *member) agentGone() bool {
	if m.agent == nil {
		return false
	}
	select {
	case <-m.agent.conn.Done():
		return true
	default:
		return false
	}
}

// discard removes a member no run will get. A container that cannot be
// removed now is left to the reaper.
func (p *pool) discard(m *member) {
	if m.cancelWait != nil {
		m.cancelWait()
	}
	if m.hj.Conn != nil {
		m.hj.Close()
	}
	defer func() {
		p.mu.Lock()
		delete(p.owned, m.name)
		p.mu.Unlock()
	}()
	ref := m.id
	if ref == "" {
		ref = m.name
	}
	if m.ws != nil {
		defer p.e.workspaces.remove(m.ws)
	}
	e := p.e
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout*time.Duration(e.cfg.MaxRetries+1))
	defer cancel()
	err := p.calls.do(ctx, nil, "remove warm container", func(ctx context.Context) error {
		return p.docker.ContainerRemove(ctx, ref, container.RemoveOptions{Force: true, RemoveVolumes: true})
	})
	if err != nil && !cerrdefs.IsNotFound(err) {
		e.log.Warn("warm pool: remove container; the reaper will retry", "container", ref, "err", err)
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
