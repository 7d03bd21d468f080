package gateway

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
)

// artifactRoute is the route of one artifact: its path may span several
// segments.
const artifactRoute = "/v1/runs/:id/artifacts/*"

// saveArtifacts records the files the run's collection stored and puts
// their summary on the run. A run store that cannot take the list keeps
// the run's end all the same: the summary says what was lost.
func (r *runs) saveArtifacts(run *sandgate.Run, a sandgate.Artifacts, log *slog.Logger) {
	if r.d.Artifacts == nil {
		a.Error = "this gateway keeps no artifacts"
		a.Files = nil
	} else if len(a.Files) > 0 {
		var err error
		for attempt := range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
			err = r.d.Artifacts.SaveArtifacts(ctx, run.ID, a.Files)
			cancel()
			if err == nil {
				break
			}
			log.Warn("save artifacts, retrying", "attempt", attempt+1, "error", err)
			time.Sleep(time.Duration(attempt+1) * 500 * time.Millisecond)
		}
		if err != nil {
			log.Error("save artifacts", "error", err)
			a.Error = "the artifacts were stored but their list could not be saved"
		}
	}
	sum := a.Summary()
	run.Artifacts = &sum
}

// runArtifacts returns the artifacts of a run the principal may read,
// through the gate.
func (s artifactRoutes) runArtifacts(c echo.Context) (*sandgate.Run, []sandgate.Artifact, error) {
	ans, err := s.admit(c, admission.Artifacts{Run: c.Param("id")})
	if err != nil {
		return nil, nil, err
	}
	return ans.Run, ans.Artifacts, nil
}

// listArtifacts is GET /v1/runs/{id}/artifacts.
func (s artifactRoutes) listArtifacts(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	_, files, err := s.runArtifacts(c)
	if err != nil {
		return err
	}
	if files == nil {
		files = []sandgate.Artifact{}
	}
	return c.JSON(http.StatusOK, api.ArtifactList{Artifacts: files})
}

// getArtifact is GET /v1/runs/{id}/artifacts/{path}: one file, with its
// digest as ETag and Repr-Digest, and a single byte range when asked.
func (s artifactRoutes) getArtifact(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	raw := c.Param("*")
	name, err := url.PathUnescape(raw)
	if err != nil {
		name = raw
	}
	_, files, err := s.runArtifacts(c)
	if err != nil {
		return err
	}
	var art *sandgate.Artifact
	for i := range files {
		if files[i].Path == name {
			art = &files[i]
			break
		}
	}
	if art == nil {
		return &sandgate.Error{Code: sandgate.CodeNotFound, Field: "path", Message: fmt.Sprintf("run %s has no artifact %q", c.Param("id"), name)}
	}
	etag := `"sha256:` + art.SHA256 + `"`
	h := c.Response().Header()
	h.Set("ETag", etag)
	if sum, err := hex.DecodeString(art.SHA256); err == nil {
		h.Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum)+":")
		h.Set("Digest", "sha-256="+base64.StdEncoding.EncodeToString(sum))
	}
	h.Set("Accept-Ranges", "bytes")
	h.Set("Cache-Control", "private, max-age=0, must-revalidate")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(art.Path)}))
	if inm := c.Request().Header.Get("If-None-Match"); inm != "" && etagMatches(inm, etag) {
		return c.NoContent(http.StatusNotModified)
	}
	off, n, partial, err := parseByteRange(c.Request().Header.Get("Range"), art.Size)
	if ir := c.Request().Header.Get("If-Range"); ir != "" && ir != etag {
		off, n, partial, err = 0, art.Size, false, nil
	}
	if err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodeRangeNotSatisfiable {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", art.Size))
		}
		return err
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	status := http.StatusOK
	if partial {
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, art.Size))
		status = http.StatusPartialContent
	}
	c.Response().WriteHeader(status)
	if n == 0 {
		return nil
	}
	if err := s.d.Artifacts.WriteBlob(c.Request().Context(), art.SHA256, off, n, c.Response()); err != nil {
		// The status is sent: cut the answer short so the client sees it
		// is incomplete rather than a shorter file.
		s.log.Error("stream artifact", "run_id", c.Param("id"), "path", art.Path, "error", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// artifactsTar is GET /v1/runs/{id}/artifacts.tar: every artifact of the
// run in one tar stream, each file streamed from the blob store.
func (s artifactRoutes) artifactsTar(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	run, files, err := s.runArtifacts(c)
	if err != nil {
		return err
	}
	mtime := run.CreatedAt
	if run.FinishedAt != nil {
		mtime = *run.FinishedAt
	}
	h := c.Response().Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": run.ID + "-artifacts.tar"}))
	c.Response().WriteHeader(http.StatusOK)
	tw := tar.NewWriter(c.Response())
	for _, f := range files {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg, Name: f.Path, Size: f.Size, Mode: int64(f.Mode & 0o777),
			ModTime: mtime.UTC().Truncate(time.Second), Format: tar.FormatPAX,
			PAXRecords: map[string]string{"SANDGATE.sha256": f.SHA256},
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil
		}
		if err := s.d.Artifacts.WriteBlob(c.Request().Context(), f.SHA256, 0, f.Size, tw); err != nil {
			s.log.Error("stream artifacts", "run_id", run.ID, "path", f.Path, "error", err)
			panic(http.ErrAbortHandler)
		}
	}
	if err := tw.Close(); err != nil {
		return nil
	}
	c.Response().Flush()
	return nil
}

// etagMatches reports whether an If-None-Match value names etag.
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(t), "W/"))
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// parseByteRange reads a Range header for a file of size bytes: one range of
// bytes ("a-b", "a-", "-n"). No header, another unit or several ranges
// give the whole file (a server may ignore Range). A range that starts
// past the end is RANGE-NOT-SATISFIABLE (416); one that cannot be parsed
// is INVALID-REQUEST naming the header.
func parseByteRange(header string, size int64) (off, n int64, partial bool, err error) {
	if header == "" {
		return 0, size, false, nil
	}
	spec, ok := strings.CutPrefix(header, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, size, false, nil
	}
	first, last, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return 0, 0, false, sandgate.FieldError("Range", "must be bytes=first-last, bytes=first- or bytes=-suffix; got %q", header)
	}
	unsatisfiable := &sandgate.Error{Code: sandgate.CodeRangeNotSatisfiable, Field: "Range",
		Message: fmt.Sprintf("%q lies outside the file's %d bytes", header, size)}
	if first == "" {
		k, err := strconv.ParseInt(last, 10, 64)
		if err != nil || k < 0 {
			return 0, 0, false, sandgate.FieldError("Range", "bad suffix length in %q", header)
		}
		if k == 0 {
			return 0, 0, false, unsatisfiable
		}
		k = min(k, size)
		return size - k, k, true, nil
	}
	a, err := strconv.ParseInt(first, 10, 64)
	if err != nil || a < 0 {
		return 0, 0, false, sandgate.FieldError("Range", "bad first byte in %q", header)
	}
	if a >= size {
		return 0, 0, false, unsatisfiable
	}
	b := size - 1
	if last != "" {
		if b, err = strconv.ParseInt(last, 10, 64); err != nil || b < a {
			return 0, 0, false, sandgate.FieldError("Range", "bad last byte in %q", header)
		}
		b = min(b, size-1)
	}
	return a, b - a + 1, true, nil
}
