package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/volume"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// DefaultVolumeDir is where the file systems of cache volumes live.
const DefaultVolumeDir = "/var/lib/sandgate/volumes"

// defaultVolumeQuotaMB is the size of a cache volume when the decision
// names none.
const defaultVolumeQuotaMB = 1024

// defaultMaxVolumes is how many cache volumes a team may have when the
// decision names no limit.
const defaultMaxVolumes = 16

// Label keys of the cache volumes sandgate makes.
const (
	labelVolumeTeam = "sandgate.team"
	labelVolumeName = "sandgate.volume"
)

// Cache volumes belong to a team: the Docker volume of team payments'
// "npm-cache" is not team web's, so no team can poison another's build
// cache. And each is a file system of its own, an ext4 image of the team's
// quota loop-mounted by sandgate, so that a run that writes without end
// fills its volume, not the host's disk. The Docker volume binds the
// image's "data" directory, which exists only while the image is mounted:
// a volume whose image is not mounted fails the run instead of writing to
// the host's disk. data is world-writable, so every run of the team can
// write to it whatever its uid; files keep the uid that wrote them, so
// runs that share a cache should run as one uid.

var (
	// volumeTeam and volumeNamePattern are the teams that can own cache
	// volumes and the names they can give them (the policy's volume_team
	// and volume_name rules): a name has no '.', so the last '.' of a
	// Docker volume's name splits team from name, and no two pairs of
	// team and name share one ("a-b"/"c" is sandgate-cache-a-b.c,
	// "a"/"b-c" is sandgate-cache-a.b-c).
	volumeTeam        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	volumeNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
)

// VolumeName is the Docker volume of team's cache volume name,
// "sandgate-cache-<team>.<name>", and whether team and name can make one
// (see volumeTeam).
func VolumeName(team, name string) (string, bool) {
	if !volumeTeam.MatchString(team) || !volumeNamePattern.MatchString(name) {
		return "", false
	}
	return VolumePrefix + team + "." + name, true
}

// volumeAPI is the Docker calls that bind cache volumes.
type volumeAPI interface {
	VolumeInspect(ctx context.Context, id string) (volume.Volume, error)
	VolumeCreate(ctx context.Context, opts volume.CreateOptions) (volume.Volume, error)
	VolumeRemove(ctx context.Context, id string, force bool) error
}

// volumes makes and mounts the file systems of cache volumes, and binds
// the Docker volumes to them.
type volumes struct {
	dir    string
	docker volumeAPI
	calls  calls
	log    *slog.Logger

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// volumeMeta is kept beside each image: whose volume it is.
type volumeMeta struct {
	Team   string `json:"team"`
	Name   string `json:"name"`
	SizeMB int64  `json:"size_mb"`
}

func newVolumes(dir string, d volumeAPI, c calls, log *slog.Logger) *volumes {
	if dir == "" {
		dir = DefaultVolumeDir
	}
	return &volumes{dir: filepath.Clean(dir), docker: d, calls: c, log: log, locks: map[string]*sync.Mutex{}}
}

func (v *volumes) lock(name string) func() {
	v.mu.Lock()
	l := v.locks[name]
	if l == nil {
		l = &sync.Mutex{}
		v.locks[name] = l
	}
	v.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (v *volumes) image(name string) string { return filepath.Join(v.dir, "images", name+".img") }
func (v *volumes) meta(name string) string  { return filepath.Join(v.dir, "images", name+".json") }
func (v *volumes) mnt(name string) string   { return filepath.Join(v.dir, "mnt", name) }
func (v *volumes) data(name string) string  { return filepath.Join(v.mnt(name), "data") }

// ensure makes team's volume name ready: its image made (within the
// team's count) and mounted, and the Docker volume bound to it. It
// returns the Docker volume's name. Errors are SBX-003.
func (v *volumes) ensure(ctx context.Context, h *handle, index int, name string) (string, error) {
	team := h.job.Team
	field := fmt.Sprintf("volumes[%d]", index)
	refuse := func(err error, format string, args ...any) error {
		return &sandgate.Error{Code: sandgate.CodeMountError, Field: field, Message: fmt.Sprintf(format, args...), Err: err}
	}
	if os.Geteuid() != 0 {
		return "", refuse(nil, "cache volumes are not available on this gateway: their quota needs sandgate to run as root")
	}
	docker, ok := VolumeName(team, name)
	if !ok {
		return "", refuse(nil, "team %q cannot have a cache volume named %q: a name is 1 to 64 letters, digits, '_' and '-', and a team's 1 to 63 letters, digits, '_', '.' and '-'", team, name)
	}
	unlock := v.lock(docker)
	defer unlock()
	quota := h.job.Enforcement.VolumeQuotaMB
	if quota <= 0 {
		quota = defaultVolumeQuotaMB
	}
	if _, err := os.Stat(v.image(docker)); errors.Is(err, os.ErrNotExist) {
		if err := v.checkCount(team, h.job.Enforcement.MaxVolumes); err != nil {
			return "", refuse(nil, "%s", err)
		}
		if err := v.makeImage(docker, volumeMeta{Team: team, Name: name, SizeMB: quota}); err != nil {
			return "", refuse(err, "make cache volume %q of team %s", name, team)
		}
		v.log.Info("made a cache volume", "team", team, "volume", name, "docker_volume", docker, "size_mb", quota)
	} else if err != nil {
		return "", refuse(err, "cache volume %q", name)
	}
	if err := v.mount(docker); err != nil {
		return "", refuse(err, "mount cache volume %q of team %s", name, team)
	}
	if err := v.bind(ctx, h.trail, docker, team, name); err != nil {
		return "", refuse(nil, "cache volume %q of team %s: %v", name, team, err)
	}
	return docker, nil
}

// checkCount refuses a new volume when team has max already.
func (v *volumes) checkCount(team string, max int) error {
	if max <= 0 {
		max = defaultMaxVolumes
	}
	entries, _ := os.ReadDir(filepath.Join(v.dir, "images"))
	n := 0
	for _, ent := range entries {
		if !strings.HasSuffix(ent.Name(), ".json") {
			continue
		}
		var m volumeMeta
		if data, err := os.ReadFile(filepath.Join(v.dir, "images", ent.Name())); err == nil && json.Unmarshal(data, &m) == nil && m.Team == team {
			n++
		}
	}
	if n >= max {
		return fmt.Errorf("team %s has %d cache volumes, its limit (data.sandgate.config.max_volumes); an admin can remove one", team, n)
	}
	return nil
}

// makeImage makes a sparse ext4 image of the quota's size.
func (v *volumes) makeImage(name string, meta volumeMeta) error {
	if err := os.MkdirAll(filepath.Join(v.dir, "images"), 0o700); err != nil {
		return err
	}
	img := v.image(name)
	tmp := img + ".new"
	if err := makeExt4(tmp, meta.SizeMB, "sandgate-cache"); err != nil {
		return err
	}
	data, err := json.Marshal(meta)
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.WriteFile(v.meta(name), data, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, img)
}

// makeExt4 makes path a sparse image of sizeMB holding an empty ext4 file
// system, with no blocks reserved for root (the runs are not root). Its
// directory is made root-only when missing.
func makeExt4(path string, sizeMB int64, label string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(sizeMB << 20)
	f.Close()
	if err != nil {
		os.Remove(path)
		return err
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-L", label, path).CombinedOutput(); err != nil {
		os.Remove(path)
		return fmt.Errorf("mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// loopMount mounts the ext4 image img at mnt, without setuid programs or
// device nodes, unless something is mounted there already.
func loopMount(img, mnt string) error {
	if isMountPoint(mnt) {
		return nil
	}
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop,nosuid,nodev", img, mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("mount: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mount loop-mounts the image unless it is mounted, and makes its data
// directory.
func (v *volumes) mount(name string) error {
	mnt := v.mnt(name)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	if err := loopMount(v.image(name), mnt); err != nil {
		return err
	}
	data := v.data(name)
	if err := os.Mkdir(data, 0o777); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Chmod(data, 0o777)
}

// bindVolume makes the Docker volume that binds the image's data
// directory, or checks that the one there does.
func (v *volumes) bind(ctx context.Context, t *trail, docker, team, name string) error {
	want := v.data(docker)
	var existing volume.Volume
	err := v.calls.do(ctx, t, "inspect volume", func(ctx context.Context) error {
		var err error
		existing, err = v.docker.VolumeInspect(ctx, docker)
		return err
	})
	switch {
	case err == nil && existing.Options["device"] == want && existing.Options["o"] == "bind":
		return nil
	case err == nil:
		// Bound elsewhere: made by sandgate for another volume directory
		// (changed, or wiped) it is stale, and is made again; anyone
		// else's is not sandgate's to remove.
		if existing.Labels[labelCache] != "true" || existing.Labels[labelVolumeTeam] != team || existing.Labels[labelVolumeName] != name {
			return fmt.Errorf("the docker volume %s exists and is not sandgate's; remove or rename it", docker)
		}
		v.log.Warn("replacing a cache volume bound to another file system", "docker_volume", docker, "device", existing.Options["device"])
		err := v.calls.do(ctx, t, "remove stale volume", func(ctx context.Context) error {
			return v.docker.VolumeRemove(ctx, docker, false)
		})
		if err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("the docker volume %s is bound to another file system (%s) and cannot be replaced: %w", docker, existing.Options["device"], err)
		}
	case !cerrdefs.IsNotFound(err):
		return daemon.Error(sandgate.CodeMountError, err, "inspect volume %s", docker)
	}
	return v.calls.do(ctx, t, "create volume", func(ctx context.Context) error {
		_, err := v.docker.VolumeCreate(ctx, volume.CreateOptions{
			Name:       docker,
			Driver:     "local",
			DriverOpts: map[string]string{"type": "none", "o": "bind", "device": want},
			Labels:     map[string]string{labelCache: "true", labelVolumeTeam: team, labelVolumeName: name},
		})
		return err
	})
}

// ensureAll readies the run's cache volumes and points the container's
// volume mounts at them.
func (v *volumes) ensureAll(ctx context.Context, h *handle, set *settings) error {
	for i, vol := range h.job.Spec.Volumes {
		docker, err := v.ensure(ctx, h, i, vol.Name)
		if err != nil {
			return err
		}
		for j := range set.host.Mounts {
			if m := &set.host.Mounts[j]; m.Type == "volume" && m.Target == vol.Target {
				m.Source = docker
			}
		}
	}
	return nil
}

// CacheVolumes lists the cache volumes this executor has made, of every
// team, by Docker volume name.
func (e *Executor) CacheVolumes(context.Context) ([]sandgate.CacheVolume, error) {
	return e.volumes.list()
}

func (v *volumes) list() ([]sandgate.CacheVolume, error) {
	entries, err := os.ReadDir(filepath.Join(v.dir, "images"))
	if errors.Is(err, os.ErrNotExist) {
		return []sandgate.CacheVolume{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list cache volumes: %w", err)
	}
	out := []sandgate.CacheVolume{}
	for _, ent := range entries {
		docker, ok := strings.CutSuffix(ent.Name(), ".json")
		if !ok {
			continue
		}
		data, err := os.ReadFile(filepath.Join(v.dir, "images", ent.Name()))
		if err != nil {
			continue
		}
		var m volumeMeta
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		cv := sandgate.CacheVolume{Team: m.Team, Name: m.Name, DockerVolume: docker, SizeMB: m.SizeMB, UsedBytes: -1}
		if mnt := v.mnt(docker); isMountPoint(mnt) {
			cv.Mounted = true
			var st unix.Statfs_t
			if unix.Statfs(mnt, &st) == nil {
				cv.UsedBytes = int64(st.Blocks-st.Bfree) * int64(st.Bsize)
			}
		}
		out = append(out, cv)
	}
	return out, nil
}

// RemoveCacheVolume removes team's cache volume name: the Docker volume,
// its file system and its image. A volume a container uses is not
// removed (CONFLICT); one that does not exist is NOT-FOUND.
func (e *Executor) RemoveCacheVolume(ctx context.Context, team, name string) error {
	return e.volumes.remove(ctx, team, name)
}

func (v *volumes) remove(ctx context.Context, team, name string) error {
	docker, ok := VolumeName(team, name)
	if !ok {
		return sandgate.Errorf(sandgate.CodeNotFound, "team %s has no cache volume %q", team, name)
	}
	unlock := v.lock(docker)
	defer unlock()
	if _, err := os.Stat(v.meta(docker)); errors.Is(err, os.ErrNotExist) {
		return sandgate.Errorf(sandgate.CodeNotFound, "team %s has no cache volume %q", team, name)
	}
	err := v.calls.do(ctx, nil, "remove volume", func(ctx context.Context) error {
		return v.docker.VolumeRemove(ctx, docker, false)
	})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
	case cerrdefs.IsConflict(err):
		return sandgate.WrapError(sandgate.CodeConflict, err, "cache volume %q of team %s is in use by a run", name, team)
	default:
		return daemon.Error(sandgate.CodeUnavailable, err, "remove volume %s", docker)
	}
	if mnt := v.mnt(docker); isMountPoint(mnt) {
		if err := unix.Unmount(mnt, 0); err != nil {
			return sandgate.WrapError(sandgate.CodeConflict, err, "unmount cache volume %q of team %s", name, team)
		}
	}
	os.Remove(v.mnt(docker))
	if err := os.Remove(v.image(docker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the image of cache volume %s: %w", docker, err)
	}
	os.Remove(v.meta(docker))
	v.log.Info("removed a cache volume", "team", team, "volume", name, "docker_volume", docker)
	return nil
}
