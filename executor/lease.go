package executor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// A node name belongs to one gateway process at a time on its daemon.
//
// Two gateways given one node name on one daemon (`make run` beside
// another, or two installations on one host that both took the host name)
// each took the other's containers for their own: the reaper removed the
// other's running containers as orphans, and reconciliation adopted its
// runs. So every executor is an instance (a random ID, one per process),
// labels every container it makes with it (LabelInstance), and the one
// that serves holds a lease on its node name on its daemon, which it
// renews while it lives:
//
//   - The lease is a set of Docker volumes, labelled with the node, the
//     instance and where the holder runs (host, boot, PID namespace, PID
//     and the process's start time). Volumes are the lightest object a
//     daemon keeps, remote or local, with labels and a creation time of
//     the daemon's own clock; a lock file would serve a local daemon only,
//     and a container would cost a root file system. A volume's labels
//     cannot change, so the holder renews by creating the next volume
//     before removing the last: its lease has always at least one, and
//     the newest's creation time is its heartbeat.
//   - An instance is alive while its newest lease volume is younger than
//     the lapse by the daemon's clock; one on this host, this boot and
//     this PID namespace whose process is gone is proven dead at once, so
//     a gateway that crashed and is restarted does not wait the lapse out.
//   - Claiming: refuse when another instance is alive; else create the
//     first volume and look again: any other live claim by then means two
//     started at once, and this one steps back. Two claimants can never
//     both hold (each would have looked before the other created); both
//     may step back, and say so.
//   - The reaper removes containers of its own instance, and of instances
//     proven dead; never those of a live one. Containers made before
//     instances were labelled count as this instance's only when no other
//     instance of the node is alive.

// LabelInstance marks a container with the executor instance (the
// process) that made it.
const LabelInstance = "sandgate.instance"

// Labels of lease volumes.
const (
	labelLeaseNode     = "sandgate.lease.node"
	labelLeaseInstance = "sandgate.lease.instance"
	labelLeaseHost     = "sandgate.lease.host"
	labelLeaseBoot     = "sandgate.lease.boot"
	labelLeasePIDNS    = "sandgate.lease.pidns"
	labelLeasePID      = "sandgate.lease.pid"
	labelLeaseStart    = "sandgate.lease.process_start"
)

// leaseVolumePrefix begins the name of every lease volume.
const leaseVolumePrefix = "sandgate-lease-"

// leaseAPI is the Docker calls of the node lease: its volumes, and the
// daemon's clock.
type leaseAPI interface {
	VolumeCreate(ctx context.Context, opts volume.CreateOptions) (volume.Volume, error)
	VolumeList(ctx context.Context, opts volume.ListOptions) (volume.ListResponse, error)
	VolumeRemove(ctx context.Context, id string, force bool) error
	Info(ctx context.Context) (system.Info, error)
}

// process is where an instance runs, as its lease volumes record it.
type process struct {
	host, boot, pidns string
	pid               int
	start             string
}

// thisProcess is this process as lease volumes record it.
func thisProcess() process {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	pidns, _ := os.Readlink("/proc/self/ns/pid")
	pid := os.Getpid()
	return process{host: host, boot: strings.TrimSpace(string(boot)), pidns: pidns, pid: pid, start: processStart(pid)}
}

// processStart is the start time of process pid in clock ticks since
// boot (/proc/<pid>/stat, field 22), "" when it is not running.
func processStart(pid int) string {
	b, err := os.ReadFile(filepath.Join(hostProc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// holder is one instance's claim, as its lease volumes show it.
type holder struct {
	instance string
	proc     process
	newest   time.Time
	volumes  []string
}

func (h *holder) String() string {
	return fmt.Sprintf("instance %s on host %s (pid %d, renewed %s)", h.instance, h.proc.host, h.proc.pid, h.newest.Format(time.RFC3339))
}

// lease is this instance's claim on its node name on its daemon.
type lease struct {
	node, instance string
	docker         leaseAPI
	calls          calls
	log            *slog.Logger
	every, lapse   time.Duration
	self           process

	mu      sync.Mutex
	held    bool
	seq     int
	volumes []string // this instance's lease volumes, oldest first
	stop    context.CancelFunc
	done    chan struct{}
}

func newLease(cfg Config, d leaseAPI, c calls, log *slog.Logger) *lease {
	return &lease{node: cfg.Node, instance: cfg.Instance, docker: d, calls: c, log: log,
		every: cfg.LeaseRenew, lapse: cfg.LeaseLapse, self: thisProcess()}
}

// Claim takes this executor's node name on its daemon for this process,
// or refuses it (CONFLICT, naming the holder) while another gateway's
// instance holding it is alive. It is idempotent; Start claims too.
// serve claims before it adopts the node's unfinished runs, so that it
// never adopts another live gateway's. DOCKER-UNAVAILABLE when the daemon
// does not answer.
func (e *Executor) Claim(ctx context.Context) error { return e.lease.claim(ctx) }

// claim is Claim: look, create, look again.
func (l *lease) claim(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		return nil
	}
	if rival, err := l.rival(ctx); err != nil || rival != nil {
		return l.refusal(rival, err)
	}
	if err := l.create(ctx); err != nil {
		return err
	}
	rival, err := l.rival(ctx)
	if err != nil || rival != nil {
		l.removeVolumes(context.WithoutCancel(ctx), l.volumes)
		l.volumes = nil
		if rival != nil {
			err = sandgate.Errorf(sandgate.CodeConflict, "node %s is held by a live gateway: %s claimed it at the same moment as this one; start this one again, or give it another node name (SANDGATE_NODE)", l.node, rival)
		}
		return l.refusal(nil, err)
	}
	l.held = true
	l.log.Info("holding the node's lease on the docker daemon", "instance", l.instance)
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.stop, l.done = stop, make(chan struct{})
	go l.renew(rctx)
	return nil
}

// refusal is the error of a claim that found rival alive, or could not
// look.
func (l *lease) refusal(rival *holder, err error) error {
	if err != nil {
		return err
	}
	return sandgate.Errorf(sandgate.CodeConflict, "node %s is held by a live gateway on this docker daemon: %s; give this gateway another node name (SANDGATE_NODE), or stop that one", l.node, rival)
}

// rival is the oldest live claim of another instance on the node, nil
// when there is none; the lease volumes of dead instances are removed
// on the way.
func (l *lease) rival(ctx context.Context) (*holder, error) {
	live, dead, err := l.holders(ctx)
	if err != nil {
		return nil, err
	}
	for _, h := range dead {
		l.removeVolumes(ctx, h.volumes)
	}
	var oldest *holder
	for _, h := range live {
		if h.instance != l.instance && (oldest == nil || h.newest.Before(oldest.newest)) {
			oldest = h
		}
	}
	return oldest, nil
}

// holders reads the node's lease volumes: the instances alive, and those
// proven dead.
func (l *lease) holders(ctx context.Context) (live, dead map[string]*holder, err error) {
	var now time.Time
	var list volume.ListResponse
	err = l.calls.do(ctx, nil, "lease", func(ctx context.Context) error {
		info, err := l.docker.Info(ctx)
		if err != nil {
			return err
		}
		if now, err = time.Parse(time.RFC3339Nano, info.SystemTime); err != nil {
			return fmt.Errorf("the daemon's clock %q: %w", info.SystemTime, err)
		}
		list, err = l.docker.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", labelLeaseNode+"="+l.node))})
		return err
	})
	if err != nil {
		return nil, nil, daemon.Error(sandgate.CodeDockerUnavailable, err, "read the lease of node %s", l.node)
	}
	all := map[string]*holder{}
	for _, v := range list.Volumes {
		if v == nil || v.Labels[labelLeaseNode] != l.node || v.Labels[labelLeaseInstance] == "" {
			continue
		}
		lb := v.Labels
		h := all[lb[labelLeaseInstance]]
		if h == nil {
			pid, _ := strconv.Atoi(lb[labelLeasePID])
			h = &holder{instance: lb[labelLeaseInstance], proc: process{host: lb[labelLeaseHost], boot: lb[labelLeaseBoot],
				pidns: lb[labelLeasePIDNS], pid: pid, start: lb[labelLeaseStart]}}
			all[h.instance] = h
		}
		h.volumes = append(h.volumes, v.Name)
		if t, err := time.Parse(time.RFC3339Nano, v.CreatedAt); err == nil && t.After(h.newest) {
			h.newest = t
		}
	}
	live, dead = map[string]*holder{}, map[string]*holder{}
	for id, h := range all {
		if l.alive(h, now) {
			live[id] = h
		} else {
			dead[id] = h
		}
	}
	return live, dead, nil
}

// alive reports whether h's claim is alive at the daemon's time now.
func (l *lease) alive(h *holder, now time.Time) bool {
	if h.instance == l.instance {
		return true
	}
	if h.newest.IsZero() || now.Sub(h.newest) >= l.lapse {
		return false
	}
	p := h.proc
	if p.boot != "" && p.boot == l.self.boot && p.pidns != "" && p.pidns == l.self.pidns && p.pid > 0 {
		// This host, this boot, this PID namespace: its process is
		// there, or it is dead.
		return processStart(p.pid) == p.start
	}
	return true
}

// create makes this instance's next lease volume.
func (l *lease) create(ctx context.Context) error {
	l.seq++
	name := fmt.Sprintf("%s%s-%s-%d", leaseVolumePrefix, l.node, l.instance, l.seq)
	p := l.self
	err := l.calls.do(ctx, nil, "lease", func(ctx context.Context) error {
		_, err := l.docker.VolumeCreate(ctx, volume.CreateOptions{Name: name, Driver: "local", Labels: map[string]string{
			labelLeaseNode: l.node, labelLeaseInstance: l.instance, labelLeaseHost: p.host, labelLeaseBoot: p.boot,
			labelLeasePIDNS: p.pidns, labelLeasePID: strconv.Itoa(p.pid), labelLeaseStart: p.start,
		}})
		return err
	})
	if err != nil {
		return daemon.Error(sandgate.CodeDockerUnavailable, err, "claim node %s", l.node)
	}
	l.volumes = append(l.volumes, name)
	return nil
}

// renew keeps the lease alive: the next volume, then the older ones
// removed, every LeaseRenew, until ctx ends.
func (l *lease) renew(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		if err := l.create(ctx); err != nil {
			l.mu.Unlock()
			l.log.Warn("renew the node's lease", "err", err)
			continue
		}
		old := l.volumes[:len(l.volumes)-1]
		l.volumes = l.volumes[len(l.volumes)-1:]
		l.mu.Unlock()
		l.removeVolumes(ctx, old)
	}
}

// removeVolumes removes lease volumes; one gone already is fine.
func (l *lease) removeVolumes(ctx context.Context, names []string) {
	for _, name := range names {
		err := l.calls.do(ctx, nil, "lease", func(ctx context.Context) error {
			return l.docker.VolumeRemove(ctx, name, true)
		})
		if err != nil && !cerrdefs.IsNotFound(err) {
			l.log.Warn("remove a lease volume", "volume", name, "err", err)
		}
	}
}

// release gives the lease up: the renewal stops and its volumes go.
func (l *lease) release(ctx context.Context) {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.stop = nil
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.volumes) > 0 {
		l.removeVolumes(ctx, l.volumes)
		l.volumes = nil
	}
	l.held = false
}

// holding reports whether this instance holds the node's lease.
func (l *lease) holding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// others are the live instances of the node other than this one, by ID.
func (l *lease) others(ctx context.Context) (map[string]*holder, error) {
	live, _, err := l.holders(ctx)
	if err != nil {
		return nil, err
	}
	delete(live, l.instance)
	return live, nil
}

// sortedIDs lists the instances of hs, for messages.
func sortedIDs(hs map[string]*holder) string {
	ids := make([]string, 0, len(hs))
	for _, h := range hs {
		ids = append(ids, h.String())
	}
	sort.Strings(ids)
	return strings.Join(ids, "; ")
}

// nodeFile is the file of an installation's state directory that keeps
// its node name.
const nodeFile = "node"

// KeptNode is the node name kept in stateDir (by KeepNode), "" when
// there is none.
func KeptNode(stateDir string) string {
	b, err := os.ReadFile(filepath.Join(stateDir, nodeFile))
	if err != nil {
		return ""
	}
	name := strings.TrimSpace(string(b))
	if !safeName.MatchString(name) {
		return ""
	}
	return name
}

// KeepNode returns the installation's node name kept in stateDir, making
// it the first time: the host name and eight random hex digits, so that
// two installations on one host (or two hosts of one name) never share a
// node by default. It is written atomically, readable by root alone.
func KeepNode(stateDir string) (string, error) {
	if name := KeptNode(stateDir); name != "" {
		return name, nil
	}
	host, _ := os.Hostname()
	host = strings.Trim(unsafeRune.ReplaceAllString(host, "-"), "-._")
	if len(host) > 40 {
		host = host[:40]
	}
	if host == "" {
		host = "sandgate"
	}
	name := host + "-" + randomSuffix()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", fmt.Errorf("keep the node name: %w", err)
	}
	tmp, err := os.CreateTemp(stateDir, ".node-")
	if err != nil {
		return "", fmt.Errorf("keep the node name: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(name + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("keep the node name: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("keep the node name: %w", err)
	}
	// Linked, not renamed: when two starts race, the first name stays.
	if err := os.Link(tmp.Name(), filepath.Join(stateDir, nodeFile)); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("keep the node name: %w", err)
	}
	if name := KeptNode(stateDir); name != "" {
		return name, nil
	}
	return "", fmt.Errorf("keep the node name: %s holds no usable name", filepath.Join(stateDir, nodeFile))
}
