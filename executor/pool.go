package executor

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandgate/sandgate"
)

// LabelPool marks a warm pool container with the key of its profile. The
// reaper of the node that made it leaves it alone while its pool or the run
// that claimed it owns it, and removes it as an orphan otherwise.
const LabelPool = "sandgate.pool"

// poolPrefix begins the name of every warm container (and of a warm
// session's workspace).
const poolPrefix = "sandgate-pool-"

// poolFillers is how many warm containers are being made at once, over
// all profiles: making one costs the daemon as much as a cold run, and the
// refill should not starve the runs it is meant to speed up.
const poolFillers = 2

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

// shellVars are the variables busybox ash exports by itself; the script
// unsets those the container's environment did not have, so the command
// sees the environment a cold container would give it.
var shellVars = []string{"OLDPWD", "PWD", "SHLVL"}

// pool keeps started containers ready for the runs whose container would
// be the same as theirs but for the command, environment and stdin.
//
// A profile is keyed by everything Docker fixes at create (image, user,
// working directory and the whole host configuration: network, read-only
// rootfs, mounts, capabilities, security options, resource limits, tmpfs,
// ulimits, init): a run is served from the pool only when the container
// the cold path would create for it has exactly that configuration, so a
// warm container is never configured differently from a cold one. Resource
// limits are part of the key rather than applied by ContainerUpdate at
// claim: that would be one more daemon round trip on the path the pool is
// for, and a window in which user code could run under the wrong limits.
//
// Each container serves one run and is removed after it; none is reused.
type pool struct {
	e    *Executor
	size int
	ttl  time.Duration

	fillers chan struct{}
	kick    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	started bool
	stopped bool
	owned   map[string]*member // by container name: filling, idle or claimed
	// profiles and byKey are replaced whole (setProfiles), never changed
	// in place: read them under mu, and use what was read.
	profiles []*profile
	byKey    map[string]*profile
}

// profile is one kind of warm container.
type profile struct {
	key string
	set settings
	// session profiles keep containers for sessions: each with a
	// workspace of its own, of the spec's size, at the spec's workdir.
	session bool
	spec    sandgate.Normalized
	// idle members, oldest first; filling counts those being made.
	idle    []*member
	filling int
	// failures in a row and when the next fill may be tried.
	failures  int
	notBefore time.Time
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

// newPool makes the pool for cfg, nil when cfg.WarmPool is 0. cfg must be
// validated, which checks the profiles.
func newPool(e *Executor, cfg Config) *pool {
	if cfg.WarmPool == 0 {
		return nil
	}
	p := &pool{
		e:       e,
		size:    cfg.WarmPool,
		ttl:     cfg.WarmPoolTTL,
		byKey:   map[string]*profile{},
		fillers: make(chan struct{}, poolFillers),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		owned:   map[string]*member{},
	}
	p.profiles, p.byKey, _ = p.buildProfiles(cfg.WarmProfiles) // Validate checked them
	return p
}

// buildProfiles makes the profiles of specs, reusing those of the current
// ones with the same key (and so their idle members).
func (p *pool) buildProfiles(specs []sandgate.Normalized) ([]*profile, map[string]*profile, error) {
	var profiles []*profile
	byKey := map[string]*profile{}
	for i, spec := range specs {
		set, err := warmSettings(spec, p.e.cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("warm profile %d: %w", i, err)
		}
		key := profileKey(set)
		session := spec.SessionID != ""
		if session {
			if p.e.cfg.AgentBinary == "" || os.Geteuid() != 0 {
				continue // a warm session needs its agent, and its workspace root
			}
			key = sessionKey(key, spec)
		}
		if byKey[key] != nil {
			continue
		}
		prof := p.byKey[key]
		if prof == nil {
			prof = &profile{key: key, set: set, session: session, spec: spec}
		}
		byKey[key] = prof
		profiles = append(profiles, prof)
	}
	return profiles, byKey, nil
}

// sessionKey is the pool key of a session's container: its settings'
// key, with the size and owner of the workspace a session member is made
// with (neither is in the container's settings).
func sessionKey(key string, spec sandgate.Normalized) string {
	var uid, gid int64 = -1, -1
	if spec.UID != nil {
		uid = *spec.UID
	}
	if spec.GID != nil {
		gid = *spec.GID
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "session|%s|%d|%d|%d|%s", key, spec.Resources.WorkspaceMB, uid, gid, spec.Workdir))
	return hex.EncodeToString(sum[:8])
}

// warmSettings are the container settings of a warm profile's spec; a
// profile with mounts or volumes is refused, since pooled containers have
// none.
func warmSettings(spec sandgate.Normalized, cfg Config) (settings, error) {
	set, err := containerSettings(sandgate.Job{RunID: "warm-pool", Spec: spec}, cfg)
	if err != nil {
		return settings{}, err
	}
	if len(set.host.Mounts) > 0 {
		return settings{}, errors.New("pooled containers have no mounts or volumes")
	}
	return set, nil
}

// setProfiles makes specs the pool's profiles: the containers of profiles
// that remain stay; those of profiles that are gone are removed, and the
// new ones are filled.
func (p *pool) setProfiles(specs []sandgate.Normalized) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	profiles, byKey, err := p.buildProfiles(specs)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	var retired []*member
	for key, prof := range p.byKey {
		if byKey[key] == nil {
			retired = append(retired, prof.idle...)
			prof.idle = nil
		}
	}
	p.profiles, p.byKey = profiles, byKey
	p.mu.Unlock()
	p.removeIdle(retired, "warm pool: removed the containers of profiles no longer in use")
	p.refill()
	return nil
}

// removeIdle removes members taken off the idle lists: their watchers
// stop, then their containers go. It logs msg with how many there were.
func (p *pool) removeIdle(members []*member, msg string) {
	for _, m := range members {
		close(m.claimed)
		<-m.watched
		p.discard(m)
	}
	if len(members) > 0 {
		p.e.log.Info(msg, "count", len(members))
	}
}

// current reports whether prof is one of the pool's profiles.
func (p *pool) current(prof *profile) bool {
	return p.byKey[prof.key] == prof
}

// profileKey is the digest of everything a container gets at create that
// no run may change: the pool key of a profile and of a run alike.
func profileKey(set settings) string {
	host := *set.host
	// An empty list and none mean the same to Docker.
	if len(host.CapAdd) == 0 {
		host.CapAdd = nil
	}
	if len(host.Sysctls) == 0 {
		host.Sysctls = nil
	}
	if len(host.Mounts) == 0 {
		host.Mounts = nil
	}
	b, err := json.Marshal(struct {
		Image, User, WorkingDir string
		Host                    container.HostConfig
	}{set.config.Image, set.config.User, set.config.WorkingDir, host})
	if err != nil {
		// A HostConfig always marshals; a key no run shares is the safe
		// answer if it ever did not.
		return "unkeyable-" + randomSuffix()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// start begins filling the pool and checking it every interval.
func (p *pool) start(interval time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.started || p.stopped {
		p.mu.Unlock()
		return
	}
	p.started = true
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.loop(interval)
	}()
	p.refill()
}

// refill asks the fill loop to top the pool up.
func (p *pool) refill() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// loop tops the pool up when asked and every interval, when it also
// recycles the members older than the TTL.
func (p *pool) loop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		case <-t.C:
			p.recycle()
		}
		p.fill()
	}
}

// fill starts making as many members as the profiles lack, within the
// fillers' limit; each finished fill asks for another round.
func (p *pool) fill() {
	now := p.e.now()
	p.mu.Lock()
	profiles := p.profiles
	p.mu.Unlock()
	for _, prof := range profiles {
		for {
			p.mu.Lock()
			want := !p.stopped && len(prof.idle)+prof.filling < p.size && !now.Before(prof.notBefore)
			p.mu.Unlock()
			if !want {
				break
			}
			select {
			case p.fillers <- struct{}{}:
			default:
				return // all fillers busy; the one that ends kicks again
			}
			p.mu.Lock()
			if p.stopped {
				p.mu.Unlock()
				<-p.fillers
				return
			}
			prof.filling++
			p.mu.Unlock()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.makeMember(prof)
				<-p.fillers
				p.refill()
			}()
		}
	}
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
		if err := e.ensureBridge(ctx, nil); err != nil {
			return nil, err
		}
	}
	img, err := e.docker.ImageInspect(ctx, prof.set.config.Image)
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

	hostCfg := prof.set.host
	if prof.session {
		// The member's workspace, named after it, made now: a session that
		// claims it finds its file system mounted at its workdir.
		host := *hostCfg
		host.Mounts = append([]mount.Mount(nil), host.Mounts...)
		set := settings{config: &cfg, host: &host}
		wr := &run{job: sandgate.Job{RunID: m.name, Spec: prof.spec}, ctx: ctx}
		if m.ws, err = e.prepareWorkspace(ctx, wr, &set); err != nil {
			return nil, fmt.Errorf("the workspace of %s: %w", m.name, err)
		}
		hostCfg = set.host
	}
	if e.cfg.AgentBinary != "" {
		set := settings{config: &cfg, host: hostCfg}
		e.withAgent(&set)
		cfg, hostCfg = *set.config, set.host
	}

	err = e.call(ctx, nil, "create warm container", func(ctx context.Context) error {
		// The client normalises the capabilities in place: every create
		// gets its own copy of the profile's.
		host := *hostCfg
		resp, err := e.docker.ContainerCreate(ctx, &cfg, &host, nil, nil, m.name)
		if cerrdefs.IsConflict(err) {
			// An earlier attempt made it after all.
			c, ierr := e.docker.ContainerInspect(ctx, m.name)
			if ierr != nil {
				return err
			}
			resp.ID, err = c.ID, nil
		}
		m.id = resp.ID
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", m.name, err)
	}
	m.created = e.now()
	err = e.call(ctx, nil, "attach warm container", func(ctx context.Context) error {
		var err error
		m.hj, err = e.docker.ContainerAttach(ctx, m.id, container.AttachOptions{
			Stream: true, Stdin: true, Stdout: true, Stderr: true,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach to %s: %w", m.name, err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	m.cancelWait = wcancel
	m.waitC, m.errC = e.docker.ContainerWait(wctx, m.id, container.WaitConditionNextExit)
	err = e.call(ctx, nil, "start warm container", func(ctx context.Context) error {
		return e.docker.ContainerStart(ctx, m.id, container.StartOptions{})
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", m.name, err)
	}
	if e.cfg.AgentBinary != "" {
		// Authenticated now, off any run's path; the output of a run
		// comes framed by the agent.
		if m.agent, err = e.dialAgent(m.hj, io.Discard); err != nil {
			return nil, fmt.Errorf("the agent of %s: %w", m.name, err)
		}
	}
	ok = true
	return m, nil
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

// takeIdle removes m from its profile's idle members and reports whether
// it was there.
func (p *pool) takeIdle(m *member) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	idle := m.prof.idle
	for i, x := range idle {
		if x == m {
			m.prof.idle = append(idle[:i:i], idle[i+1:]...)
			return true
		}
	}
	return false
}

// recycle removes the idle members older than the TTL; the next fill
// replaces them.
func (p *pool) recycle() {
	if p.ttl <= 0 {
		return
	}
	cutoff := p.e.now().Add(-p.ttl)
	var old []*member
	p.mu.Lock()
	for _, prof := range p.profiles {
		keep := prof.idle[:0:0]
		for _, m := range prof.idle {
			if m.created.Before(cutoff) {
				old = append(old, m)
			} else {
				keep = append(keep, m)
			}
		}
		prof.idle = keep
	}
	p.mu.Unlock()
	p.removeIdle(old, "warm pool: recycled containers past their TTL")
}

// claim hands the run an idle member of the profile its container would
// have, or returns nil when there is none: then the run takes the cold
// path. imageID is the image the run resolved; a member made from another
// image (the tag moved since) is discarded.
func (p *pool) claim(ctx context.Context, r *run, set settings, imageID string) *member {
	if p == nil || ctx.Err() != nil || len(set.host.Mounts) > 0 {
		return nil
	}
	key := profileKey(set)
	if r.job.SessionContainer {
		key = sessionKey(key, r.job.Spec)
	}
	p.mu.Lock()
	prof := p.byKey[key]
	p.mu.Unlock()
	if prof == nil {
		return nil
	}
	defer p.refill()
	for {
		p.mu.Lock()
		if p.stopped || len(prof.idle) == 0 {
			p.mu.Unlock()
			return nil
		}
		m := prof.idle[0]
		prof.idle = prof.idle[1:]
		p.mu.Unlock()

		close(m.claimed)
		<-m.watched
		if m.died || m.imageID != imageID || m.agentGone() {
			p.discard(m)
			continue
		}
		p.mu.Lock()
		job := r.job
		m.job = &job
		p.mu.Unlock()
		return m
	}
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

// release ends the pool's ownership of a member whose run has ended and
// removed it.
func (p *pool) release(m *member) {
	m.cancelWait()
	p.mu.Lock()
	delete(p.owned, m.name)
	p.mu.Unlock()
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
		defer m.ws.remove(p.e)
	}
	e := p.e
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout*time.Duration(e.cfg.MaxRetries+1))
	defer cancel()
	err := e.call(ctx, nil, "remove warm container", func(ctx context.Context) error {
		return e.docker.ContainerRemove(ctx, ref, container.RemoveOptions{Force: true, RemoveVolumes: true})
	})
	if err != nil && !cerrdefs.IsNotFound(err) {
		e.log.Warn("warm pool: remove container; the reaper will retry", "container", ref, "err", err)
	}
}

// owner returns whether the pool owns the container named name (being
// made, idle, or claimed by a run that has not ended), and the job of the
// run that claimed it, if any.
func (p *pool) owner(name string) (owned bool, job *sandgate.Job) {
	if p == nil {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.owned[name]
	if m == nil {
		return false, nil
	}
	return true, m.job
}

// shutdown stops filling and removes every idle member; members claimed
// by runs go with their runs.
func (p *pool) shutdown() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	close(p.stop)
	var idle []*member
	for _, prof := range p.profiles {
		idle = append(idle, prof.idle...)
		prof.idle = nil
	}
	p.mu.Unlock()
	for _, m := range idle {
		close(m.claimed)
	}
	// Fills under way end and discard what they made; watchers end.
	p.wg.Wait()
	var wg sync.WaitGroup
	for _, m := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.discard(m)
		}()
	}
	wg.Wait()
}

// warmScript is the shell script a claimed member's launcher evaluates:
// unset what the shell added to the environment, export the run's
// environment, and exec the command (after the image's entrypoint, as
// Docker would), with stdin from /dev/null when the run has none, as a
// cold container's. Every word is single-quoted, so no value is ever
// interpreted by the shell.
func (m *member) warmScript(spec sandgate.Normalized) string {
	var b strings.Builder
	var unset []string
	for _, v := range shellVars {
		if _, set := spec.Env[v]; !set && !m.env[v] {
			unset = append(unset, v)
		}
	}
	if len(unset) > 0 {
		b.WriteString("unset " + strings.Join(unset, " ") + "\n")
	}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString("export " + shellQuote(k+"="+spec.Env[k]) + "\n")
	}
	b.WriteString("exec")
	for _, a := range append(append([]string(nil), m.entrypoint...), spec.Command...) {
		b.WriteString(" " + shellQuote(a))
	}
	if spec.Stdin == "" {
		b.WriteString(" </dev/null")
	}
	b.WriteString("\n")
	return b.String()
}

// shellQuote single-quotes s for the shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// executeWarm runs the job in the claimed member m: the container is
// already started, so the run hands its command in over the attached
// stdin and from there on is followed exactly like a cold one.
func (e *Executor) executeWarm(ctx context.Context, r *run, set settings, imageID string, m *member) (sandgate.Result, error) {
	switch {
	case m.prof.session:
		return e.executeWarmSession(ctx, r, set, imageID, m)
	case m.agent != nil:
		return e.executeWarmAgent(ctx, r, set, imageID, m)
	}
	h := e.warmHandle(r, m)
	defer h.close()
	e.emit(r, sandgate.EventContainerCreated, map[string]any{
		"name": m.name, "image": set.config.Image, "image_id": imageID,
		"warm_pool": m.prof.key, "pooled_at": m.created.UTC().Format(time.RFC3339Nano),
	})
	if err := e.checkIdentity(ctx, r, m.id, imageID); err != nil {
		return h.failed(err), err
	}
	// Started before the script is handed in, so that the first reading
	// of the container's counters, its baseline, comes before the command.
	h.started(e.now(), map[string]any{"warm_pool": m.prof.key}, true)
	// As on the cold path: the script, then the run's stdin, on the one
	// stream; a command that exits without reading its input closes it.
	h.writeStdin(m.warmScript(r.job.Spec) + "\x00" + r.job.Spec.Stdin)
	return h.supervise(ctx)
}

// SetWarmProfiles replaces the warm pool's profiles (the normalised specs
// whose containers it keeps ready), as when a policy reload changes the
// defaults runs get: the containers of profiles that remain stay, those of
// profiles that are gone are removed, and the new ones are filled. A spec
// the pool cannot keep (one with mounts or volumes) is refused and nothing
// changes. Without a warm pool it does nothing.
func (e *Executor) SetWarmProfiles(specs []sandgate.Normalized) error {
	if e.pool == nil {
		return nil
	}
	if err := e.pool.setProfiles(specs); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	return nil
}
