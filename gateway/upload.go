package gateway

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/workspace"
)

// spooler writes the uploads the gate reads (a run's workspace archive, a
// file or an archive put into a session) to the gateway's upload
// directory, never into memory, capped at MaxWorkspaceBytes, and checks
// archives entry by entry (workspace.Inspect) before anything is decided:
// a hostile entry is a 400 naming it, and nothing is left behind. A run's
// archive is handed to the executor, which unpacks it (checking it again)
// into the run's workspace, and removed when the run ends.
type spooler struct {
	dir         string
	maxBytes    int64
	maxUnpacked int64
}

var _ admission.Workspaces = spooler{}

// CheckSpec refuses, naming it, an artifact pattern that is not a valid
// glob and an inline file the workspace would refuse to write (its path,
// encoding, content or mode), before anything is decided.
func (spooler) CheckSpec(spec sandgate.RunSpec) error {
	for i, p := range spec.Artifacts {
		if err := workspace.CheckPattern(fmt.Sprintf("artifacts[%d]", i), p); err != nil {
			return err
		}
	}
	for i, f := range spec.Files {
		if _, _, err := workspace.DecodeFile(workspace.File{Path: f.Path, Content: f.Content, Encoding: f.Encoding, Mode: f.Mode}, i); err != nil {
			return err
		}
	}
	return nil
}

// create makes a new file in the upload directory.
func (sp spooler) create(pattern string) (*os.File, error) {
	if err := os.MkdirAll(sp.dir, 0o700); err != nil {
		return nil, sandgate.WrapError(sandgate.CodeUnavailable, err, "the gateway cannot keep uploads now")
	}
	f, err := os.CreateTemp(sp.dir, pattern)
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeUnavailable, err, "the gateway cannot keep uploads now")
	}
	return f, nil
}

// Archive writes a run's workspace archive from r to a file, at most
// maxBytes of it, and checks every entry.
func (sp spooler) Archive(r io.Reader) (*admission.Upload, error) {
	f, err := sp.create("workspace-*.upload")
	if err != nil {
		return nil, err
	}
	up := &admission.Upload{Path: f.Name()}
	ok := false
	defer func() {
		f.Close()
		if !ok {
			up.Remove()
		}
	}()
	n, err := io.Copy(f, io.LimitReader(r, sp.maxBytes+1))
	if err != nil {
		return nil, bodyError(err, "workspace")
	}
	if n > sp.maxBytes {
		return nil, &sandgate.Error{Code: sandgate.CodeTooLarge, Field: "workspace",
			Message: fmt.Sprintf("the archive exceeds %d bytes", sp.maxBytes)}
	}
	lim := workspace.DefaultLimits
	lim.MaxBytes = sp.maxUnpacked
	m, err := workspace.Inspect(f, n, lim)
	if err != nil {
		return nil, err
	}
	up.Size = n
	up.Archive = &sandgate.WorkspaceArchive{Format: m.Format, SHA256: m.SHA256, ArchiveBytes: m.ArchiveBytes, Entries: m.Entries, UnpackedBytes: m.UnpackedBytes}
	ok = true
	return up, nil
}

// Files writes what PUT /v1/sessions/{id}/files sends: an archive as it
// is, or a file as a tar of the one entry path, whose content's SHA-256 it
// returns as well (the digest the trail records for it).
func (sp spooler) Files(r io.Reader, path, format string, mode int64) (*admission.Upload, error) {
	f, err := sp.create("session-*.upload")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*admission.Upload, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	limit := sp.maxBytes
	if format != sandgate.FileFormatFile {
		n, err := io.Copy(f, io.LimitReader(r, limit+1))
		if err != nil {
			return fail(bodyError(err, "body"))
		}
		if n > limit {
			return fail(sandgate.Errorf(sandgate.CodeTooLarge, "the archive exceeds %d bytes", limit))
		}
		f.Close()
		return &admission.Upload{Path: f.Name(), Size: n}, nil
	}
	// The file's size is needed before its bytes in a tar header: the
	// bytes go to the file first, after room for the header.
	const hdrRoom = 4096
	if _, err := f.Seek(hdrRoom, io.SeekStart); err != nil {
		return fail(err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, limit+1))
	if err != nil {
		return fail(bodyError(err, "body"))
	}
	if n > limit {
		return fail(sandgate.Errorf(sandgate.CodeTooLarge, "the file exceeds %d bytes", limit))
	}
	out, err := sp.create("session-*.upload")
	if err != nil {
		return fail(err)
	}
	tw := tar.NewWriter(out)
	hdr := &tar.Header{Name: path, Mode: mode, Size: n, Typeflag: tar.TypeReg, ModTime: time.Now(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		err = sandgate.FieldError("path", "cannot name a file: %v", err)
		out.Close()
		os.Remove(out.Name())
		return fail(err)
	}
	_, err = io.Copy(tw, io.NewSectionReader(f, hdrRoom, n))
	if err == nil {
		err = tw.Close()
	}
	var size int64
	if err == nil {
		var st os.FileInfo
		if st, err = out.Stat(); err == nil {
			size = st.Size()
		}
	}
	out.Close()
	if err != nil {
		os.Remove(out.Name())
		return fail(err)
	}
	f.Close()
	os.Remove(f.Name())
	return &admission.Upload{Path: out.Name(), Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// isMultipart reports whether the request's body is multipart/form-data.
func isMultipart(req *http.Request) bool {
	mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	return err == nil && mt == "multipart/form-data"
}

// removeStaleUploads removes the uploads in dir: at start, no request or
// run of this process holds one yet.
func removeStaleUploads(dir string, log *slog.Logger) {
	for _, pattern := range []string{"workspace-*.upload", "session-*.upload"} {
		stale, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, p := range stale {
			if err := os.Remove(p); err == nil {
				log.Info("removed an upload a previous process left", "path", p)
			}
		}
	}
}

// bodyError is a failure to read the request body: too large, cut, too
// slow (the gate's own errors pass as they are).
func bodyError(err error, what string) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return se
	}
	return sandgate.FieldError(what, "cannot be read: %v", err)
}
