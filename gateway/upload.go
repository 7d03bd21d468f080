package gateway

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path/filepath"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/workspace"
)

// A run may come as multipart/form-data: a "spec" part holding the run
// spec as JSON and a "workspace" part holding a tar, tar.gz or zip archive
// of the files to unpack into its workdir. The archive is streamed to a
// temporary file (never held in memory), capped at MaxWorkspaceBytes, and
// every entry is checked (workspace.Inspect) before anything is decided:
// a hostile entry is a 400 naming it, and nothing is left behind. The
// file is handed to the executor, which unpacks it (checking it again)
// into the run's workspace, and removed when the run ends.

// upload is a checked workspace archive waiting for its run.
type upload struct {
	path     string
	manifest workspace.Manifest
}

// archive is the summary of the upload the spec and the trail carry.
func (u *upload) archive() *sandgate.WorkspaceArchive {
	m := u.manifest
	return &sandgate.WorkspaceArchive{Format: m.Format, SHA256: m.SHA256, ArchiveBytes: m.ArchiveBytes, Entries: m.Entries, UnpackedBytes: m.UnpackedBytes}
}

// localPath is where the archive is, "" for none; nil-safe.
func (u *upload) localPath() string {
	if u == nil {
		return ""
	}
	return u.path
}

// remove deletes the archive; nil-safe.
func (u *upload) remove() {
	if u != nil {
		os.Remove(u.path)
	}
}

// isMultipart reports whether the request's body is multipart/form-data.
func isMultipart(req *http.Request) bool {
	mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	return err == nil && mt == "multipart/form-data"
}

// readMultipartRun reads a multipart run: its spec (decoded strictly,
// as a JSON body is) and its workspace archive, if any, checked. The
// caller removes the upload once it has no use for it.
func (s *Server) readMultipartRun(c echo.Context) (sandgate.RunSpec, *upload, error) {
	mr, err := c.Request().MultipartReader()
	if err != nil {
		return sandgate.RunSpec{}, nil, sandgate.FieldError("Content-Type", "multipart/form-data needs a boundary: %v", err)
	}
	var (
		spec    *sandgate.RunSpec
		up      *upload
		success bool
	)
	defer func() {
		if !success {
			up.remove()
		}
	}()
	for parts := 0; ; parts++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sandgate.RunSpec{}, nil, bodyError(err, "multipart body")
		}
		if parts >= 2 {
			return sandgate.RunSpec{}, nil, sandgate.FieldError(part.FormName(), "a multipart run has two parts at most: spec and workspace")
		}
		switch name := part.FormName(); name {
		case "spec":
			if spec != nil {
				return sandgate.RunSpec{}, nil, sandgate.FieldError("spec", "given more than once")
			}
			sp, err := sandgate.DecodeRunSpec(part)
			if err != nil {
				return sandgate.RunSpec{}, nil, err
			}
			spec = &sp
		case "workspace":
			if up != nil {
				return sandgate.RunSpec{}, nil, sandgate.FieldError("workspace", "given more than once")
			}
			if up, err = s.spoolWorkspace(part); err != nil {
				return sandgate.RunSpec{}, nil, err
			}
		default:
			return sandgate.RunSpec{}, nil, sandgate.FieldError(name, "unknown part: a multipart run has a spec part and a workspace part")
		}
		part.Close()
	}
	if spec == nil {
		return sandgate.RunSpec{}, nil, sandgate.FieldError("spec", "is required: the run spec as JSON")
	}
	success = true
	return *spec, up, nil
}

// spoolWorkspace writes the workspace part to a temporary file, at most
// MaxWorkspaceBytes of it, and checks every entry of the archive.
func (s *Server) spoolWorkspace(part io.Reader) (*upload, error) {
	if err := os.MkdirAll(s.cfg.UploadDir, 0o700); err != nil {
		return nil, sandgate.WrapError(sandgate.CodeUnavailable, err, "the gateway cannot keep uploads now")
	}
	f, err := os.CreateTemp(s.cfg.UploadDir, "workspace-*.upload")
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeUnavailable, err, "the gateway cannot keep uploads now")
	}
	up := &upload{path: f.Name()}
	ok := false
	defer func() {
		f.Close()
		if !ok {
			up.remove()
		}
	}()
	n, err := io.Copy(f, io.LimitReader(part, s.cfg.MaxWorkspaceBytes+1))
	if err != nil {
		return nil, bodyError(err, "workspace")
	}
	if n > s.cfg.MaxWorkspaceBytes {
		return nil, &sandgate.Error{Code: sandgate.CodeTooLarge, Field: "workspace",
			Message: fmt.Sprintf("the archive exceeds %d bytes", s.cfg.MaxWorkspaceBytes)}
	}
	lim := workspace.DefaultLimits
	lim.MaxBytes = s.cfg.MaxWorkspaceUnpackedBytes
	if up.manifest, err = workspace.Inspect(f, n, lim); err != nil {
		return nil, err
	}
	ok = true
	return up, nil
}

// removeStaleUploads removes the workspace archives in dir: at start, no
// run of this process holds one yet.
func removeStaleUploads(dir string, log *slog.Logger) {
	stale, _ := filepath.Glob(filepath.Join(dir, "workspace-*.upload"))
	for _, p := range stale {
		if err := os.Remove(p); err == nil {
			log.Info("removed a workspace archive a previous process left", "path", p)
		}
	}
}

// bodyError is a failure to read the request body: too large, or cut.
func bodyError(err error, what string) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return sandgate.Errorf(sandgate.CodeTooLarge, "body exceeds %d bytes", mbe.Limit-1)
	}
	return sandgate.FieldError(what, "cannot be read: %v", err)
}
