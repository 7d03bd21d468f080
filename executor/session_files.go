package executor

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/workspace"
)

// A session's files live in its workspace (workspace.go), which the
// executor made when it created the session's container and removes with
// it. Files are written into it as the session's user through the
// workspace package, replacing files already there, and read out of it
// without following a symlink.

// sessionWorkspace is the mounted workspace of the open session id.
func (e *Executor) sessionWorkspace(id string) (*runWorkspace, error) {
	s := e.runs.get(id)
	if s == nil || !s.job.SessionContainer {
		return nil, sandgate.Errorf(sandgate.CodeConflict, "session %s is not open on node %s", id, e.cfg.Node)
	}
	_, ws := s.link()
	if ws == nil {
		ws = e.workspaces.find(id)
	}
	if ws == nil {
		return nil, sandgate.Errorf(sandgate.CodeConflict, "session %s has no workspace on node %s", id, e.cfg.Node)
	}
	return ws, nil
}

// openSessionWorkspace opens the session's workspace. One that is gone
// under an open session (removed from outside sandgate) is CONFLICT: the
// session cannot take or give files any more, which is not the caller's
// request failing inside sandgate.
func openSessionWorkspace(ws *runWorkspace, id string) (*os.Root, error) {
	root, err := os.OpenRoot(ws.data)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, sandgate.Errorf(sandgate.CodeConflict, "session %s: its workspace is gone", id)
	}
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeInternal, err, "open the session's workspace")
	}
	return root, nil
}

// PutFiles writes up into the session's workspace (sandgate.SessionExecutor):
// up.Body is a tar, tar.gz or zip archive unpacked in the directory
// up.Path names (which must exist), or, with Format "file", a tar of the
// one file the gateway packed. Files already there are replaced.
func (e *Executor) PutFiles(ctx context.Context, sessionID string, spec sandgate.Normalized, up sandgate.FileUpload) (sandgate.FileDigest, error) {
	ws, err := e.sessionWorkspace(sessionID)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	if spec.UID == nil || spec.GID == nil {
		return sandgate.FileDigest{}, sandgate.FieldError("user", "a session needs a numeric uid:gid")
	}
	root, err := openSessionWorkspace(ws, sessionID)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	defer root.Close()
	dir := "."
	if up.Format != sandgate.FileFormatFile && up.Path != "" && up.Path != "." {
		clean, err := workspace.CheckRelPath("path", up.Path)
		if err != nil {
			return sandgate.FileDigest{}, err
		}
		dir = clean
	}
	dst := root
	if dir != "." {
		// Opened inside the workspace, so that no link leads out of it.
		st, err := root.Lstat(dir)
		if err != nil || !st.IsDir() {
			return sandgate.FileDigest{}, sandgate.FieldError("path", "%q is not a directory of the session's workspace", dir)
		}
		if dst, err = root.OpenRoot(dir); err != nil {
			return sandgate.FileDigest{}, sandgate.FieldError("path", "%q cannot be opened", dir)
		}
		defer dst.Close()
	}
	lim := workspace.DefaultLimits
	lim.MaxBytes = spec.Resources.WorkspaceMB << 20
	shift, err := e.workspaces.ids.of(ctx, nil)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	m, err := workspace.UnpackWith(ctx, up.Body, up.Size, dst, workspace.Options{
		Owner: workspace.Owner{UID: int(*spec.UID) + shift.UID, GID: int(*spec.GID) + shift.GID}, Limits: lim, Replace: true,
	})
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	return sandgate.FileDigest{Path: up.Path, Kind: up.Format, Bytes: m.UnpackedBytes, SHA256: m.SHA256, Entries: m.Entries}, nil
}

// GetFiles writes the file at p of the session's workspace to w, or the
// directory at p as a tar of its regular files (sandgate.SessionExecutor).
// Nothing is read through a symlink: a symlink at p is refused, and one
// under a directory is left out, as artifacts are collected.
func (e *Executor) GetFiles(ctx context.Context, sessionID, p string, w io.Writer, begin func(kind string)) (sandgate.FileDigest, error) {
	ws, err := e.sessionWorkspace(sessionID)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	rel := "."
	if p != "" && p != "." && p != "/" {
		if rel, err = workspace.CheckRelPath("path", p); err != nil {
			return sandgate.FileDigest{}, err
		}
	}
	root, err := openSessionWorkspace(ws, sessionID)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	defer root.Close()
	// Every parent is opened as a real directory, never through a link.
	dirRoot, name, err := openParent(root, rel)
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	if dirRoot != root {
		defer dirRoot.Close()
	}
	st, err := dirRoot.Lstat(name)
	if err != nil {
		return sandgate.FileDigest{}, sandgate.Errorf(sandgate.CodeNotFound, "%s: no such file in the session's workspace", p)
	}
	h := sha256.New()
	switch {
	case st.Mode().Type() == fs.ModeSymlink:
		return sandgate.FileDigest{}, sandgate.FieldError("path", "%q is a symbolic link; it is not followed", p)
	case st.Mode().IsRegular():
		f, err := dirRoot.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return sandgate.FileDigest{}, sandgate.Errorf(sandgate.CodeNotFound, "%s: cannot be opened", p)
		}
		defer f.Close()
		fst, err := f.Stat()
		if err != nil || !os.SameFile(st, fst) {
			return sandgate.FileDigest{}, sandgate.Errorf(sandgate.CodeConflict, "%s changed while it was opened", p)
		}
		// A file is read as a directory is, within the workspace's size:
		// its apparent size counts, not its blocks, so a sparse file of
		// 20 GB in a 32 MiB workspace is refused before a byte is sent.
		// What is read is bounded by the size checked.
		size := fst.Size()
		if err := checkFileRead(p, size, e.sessionReadLimit(sessionID)); err != nil {
			return sandgate.FileDigest{}, err
		}
		begin(sandgate.FileFormatFile)
		n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(f, size))
		return sandgate.FileDigest{Path: p, Kind: sandgate.FileFormatFile, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil)), Entries: 1}, err
	case st.IsDir():
		sub := dirRoot
		if name != "." {
			if sub, err = dirRoot.OpenRoot(name); err != nil {
				return sandgate.FileDigest{}, sandgate.Errorf(sandgate.CodeNotFound, "%s: cannot be opened", p)
			}
			defer sub.Close()
		}
		begin(sandgate.FileFormatTar)
		tw := tar.NewWriter(io.MultiWriter(w, h))
		c, err := workspace.Collect(ctx, sub, []string{"."}, e.sessionReadLimit(sessionID), func(a sandgate.Artifact, r io.Reader) (string, error) {
			fh := sha256.New()
			hdr := &tar.Header{Name: a.Path, Mode: int64(a.Mode), Size: a.Size, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return "", err
			}
			n, err := io.Copy(io.MultiWriter(tw, fh), r)
			if err != nil {
				return "", err
			}
			// A file that shrank while it was read is padded to the
			// size its header promised; the digest is of what was read.
			if n < a.Size {
				if _, err := io.CopyN(tw, zeros{}, a.Size-n); err != nil {
					return "", err
				}
			}
			return hex.EncodeToString(fh.Sum(nil)), nil
		})
		if err == nil {
			err = tw.Close()
		}
		return sandgate.FileDigest{Path: p, Kind: sandgate.FileFormatTar, Bytes: c.Bytes, SHA256: hex.EncodeToString(h.Sum(nil)), Entries: len(c.Files)}, err
	default:
		return sandgate.FileDigest{}, sandgate.FieldError("path", "%q is not a regular file or a directory", p)
	}
}

// openParent opens the directory holding rel, one component at a time
// and each checked to be a directory, and returns it with rel's last
// name ("." for rel ".").
func openParent(root *os.Root, rel string) (*os.Root, string, error) {
	dir, name := path.Split(rel)
	if dir == "" {
		return root, name, nil
	}
	dir = path.Clean(dir)
	st, err := root.Lstat(dir)
	if err != nil || !st.IsDir() {
		return nil, "", sandgate.Errorf(sandgate.CodeNotFound, "%s: no such directory in the session's workspace", dir)
	}
	sub, err := root.OpenRoot(dir)
	if err != nil {
		return nil, "", sandgate.Errorf(sandgate.CodeNotFound, "%s: cannot be opened", dir)
	}
	return sub, name, nil
}

// sessionReadLimit bounds a directory read out of a session: its
// workspace's size.
func (e *Executor) sessionReadLimit(id string) int64 {
	if s := e.runs.get(id); s != nil {
		return s.job.Spec.Resources.WorkspaceMB << 20
	}
	return 0
}

// checkFileRead refuses a file of size bytes (its apparent size) larger
// than limit, the session's workspace: TOO-LARGE, naming the limit.
func checkFileRead(p string, size, limit int64) error {
	if size <= limit {
		return nil
	}
	return &sandgate.Error{Code: sandgate.CodeTooLarge, Field: "path",
		Message: fmt.Sprintf("%s is %d bytes (its apparent size: a sparse file counts whole), more than the session's workspace limit of %d MiB a read may send", p, size, limit>>20),
		Details: map[string]any{"limit": "workspace_mb", "limit_bytes": limit, "size_bytes": size}}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
