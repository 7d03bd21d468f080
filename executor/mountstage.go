package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
	"github.com/sandgate/sandgate/executor/seccomp"
)

// DefaultStageDir is where bind-mount sources are pinned for the daemon.
const DefaultStageDir = "/run/sandgate/mounts"

// A bind mount is judged by policy on its resolved host path at admission,
// but the daemon opens that path only when it creates and starts the
// container, perhaps minutes later. Anyone who can write under a mount
// root (another run with the parent directory mounted read-write, say) can
// replace a directory on the path with a symlink in between, and the
// daemon would follow it: to the host's root, the Docker socket, another
// team's files.
//
// The stager closes that window. Just before create it opens the admitted
// path one component at a time from "/", refusing any symlink, so the
// directory it ends up holding is the one at the admitted path at that
// moment and nothing else. It bind-mounts that open directory (through
// /proc/self/fd) onto a path of its own under a root-owned 0700 directory
// and hands the daemon that path. No one but sandgate can change it, and
// renaming or swapping the original afterwards changes nothing: a mount
// pins the directory, not its name. The device and inode that were
// mounted go into the trail.
//
// It needs root (CAP_SYS_ADMIN for mount(2)) and the daemon's mount
// namespace; probe tells whether the daemon sees the stager's mounts.
type stager struct {
	root     string
	node     string
	instance string
	docker   probeAPI
	calls    calls
	log      *slog.Logger

	mu    sync.Mutex
	ready bool
	err   error
	// bound is whether setup bound the stage root onto itself (close
	// undoes it); made, whether setup made the directory.
	bound, made bool

	// probeMu guards whether the daemon was seen to see staged mounts.
	probeMu  sync.Mutex
	probed   bool
	probeErr error
}

// probeAPI is the Docker calls of the probe that tells whether the
// daemon sees the stager's mounts.
type probeAPI interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networking *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	copyAPI
}

// stagedMount is one bind-mount source pinned for the daemon.
type stagedMount struct {
	// Index is the mount's position in the spec.
	Index int
	// Source is the admitted (resolved) host path.
	Source string
	// Staged is the path the daemon is given.
	Staged string
	// Device and Inode identify what was mounted.
	Device uint64
	Inode  uint64
	// Dir is false for a single file.
	Dir bool
}

func newStager(cfg Config, d probeAPI, c calls, log *slog.Logger) *stager {
	root := cfg.MountStageDir
	if root == "" {
		root = DefaultStageDir
	}
	return &stager{root: filepath.Clean(root), node: cfg.Node, instance: cfg.Instance, docker: d, calls: c, log: log}
}

// init makes the stage root: every directory on its path owned by root and
// writable by no one else, the root itself 0700 and a private mount of its
// own, so staged mounts never propagate to other mount namespaces. It is
// idempotent; the first error sticks.
func (s *stager) init() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready || s.err != nil {
		return s.err
	}
	s.err = s.setup()
	s.ready = s.err == nil
	return s.err
}

func (s *stager) setup() error {
	if os.Geteuid() != 0 {
		return errors.New("sandgate is not running as root, so it cannot pin bind-mount sources (mount(2) needs CAP_SYS_ADMIN)")
	}
	if _, err := os.Lstat(s.root); errors.Is(err, os.ErrNotExist) {
		s.made = true
	}
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return fmt.Errorf("make the mount stage %s: %w", s.root, err)
	}
	// Every directory from / to the stage root must be root's and not
	// writable by anyone else, or its owner could swap the stage itself.
	for p := s.root; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("mount stage %s: %w", p, err)
		}
		switch {
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("mount stage: %s is not a directory (a symlink?)", p)
		case st.Uid != 0:
			return fmt.Errorf("mount stage: %s is owned by uid %d, not root", p, st.Uid)
		case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return fmt.Errorf("mount stage: %s is writable by others", p)
		}
		if p == "/" {
			break
		}
	}
	if err := os.Chmod(s.root, 0o700); err != nil {
		return fmt.Errorf("mount stage %s: %w", s.root, err)
	}
	if !isMountPoint(s.root) {
		if err := unix.Mount(s.root, s.root, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the mount stage %s onto itself: %w", s.root, err)
		}
		s.bound = true
	}
	if err := unix.Mount("", s.root, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make the mount stage %s private: %w", s.root, err)
	}
	return nil
}

// close undoes what setup did to the host, when nothing is staged any
// more: the stage root's bind mount onto itself, and the directory when
// setup made it. A run still staged (a container this gateway leaves
// running, to be adopted by its next start) keeps the stage as it is:
// the unmount is not forced, so it fails while anything is mounted below.
func (s *stager) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		return
	}
	if s.bound {
		if err := unix.Unmount(s.root, 0); err != nil {
			if s.log != nil {
				s.log.Info("mount stage left in place", "dir", s.root, "reason", err.Error())
			}
			return
		}
		s.bound = false
	}
	if s.made {
		// Empty node directories go first; anything else keeps it.
		if entries, err := os.ReadDir(s.root); err == nil {
			for _, e := range entries {
				os.Remove(filepath.Join(s.root, e.Name()))
			}
		}
		if os.Remove(s.root) == nil {
			s.made = false
		}
	}
	s.ready = false
}

// isMountPoint reports whether p is the root of a mount: its device
// differs from its parent's, or /proc/self/mountinfo lists it (a bind
// mount of a directory onto itself keeps the device).
func isMountPoint(p string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountinfo(f[4]) == p {
			return true
		}
	}
	return false
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// runDir is where the staged mounts of one run of node live.
func (s *stager) runDir(node, runID string) string {
	return filepath.Join(s.root, node, runID)
}

// stage pins the bind-mount sources of mounts for the run. Each source is
// opened from "/" one component at a time without following a symlink;
// one that cannot be (a component became a symlink, or is gone) is
// refused with SBX-003 naming the mount. On an error nothing is left
// staged.
func (s *stager) stage(node, runID string, mounts []sandgate.Mount) ([]stagedMount, error) {
	if len(mounts) == 0 {
		return nil, nil
	}
	if err := s.init(); err != nil {
		return nil, &sandgate.Error{Code: sandgate.CodeMountError, Field: "mounts",
			Message: "bind mounts are not available on this gateway: " + err.Error()}
	}
	dir := s.runDir(node, runID)
	var err error
	// The node's directory goes when its last run's stage does; one that
	// vanishes between the two calls is made again.
	for range 3 {
		if err = os.MkdirAll(filepath.Dir(dir), 0o700); err == nil {
			if err = os.Mkdir(dir, 0o700); !errors.Is(err, os.ErrNotExist) {
				break
			}
		}
	}
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeMountError, err, "make the mount stage of run %s", runID)
	}
	var out []stagedMount
	for i, m := range mounts {
		sm, err := s.stageOne(dir, i, m)
		if err != nil {
			s.unstageDir(dir)
			return nil, err
		}
		out = append(out, sm)
	}
	return out, nil
}

func (s *stager) stageOne(dir string, i int, m sandgate.Mount) (stagedMount, error) {
	field := fmt.Sprintf("mounts[%d].source", i)
	refuse := func(err error, format string, args ...any) error {
		return &sandgate.Error{Code: sandgate.CodeMountError, Field: field, Message: fmt.Sprintf(format, args...), Err: err}
	}
	fd, err := openNoFollow(m.Resolved)
	if err != nil {
		return stagedMount{}, refuse(err, "%s is not the directory that was admitted any more (a component was replaced by a symlink, renamed or removed since admission); nothing was mounted", m.Resolved)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return stagedMount{}, refuse(err, "stat %s", m.Resolved)
	}
	sm := stagedMount{Index: i, Source: m.Resolved, Staged: filepath.Join(dir, fmt.Sprint(i)),
		Device: uint64(st.Dev), Inode: st.Ino}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		sm.Dir = true
		if err := os.Mkdir(sm.Staged, 0o700); err != nil {
			return stagedMount{}, refuse(err, "make the stage of %s", m.Resolved)
		}
	case unix.S_IFREG:
		f, err := os.OpenFile(sm.Staged, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return stagedMount{}, refuse(err, "make the stage of %s", m.Resolved)
		}
		f.Close()
	default:
		return stagedMount{}, refuse(nil, "%s is neither a directory nor a regular file", m.Resolved)
	}
	// The magic link names the open file itself, not a path: what is
	// mounted is what was opened, whatever has happened to the path since.
	src := fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := unix.Mount(src, sm.Staged, "", unix.MS_BIND, ""); err != nil {
		os.Remove(sm.Staged)
		return stagedMount{}, refuse(err, "pin %s for the daemon", m.Resolved)
	}
	if err := unix.Mount("", sm.Staged, "", unix.MS_PRIVATE, ""); err != nil {
		unmount(sm.Staged)
		return stagedMount{}, refuse(err, "make the pinned %s private", m.Resolved)
	}
	if m.ReadOnly {
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
		if err := unix.Mount("", sm.Staged, "", flags, ""); err != nil {
			unmount(sm.Staged)
			return stagedMount{}, refuse(err, "make the pinned %s read-only", m.Resolved)
		}
	}
	return sm, nil
}

// openNoFollow opens the clean absolute path p with O_PATH, walking it from
// "/" one component at a time and refusing any symlink on the way, the
// last component included. Each step opens a name inside the directory the
// previous step holds open, so no rename of a parent can redirect it.
func openNoFollow(p string) (int, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return -1, fmt.Errorf("%q is not a clean absolute path", p)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if p == "/" {
		return fd, nil
	}
	parts := strings.Split(p[1:], "/")
	for i, part := range parts {
		flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(parts)-1 {
			flags |= unix.O_DIRECTORY
		}
		next, err := unix.Openat(fd, part, flags, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", "/"+strings.Join(parts[:i+1], "/"), err)
		}
		fd = next
		if i == len(parts)-1 {
			// O_PATH|O_NOFOLLOW opens a final symlink itself instead of
			// failing: refuse it here.
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return -1, err
			}
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				unix.Close(fd)
				return -1, fmt.Errorf("%s is a symlink", p)
			}
		}
	}
	return fd, nil
}

// unstage removes the staged mounts of one run of node.
func (s *stager) unstage(node, runID string) {
	s.unstageDir(s.runDir(node, runID))
}

// unstageDir detaches every mount under dir and removes it.
func (s *stager) unstageDir(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		unmount(filepath.Join(dir, e.Name()))
	}
	os.Remove(dir)
	// The node's directory too, once empty; the next stage remakes it.
	os.Remove(filepath.Dir(dir))
}

// unmount detaches the mount at p (lazily: the container that uses it
// keeps its own copy) and removes the mount point.
func unmount(p string) {
	for {
		if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			break
		}
	}
	os.Remove(p)
}

// staleRuns lists the runs of node that have a stage, for the reaper to
// remove those no live run owns.
func (s *stager) staleRuns(node string) []string {
	entries, err := os.ReadDir(filepath.Join(s.root, node))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// PrepareBindMounts checks that this process can pin bind-mount sources
// (it is root and mount(2) works) and makes the stage. serve calls it at
// start when mount roots are configured and refuses to start when it
// fails, rather than run bind mounts without the pinning. Whether the
// daemon sees the pinned mounts is checked at the first run that has one.
func (e *Executor) PrepareBindMounts() error {
	return e.stager.prepare()
}

func (s *stager) prepare() error {
	if err := s.init(); err != nil {
		return fmt.Errorf("bind mounts (SANDGATE_MOUNT_ROOTS) need sandgate to pin their sources: %w; run sandgate as root in the host's mount namespace, or unset SANDGATE_MOUNT_ROOTS", err)
	}
	return nil
}

// stageRun pins the run's bind-mount sources and points the container's
// bind mounts at the pinned paths.
func (s *stager) stageRun(h *handle, set *settings) ([]stagedMount, error) {
	mounts := h.job.Spec.Mounts
	if len(mounts) == 0 {
		return nil, nil
	}
	if err := s.init(); err != nil {
		return nil, &sandgate.Error{Code: sandgate.CodeMountError, Field: "mounts",
			Message: "bind mounts are not available on this gateway: " + err.Error()}
	}
	if err := s.daemonSees(h.ctx, h.trail, set.config.Image); err != nil {
		return nil, err
	}
	staged, err := s.stage(s.node, h.job.RunID, mounts)
	if err != nil {
		return nil, err
	}
	for _, sm := range staged {
		target := mounts[sm.Index].Target
		for i := range set.host.Mounts {
			if m := &set.host.Mounts[i]; m.Type == mount.TypeBind && m.Target == target {
				m.Source = sm.Staged
			}
		}
	}
	return staged, nil
}

// stagedDocs describe what was mounted, for the trail: the admitted path,
// the device and inode of the directory that was pinned, and where.
func stagedDocs(staged []stagedMount, mounts []sandgate.Mount) []any {
	out := make([]any, len(staged))
	for i, sm := range staged {
		out[i] = map[string]any{
			"source": sm.Source, "target": mounts[sm.Index].Target, "read_only": mounts[sm.Index].ReadOnly,
			"device": sm.Device, "inode": sm.Inode, "directory": sm.Dir, "pinned_at": sm.Staged,
		}
	}
	return out
}

// daemonSeesStage checks once, with the run's image, that the daemon sees
// the stager's mounts: it runs in another mount namespace (a private one
// of a service manager, another host behind DOCKER_HOST) otherwise, and
// would mount an empty directory, or fail, instead of the pinned one. The
// answer is kept; only a daemon that did not answer is asked again.
func (s *stager) daemonSees(ctx context.Context, t *trail, image string) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return s.probeErr
	}
	err := s.probe(ctx, t, image)
	if err != nil && sandgate.ErrorCodeOf(err) == sandgate.CodeDockerUnavailable {
		return err
	}
	s.probed, s.probeErr = true, err
	if err != nil {
		s.log.Error("bind mounts are disabled: the docker daemon does not see the pinned mount sources", "err", err)
	}
	return err
}

// probeStage pins a directory holding a random marker, creates (never
// starts) a container of image with it bind-mounted, and reads the marker
// back through the daemon.
func (s *stager) probe(ctx context.Context, t *trail, image string) error {
	refuse := func(err error, what string) error {
		return &sandgate.Error{Code: sandgate.CodeMountError, Field: "mounts",
			Message: "bind mounts are not available on this gateway: " + what, Err: err}
	}
	src, err := os.MkdirTemp("", "sandgate-probe-")
	if err != nil {
		return refuse(err, "cannot make a probe directory")
	}
	defer os.RemoveAll(src)
	marker := randomSuffix() + randomSuffix()
	if err := os.WriteFile(filepath.Join(src, "marker"), []byte(marker), 0o644); err != nil {
		return refuse(err, "cannot write the probe marker")
	}
	probeID := "probe-" + marker
	staged, err := s.stage(s.node, probeID, []sandgate.Mount{{Resolved: src, Target: "/probe", ReadOnly: true}})
	if err != nil {
		return err
	}
	defer s.unstage(s.node, probeID)
	profile, err := seccomp.SecurityOpt()
	if err != nil {
		return err
	}
	var id string
	err = s.calls.do(ctx, t, "create probe container", func(ctx context.Context) error {
		resp, err := s.docker.ContainerCreate(ctx,
			&container.Config{Image: image, Cmd: []string{"true"}, Entrypoint: []string{}, User: "65534:65534",
				Labels: map[string]string{sandgate.LabelManaged: "true", sandgate.LabelNode: s.node, LabelInstance: s.instance}},
			&container.HostConfig{NetworkMode: "none", CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges", profile},
				Mounts: []mount.Mount{{Type: mount.TypeBind, Source: staged[0].Staged, Target: "/probe", ReadOnly: true}}},
			nil, nil, "sandgate-probe-"+s.node+"-"+marker[:8])
		id = resp.ID
		return err
	})
	if err != nil {
		if daemon.Unreachable(err) {
			return daemon.Error(sandgate.CodeDockerUnavailable, err, "probe bind mounts")
		}
		return refuse(err, "the daemon refused a container with a pinned mount: "+daemon.RefusalMessage(err))
	}
	defer func() {
		cctx, cancel := s.calls.cleanup(ctx)
		defer cancel()
		_ = s.calls.do(cctx, nil, "remove probe container", func(ctx context.Context) error {
			return s.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
		})
	}()
	got, err := readFile(ctx, s.docker, s.calls, t, id, "/probe/marker", 1024)
	if err != nil {
		return refuse(err, "cannot read through a pinned mount")
	}
	if string(got) != marker {
		return refuse(nil, "the docker daemon does not see sandgate's pinned mounts (it runs in another mount namespace, or on another host)")
	}
	return nil
}
