package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"

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
	e      *Executor
	docker poolAPI
	calls  calls
	size   int
	ttl    time.Duration

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

// newPool makes the pool for cfg, nil when cfg.WarmPool is 0. cfg must be
// validated, which checks the profiles.
func newPool(e *Executor, cfg Config) *pool {
	if cfg.WarmPool == 0 {
		return nil
	}
	p := &pool{
		e:       e,
		docker:  e.docker,
		calls:   e.calls,
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
func (p *pool) claim(ctx context.Context, job sandgate.Job, set settings, imageID string) *member {
	if p == nil || ctx.Err() != nil || len(set.host.Mounts) > 0 {
		return nil
	}
	key := profileKey(set)
	if job.SessionContainer {
		key = sessionKey(key, job.Spec)
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
		m.job = &job
		p.mu.Unlock()
		return m
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
