package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/api/types/mount"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/workspace"
)

// DefaultWorkspaceDir is where the file systems of runs' workspaces live.
const DefaultWorkspaceDir = "/var/lib/sandgate/workspaces"

// artifactTimeout bounds the collection of one run's artifacts.
const artifactTimeout = 10 * time.Minute

// A run with files, a workspace archive or artifacts gets a workspace: an
// ext4 file system of its own, of resources.workspace_mb, loop-mounted by
// sandgate under the workspace directory, whose "data" directory is
// bind-mounted at the run's workdir. The size is a hard limit the kernel
// keeps (a run that writes past it gets ENOSPC, not the host's disk), the
// file system is the run's alone, and it is unmounted and deleted with the
// run. The archive and the files are written into it before the container
// is created, as the run's user, through the workspace package (every
// entry checked again, nothing followed out of the directory); the
// artifacts are read out of it once the command has ended, the same way.
// It needs root, as cache volumes do.

// workspaces makes and removes the runs' workspaces. Each node has a
// directory of its own under the workspace directory, so that gateways
// sharing a host never take each other's workspaces for stale.
type workspaces struct {
	dir   string
	blobs sandgate.BlobStore
	log   *slog.Logger
	// ids is the daemon's userns-remap shift: what a run's ids are on
	// the host, and so whom the files written for it belong to.
	ids *hostIDs
}

func newWorkspaces(cfg Config, ids *hostIDs, log *slog.Logger) *workspaces {
	dir := cfg.WorkspaceDir
	if dir == "" {
		dir = DefaultWorkspaceDir
	}
	return &workspaces{dir: filepath.Join(filepath.Clean(dir), cfg.Node), blobs: cfg.Blobs, log: log, ids: ids}
}

// runWorkspace is one run's workspace.
type runWorkspace struct {
	runID string
	img   string
	mnt   string
	// data is the directory the container sees at its workdir.
	data string
}

func (w *workspaces) of(runID string) *runWorkspace {
	return &runWorkspace{
		runID: runID,
		img:   filepath.Join(w.dir, "images", runID+".img"),
		mnt:   filepath.Join(w.dir, "mnt", runID),
		data:  filepath.Join(w.dir, "mnt", runID, "data"),
	}
}

// find returns runID's workspace when one is mounted (a previous process
// made it), else nil.
func (w *workspaces) find(runID string) *runWorkspace {
	ws := w.of(runID)
	if !isMountPoint(ws.mnt) {
		return nil
	}
	return ws
}

// runs lists the runs that have a workspace directory or image here.
func (w *workspaces) runs() []string {
	seen := map[string]bool{}
	if entries, err := os.ReadDir(filepath.Join(w.dir, "mnt")); err == nil {
		for _, e := range entries {
			seen[e.Name()] = true
		}
	}
	if entries, err := os.ReadDir(filepath.Join(w.dir, "images")); err == nil {
		for _, e := range entries {
			if id, ok := strings.CutSuffix(e.Name(), ".img"); ok {
				seen[id] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	return out
}

// imageMB is the size of the image for a workspace of mb: a little more
// than mb, so that the file system's own metadata does not eat into what
// the run was admitted to write.
func imageMB(mb int64) int64 { return mb + mb/32 + 4 }

// prepare makes the run's workspace, writes its archive and files into
// it, and mounts it at the run's workdir in set. It returns what
// container.created records of it. Errors are SBX-003 naming what failed;
// nothing is left behind.
func (w *workspaces) prepare(ctx context.Context, t *trail, job sandgate.Job, set *settings) (*runWorkspace, map[string]any, error) {
	spec := job.Spec
	refuse := func(field string, err error, format string, args ...any) error {
		return &sandgate.Error{Code: sandgate.CodeMountError, Field: field, Message: fmt.Sprintf(format, args...), Err: err}
	}
	if os.Geteuid() != 0 {
		return nil, nil, refuse("workspace", nil, "workspaces are not available on this gateway: their size limit needs sandgate to run as root")
	}
	if job.RunID != filepath.Base(job.RunID) || strings.HasPrefix(job.RunID, ".") {
		return nil, nil, refuse("run_id", nil, "run ID %q cannot name a workspace", job.RunID)
	}
	if spec.UID == nil || spec.GID == nil {
		return nil, nil, refuse("user", nil, "a run with a workspace needs a numeric uid:gid")
	}
	ws := w.of(job.RunID)
	done := false
	defer func() {
		if !done {
			w.remove(ws)
		}
	}()
	if err := makeExt4(ws.img, imageMB(spec.Resources.WorkspaceMB), "sandgate-ws"); err != nil {
		return nil, nil, refuse("resources.workspace_mb", err, "make the run's workspace: %v", err)
	}
	if err := os.MkdirAll(ws.mnt, 0o700); err != nil {
		return nil, nil, refuse("workspace", err, "make the run's workspace: %v", err)
	}
	if err := loopMount(ws.img, ws.mnt); err != nil {
		return nil, nil, refuse("workspace", err, "mount the run's workspace: %v", err)
	}
	shift, err := w.ids.of(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	uid, gid := int(*spec.UID)+shift.UID, int(*spec.GID)+shift.GID
	if err := os.Mkdir(ws.data, 0o755); err != nil {
		return nil, nil, refuse("workspace", err, "make the run's workspace: %v", err)
	}
	if err := os.Chown(ws.data, uid, gid); err != nil {
		return nil, nil, refuse("workspace", err, "make the run's workspace: %v", err)
	}
	root, err := os.OpenRoot(ws.data)
	if err != nil {
		return nil, nil, refuse("workspace", err, "open the run's workspace: %v", err)
	}
	defer root.Close()
	owner := workspace.Owner{UID: uid, GID: gid}
	lim := workspace.DefaultLimits
	lim.MaxBytes = spec.Resources.WorkspaceMB << 20
	payload := map[string]any{"workspace_mb": spec.Resources.WorkspaceMB}
	if path := job.Workspace; path != "" {
		checked := ""
		if spec.Workspace != nil {
			checked = spec.Workspace.SHA256
		}
		m, err := unpackArchive(ctx, path, checked, root, owner, lim)
		if err != nil {
			return nil, nil, workspaceError("workspace", err)
		}
		payload["archive_sha256"], payload["archive_entries"], payload["archive_unpacked_bytes"] = m.SHA256, m.Entries, m.UnpackedBytes
	}
	if len(spec.Files) > 0 {
		files := make([]workspace.File, len(spec.Files))
		for i, f := range spec.Files {
			files[i] = workspace.File{Path: f.Path, Content: f.Content, Encoding: f.Encoding, Mode: f.Mode}
		}
		m, err := workspace.WriteFiles(root, files, owner, lim)
		if err != nil {
			return nil, nil, workspaceError("files", err)
		}
		payload["files"], payload["files_bytes"] = len(spec.Files), m.UnpackedBytes
	}
	set.host.Mounts = append(set.host.Mounts, mount.Mount{
		Type: mount.TypeBind, Source: ws.data, Target: spec.Workdir,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	})
	done = true
	return ws, payload, nil
}

// unpackArchive unpacks the archive at path into root. checked is the
// SHA-256 the gateway's Inspect of it gave (Job.Workspace is an upload the
// gateway wrote where only it can write): the archive is then read once,
// each entry still checked as it is written, and refused whole unless its
// bytes hash to checked. Without it, the archive is checked whole first.
func unpackArchive(ctx context.Context, path, checked string, root *os.Root, owner workspace.Owner, lim workspace.Limits) (workspace.Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return workspace.Manifest{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return workspace.Manifest{}, err
	}
	return workspace.UnpackWith(ctx, f, st.Size(), root, workspace.Options{Owner: owner, Limits: lim, Checked: checked})
}

// workspaceError is an error of the workspace package as the run's error:
// a refusal of what was sent keeps its field and message under SBX-003.
func workspaceError(field string, err error) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		f := se.Field
		if f == "" {
			f = field
		}
		return &sandgate.Error{Code: sandgate.CodeMountError, Field: f, Message: se.Message, Err: err}
	}
	return &sandgate.Error{Code: sandgate.CodeMountError, Field: field, Message: fmt.Sprintf("write the run's workspace: %v", err), Err: err}
}

// collect stores the files h's artifacts name, read from its workspace
// without following a symlink and up to its artifact limit, and records
// them in the trail. It never fails the run: what could not be collected
// is said in the result.
func (w *workspaces) collect(h *handle, ws *runWorkspace) *sandgate.Artifacts {
	spec := h.job.Spec
	if len(spec.Artifacts) == 0 {
		return nil
	}
	out := &sandgate.Artifacts{Files: []sandgate.Artifact{}}
	defer func() { h.trail.artifactsCollected(out) }()
	if w.blobs == nil {
		out.Error = "this gateway has no artifact store"
		return out
	}
	root, err := os.OpenRoot(ws.data)
	if err != nil {
		out.Error = fmt.Sprintf("open the workspace: %v", err)
		return out
	}
	defer root.Close()
	// Collection goes on after a cancellation: the run's files are kept
	// whatever ended it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), artifactTimeout)
	defer cancel()
	c, err := workspace.Collect(cctx, root, spec.Artifacts, spec.ArtifactLimitBytes, func(_ sandgate.Artifact, rd io.Reader) (string, error) {
		sum, _, err := w.blobs.PutBlob(cctx, rd)
		return sum, err
	})
	if c.Files == nil {
		c.Files = []sandgate.Artifact{}
	}
	*out = c
	if err != nil {
		out.Error = err.Error()
		w.log.Warn("artifact collection stopped", "run_id", h.job.RunID, "err", err)
	}
	return out
}

// remove unmounts the workspace ws and deletes its file system.
func (w *workspaces) remove(ws *runWorkspace) {
	if isMountPoint(ws.mnt) {
		if err := unix.Unmount(ws.mnt, 0); err != nil {
			// Busy (a process still holds a file): detach it, the kernel
			// frees it once the last user is gone.
			if err := unix.Unmount(ws.mnt, unix.MNT_DETACH); err != nil {
				w.log.Warn("unmount a workspace", "run_id", ws.runID, "err", err)
				return
			}
		}
	}
	if err := os.Remove(ws.mnt); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.log.Warn("remove a workspace's mount point", "run_id", ws.runID, "err", err)
	}
	if err := os.Remove(ws.img); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.log.Warn("remove a workspace's image", "run_id", ws.runID, "err", err)
	}
}
