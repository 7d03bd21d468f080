package gateway

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/workspace"
)

// createSession is POST /v1/sessions: 201 with the open session.
func (s sessionRoutes) createSession(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	if err := requireJSON(c); err != nil {
		return err
	}
	body, err := requestBody(c)
	if err != nil {
		return err
	}
	ans, err := s.admit(c, admission.OpenSession{Body: body})
	if err != nil {
		return err
	}
	ss := ans.Session
	c.Response().Header().Set("Location", "/v1/sessions/"+ss.ID)
	status := http.StatusCreated
	if ss.StartedAt == nil {
		status = http.StatusAccepted
	}
	if ans.Approval != nil {
		return c.JSON(http.StatusAccepted, api.SessionWaiting{SessionView: *ss, Approval: ans.Approval})
	}
	return c.JSON(status, api.SessionView(*ss))
}

// listSessions is GET /v1/sessions.
func (s sessionRoutes) listSessions(c echo.Context) error {
	if err := checkQuery(c, "state", "limit"); err != nil {
		return err
	}
	f := sandgate.SessionFilter{State: sandgate.SessionState(c.QueryParam("state"))}
	if f.State != "" && f.State != sandgate.SessionOpen && f.State != sandgate.SessionEnded && f.State != sandgate.SessionPendingApproval {
		return sandgate.FieldError("state", "must be open or ended")
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxPageSize {
			return sandgate.FieldError("limit", "must be an integer from 0 to %d", maxPageSize)
		}
		f.Limit = n
	}
	if !allTeams(c) {
		f.Team = principal(c).Team
	}
	list, err := s.node.sessions.list(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.SessionList{Sessions: list})
}

// getSession is GET /v1/sessions/{id}.
func (s sessionRoutes) getSession(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	ans, err := s.admit(c, admission.ReadSession{Session: c.Param("id")})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.SessionView(*ans.Session))
}

// deleteSession is DELETE /v1/sessions/{id}: 200 once the session has
// ended, 202 while it is still stopping.
func (s sessionRoutes) deleteSession(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	ans, err := s.admit(c, admission.EndSession{Session: c.Param("id")})
	if err != nil {
		return err
	}
	ss := ans.Session
	status := http.StatusOK
	if ss.State != sandgate.SessionEnded {
		status = http.StatusAccepted
	}
	return c.JSON(status, api.SessionView(*ss))
}

// execInSession is POST /v1/sessions/{id}/runs: the command's run, 202
// with Location, or 200 when ?wait saw it finish.
func (s sessionRoutes) execInSession(c echo.Context) error {
	if err := checkQuery(c, "wait"); err != nil {
		return err
	}
	if err := requireJSON(c); err != nil {
		return err
	}
	wait, err := parseWait(c.QueryParam("wait"), s.cfg.MaxWait)
	if err != nil {
		return err
	}
	body, err := requestBody(c)
	if err != nil {
		return err
	}
	ans, err := s.admit(c, admission.Command{Session: c.Param("id"), Body: body})
	if err != nil {
		return err
	}
	run := ans.Run
	run = s.waited(c, run, wait)
	c.Response().Header().Set("Location", "/v1/runs/"+run.ID)
	status := http.StatusAccepted
	if run.State == sandgate.StateFinished && wait > 0 {
		status = http.StatusOK
	}
	return renderRun(c, status, run)
}

// archiveFormats are the Content-Types PUT …/files unpacks.
var archiveFormats = map[string]string{
	"application/x-tar":  workspace.FormatTar,
	"application/tar":    workspace.FormatTar,
	"application/gzip":   workspace.FormatTarGz,
	"application/x-gzip": workspace.FormatTarGz,
	"application/zip":    workspace.FormatZip,
}

// putSessionFiles is PUT /v1/sessions/{id}/files?path=: a file written at
// path, or (by Content-Type) a tar, tar.gz or zip unpacked in the
// directory path names. The gate spools the body to a file, at most
// MaxWorkspaceBytes, once the session is found to be the caller's.
func (s sessionRoutes) putSessionFiles(c echo.Context) error {
	if err := checkQuery(c, "path", "mode"); err != nil {
		return err
	}
	path := c.QueryParam("path")
	format := sandgate.FileFormatFile
	if ct := c.Request().Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil {
			return sandgate.FieldError("Content-Type", "cannot be parsed: %q", ct)
		}
		if f, ok := archiveFormats[mt]; ok {
			format = f
		}
	}
	mode := int64(0o644)
	if v := c.QueryParam("mode"); v != "" {
		m, err := strconv.ParseInt(v, 8, 32)
		if err != nil || m < 0 || m > 0o777 {
			return sandgate.FieldError("mode", "must be octal permission bits such as 0644 or 0755")
		}
		mode = m
	}
	if format == sandgate.FileFormatFile {
		if path == "" {
			return sandgate.FieldError("path", "is required: the file's path in the session's workspace")
		}
		if _, err := workspace.CheckRelPath("path", path); err != nil {
			return err
		}
	}
	body, err := requestBody(c)
	if err != nil {
		return err
	}
	// The gate finds the session and checks whose it is before a byte of
	// the body is read, and counts the upload before it reads it.
	ans, err := s.admit(c,
		admission.PutFiles{Session: c.Param("id"), Path: path, Format: format, Mode: mode, Body: body})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.FileResult(ans.File))
}

// getSessionFiles is GET /v1/sessions/{id}/files?path=: the file, or the
// directory as a tar (application/x-tar). X-Content-SHA256 is not sent:
// the digest is known only at the end, and the trail records it.
func (s sessionRoutes) getSessionFiles(c echo.Context) error {
	if err := checkQuery(c, "path"); err != nil {
		return err
	}
	path := c.QueryParam("path")
	w := c.Response()
	_, err := s.admit(c, admission.GetFiles{Session: c.Param("id"), Path: path,
		Out: func(kind string) (io.Writer, error) {
			ct := "application/octet-stream"
			name := path
			if kind == sandgate.FileFormatTar {
				ct = "application/x-tar"
				name = strings.TrimSuffix(path, "/") + ".tar"
			}
			base := name[strings.LastIndexByte(name, '/')+1:]
			if base == "" || base == ".tar" || base == "..tar" {
				base = "workspace.tar"
			}
			w.Header().Set(echo.HeaderContentType, ct)
			w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", sanitizeFilename(base)))
			w.WriteHeader(http.StatusOK)
			return w, nil
		}})
	if err != nil && w.Committed {
		// The answer has begun: it is cut short, and the trail says why.
		s.logger(c).Warn("session file read stopped", "error", err)
		return nil
	}
	return err
}

// sanitizeFilename keeps a Content-Disposition name printable ASCII.
func sanitizeFilename(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if ch < 0x20 || ch > 0x7e || ch == '"' || ch == '\\' {
			b[i] = '_'
		}
	}
	return shorten(string(b), 200)
}
