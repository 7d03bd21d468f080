package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// CreateSession opens a session (POST /v1/sessions) and returns it once
// its container runs.
func (c *Client) CreateSession(ctx context.Context, spec api.SessionRequest) (api.SessionView, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return api.SessionView{}, fmt.Errorf("encode session spec: %w", err)
	}
	var ss api.SessionView
	err = c.do(ctx, http.MethodPost, "/v1/sessions", nil, nil, bytes.NewReader(body), &ss)
	return ss, err
}

// Session returns a session.
func (c *Client) Session(ctx context.Context, id string) (api.SessionView, error) {
	var ss api.SessionView
	err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, nil, nil, &ss)
	return ss, err
}

// Sessions lists the sessions the caller may see; state may be empty.
func (c *Client) Sessions(ctx context.Context, state sandgate.SessionState, limit int) (api.SessionList, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", string(state))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var list api.SessionList
	err := c.do(ctx, http.MethodGet, "/v1/sessions", q, nil, nil, &list)
	return list, err
}

// DeleteSession ends a session and returns it as it then is.
func (c *Client) DeleteSession(ctx context.Context, id string) (api.SessionView, error) {
	var ss api.SessionView
	err := c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, nil, nil, &ss)
	return ss, err
}

// Exec runs a command in a session (POST /v1/sessions/{id}/runs): its run,
// finished when wait was long enough. The run is followed, listed and
// cancelled like any other (Run, Logs, Cancel).
func (c *Client) Exec(ctx context.Context, id string, x api.ExecRequest, wait time.Duration) (api.RunView, error) {
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	body, err := json.Marshal(x)
	if err != nil {
		return api.RunView{}, fmt.Errorf("encode command: %w", err)
	}
	var run api.RunView
	err = c.do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/runs", q, nil, bytes.NewReader(body), &run)
	return run, err
}

// PutFile writes r as the file path of the session's workspace, with
// permission bits mode (0 for 0644).
func (c *Client) PutFile(ctx context.Context, id, path string, mode int, r io.Reader) (api.FileResult, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", strconv.FormatInt(int64(mode), 8))
	}
	return c.putFiles(ctx, id, q, "application/octet-stream", r)
}

// PutArchive unpacks an archive into the directory dir of the session's
// workspace ("" for the workspace itself); format is "tar", "tar.gz" or
// "zip".
func (c *Client) PutArchive(ctx context.Context, id, dir, format string, r io.Reader) (api.FileResult, error) {
	ct := map[string]string{"tar": "application/x-tar", "tar.gz": "application/gzip", "zip": "application/zip"}[format]
	if ct == "" {
		return api.FileResult{}, fmt.Errorf("archive format %q: want tar, tar.gz or zip", format)
	}
	q := url.Values{}
	if dir != "" {
		q.Set("path", dir)
	}
	return c.putFiles(ctx, id, q, ct, r)
}

func (c *Client) putFiles(ctx context.Context, id string, q url.Values, ct string, r io.Reader) (api.FileResult, error) {
	var out api.FileResult
	err := c.do(ctx, http.MethodPut, "/v1/sessions/"+url.PathEscape(id)+"/files", q, http.Header{"Content-Type": {ct}}, r, &out)
	return out, err
}

// GetFiles writes the file at path of the session's workspace to w, or
// the directory at path as a tar; it returns the kind sent ("file" or
// "tar").
func (c *Client) GetFiles(ctx context.Context, id, path string, w io.Writer) (string, error) {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id)+"/files", q, nil, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return "", decodeError(resp)
	}
	kind := sandgate.FileFormatFile
	if resp.Header.Get("Content-Type") == "application/x-tar" {
		kind = sandgate.FileFormatTar
	}
	_, err = io.Copy(w, resp.Body)
	return kind, err
}
