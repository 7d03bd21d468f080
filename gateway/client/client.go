// Package client is a typed Go client of sandgate's HTTP API. It speaks
// the wire types of package gateway/api and answers every error answer of
// the gateway as a *sandgate.Error with the stable code; it links neither
// the server nor its HTTP framework.
package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// Client is a typed client of the gateway's API.
type Client struct {
	base  *url.URL
	token string
	// HTTP is the client requests go through. Its Timeout must be zero
	// (or long) for log streams; New sets none.
	HTTP *http.Client
	// UserAgent is sent with every request.
	UserAgent string
}

// New returns a client of the gateway at baseURL (such as
// http://127.0.0.1:8080) that authenticates with token.
func New(baseURL, token string) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gateway URL %q: must be http(s)://host[:port]", baseURL)
	}
	return &Client{base: u, token: token, HTTP: &http.Client{}, UserAgent: "sandgate/" + sandgate.Version}, nil
}

// SubmitOptions are the optional parts of a submission.
type SubmitOptions struct {
	// Wait asks the gateway to answer when the run ends or after Wait.
	Wait time.Duration
	// IdempotencyKey makes retries of the same submission return one run.
	IdempotencyKey string
	// CorrelationID is sent as X-Correlation-ID.
	CorrelationID string
	// Workspace, when set, is a tar, tar.gz or zip archive sent with the
	// spec (multipart/form-data) and unpacked into the run's workdir. It
	// is streamed, never held in memory.
	Workspace io.Reader
}

// Submit asks for a run. A policy denial is a *sandgate.Error with code
// SANDGATE-POLICY-DENIED whose Details are the decision (see
// api.DecisionFromDetails).
func (c *Client) Submit(ctx context.Context, spec sandgate.RunSpec, opts SubmitOptions) (api.RunView, error) {
	q := url.Values{}
	if opts.Wait > 0 {
		q.Set("wait", opts.Wait.String())
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return api.RunView{}, fmt.Errorf("encode run spec: %w", err)
	}
	h := http.Header{}
	if opts.IdempotencyKey != "" {
		h.Set("Idempotency-Key", opts.IdempotencyKey)
	}
	if opts.CorrelationID != "" {
		h.Set("X-Correlation-ID", opts.CorrelationID)
	}
	var run api.RunView
	if opts.Workspace == nil {
		err = c.do(ctx, http.MethodPost, "/v1/runs", q, h, bytes.NewReader(body), &run)
		return run, err
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(writeRunParts(mw, body, opts.Workspace))
	}()
	h.Set("Content-Type", mw.FormDataContentType())
	err = c.do(ctx, http.MethodPost, "/v1/runs", q, h, pr, &run)
	pr.Close()
	return run, err
}

// writeRunParts writes a multipart run: the spec, then the workspace.
func writeRunParts(mw *multipart.Writer, spec []byte, workspace io.Reader) error {
	sh := textproto.MIMEHeader{}
	sh.Set("Content-Disposition", `form-data; name="spec"`)
	sh.Set("Content-Type", "application/json")
	w, err := mw.CreatePart(sh)
	if err != nil {
		return err
	}
	if _, err := w.Write(spec); err != nil {
		return err
	}
	if w, err = mw.CreateFormFile("workspace", "workspace"); err != nil {
		return err
	}
	if _, err := io.Copy(w, workspace); err != nil {
		return fmt.Errorf("send workspace: %w", err)
	}
	return mw.Close()
}

// Artifacts lists a run's artifacts.
func (c *Client) Artifacts(ctx context.Context, id string) (api.ArtifactList, error) {
	var list api.ArtifactList
	err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/artifacts", nil, nil, nil, &list)
	return list, err
}

// Artifact writes one artifact of a run to w and checks that what came is
// what the gateway stored: its SHA-256 must be the one the ETag names.
func (c *Client) Artifact(ctx context.Context, id, path string, w io.Writer) (sandgate.Artifact, error) {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/artifacts/"+strings.Join(segs, "/"), nil, nil, nil)
	if err != nil {
		return sandgate.Artifact{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return sandgate.Artifact{}, decodeError(resp)
	}
	want := strings.TrimSuffix(strings.TrimPrefix(resp.Header.Get("ETag"), `"sha256:`), `"`)
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return sandgate.Artifact{}, fmt.Errorf("artifact %s: %w", path, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != want {
		return sandgate.Artifact{}, fmt.Errorf("artifact %s: got bytes with SHA-256 %s, the gateway stored %s", path, got, want)
	}
	return sandgate.Artifact{Path: path, Size: n, SHA256: got}, nil
}

// ArtifactsTar writes every artifact of a run to w as one tar stream.
func (c *Client) ArtifactsTar(ctx context.Context, id string, w io.Writer) error {
	resp, err := c.send(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/artifacts.tar", nil, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return decodeError(resp)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// Run returns a run.
func (c *Client) Run(ctx context.Context, id string) (api.RunView, error) {
	var run api.RunView
	err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, nil, nil, &run)
	return run, err
}

// ListOptions filter a run listing; empty fields match everything.
type ListOptions struct {
	State     sandgate.State
	Outcome   sandgate.Outcome
	SessionID string
	TaskID    string
	Since     time.Time
	Until     time.Time
	Limit     int
	Cursor    string
	// WithOutput asks for each run's output data (include=output); without
	// it a listed run's output is its size and digest only.
	WithOutput bool
}

// Runs lists runs, newest first.
func (c *Client) Runs(ctx context.Context, o ListOptions) (api.RunList, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", string(o.State))
	set("outcome", string(o.Outcome))
	set("session_id", o.SessionID)
	set("task_id", o.TaskID)
	set("cursor", o.Cursor)
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		q.Set("until", o.Until.UTC().Format(time.RFC3339Nano))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.WithOutput {
		q.Set("include", "output")
	}
	var list api.RunList
	err := c.do(ctx, http.MethodGet, "/v1/runs", q, nil, nil, &list)
	return list, err
}

// Cancel asks the gateway to stop a run and returns the run as it then is.
func (c *Client) Cancel(ctx context.Context, id string) (api.RunView, error) {
	var run api.RunView
	err := c.do(ctx, http.MethodDelete, "/v1/runs/"+url.PathEscape(id), nil, nil, nil, &run)
	return run, err
}

// Volumes lists every team's cache volumes (admin).
func (c *Client) Volumes(ctx context.Context) (api.VolumeList, error) {
	var list api.VolumeList
	err := c.do(ctx, http.MethodGet, "/v1/volumes", nil, nil, nil, &list)
	return list, err
}

// RemoveVolume removes team's cache volume name (admin).
func (c *Client) RemoveVolume(ctx context.Context, team, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/volumes/"+url.PathEscape(team)+"/"+url.PathEscape(name), nil, nil, nil, nil)
}

// Whoami returns the principal the client's token authenticates as.
func (c *Client) Whoami(ctx context.Context) (api.PrincipalView, error) {
	var p api.PrincipalView
	err := c.do(ctx, http.MethodGet, "/v1/whoami", nil, nil, nil, &p)
	return p, err
}

// Review evaluates a spec without running it.
func (c *Client) Review(ctx context.Context, spec sandgate.RunSpec) (api.DecisionView, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return api.DecisionView{}, fmt.Errorf("encode run spec: %w", err)
	}
	var d api.DecisionView
	err = c.do(ctx, http.MethodPost, "/v1/admission/review", nil, nil, bytes.NewReader(body), &d)
	return d, err
}

// ErrStopStream may be returned by a Logs callback to end the stream early
// without an error.
var ErrStopStream = errors.New("stop stream")

// Logs reads a run's log stream, calling fn for each event in order. With
// follow it returns after the exit event (or when the server ends the
// stream); fn's error ends it early.
func (c *Client) Logs(ctx context.Context, id string, follow bool, fn func(api.LogEvent) error) error {
	return c.LogsFrom(ctx, id, follow, "", fn)
}

// LogsFrom is Logs resuming after the event whose id is lastEventID (""
// for the start), as a reconnecting client does.
func (c *Client) LogsFrom(ctx context.Context, id string, follow bool, lastEventID string, fn func(api.LogEvent) error) error {
	q := url.Values{}
	if follow {
		q.Set("follow", "true")
	}
	h := http.Header{"Accept": {"text/event-stream"}}
	if lastEventID != "" {
		h.Set("Last-Event-ID", lastEventID)
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/logs", q, h, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp)
	}
	err = api.ReadEvents(resp.Body, fn)
	if errors.Is(err, ErrStopStream) {
		return nil
	}
	return err
}

func (c *Client) send(ctx context.Context, method, path string, q url.Values, h http.Header, body io.Reader) (*http.Response, error) {
	// path is escaped already (ids go through url.PathEscape).
	u := *c.base
	u.RawPath = strings.TrimRight(c.base.EscapedPath(), "/") + path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	u.Path = p
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	return resp, nil
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, h http.Header, body io.Reader, out any) error {
	resp, err := c.send(ctx, method, path, q, h, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return decodeError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// decodeError turns an error answer into a *sandgate.Error. An answer
// without the error shape (a proxy's page) gets the code of its status
// (api.CodeForStatus) and the start of its body as the message.
func decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var body api.ErrorBody
	if err := json.Unmarshal(raw, &body); err != nil || body.Error.Code == "" {
		msg := strings.TrimSpace(string(raw))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		d := api.ErrorDetail{Code: api.CodeForStatus(resp.StatusCode), Message: msg,
			CorrelationID: resp.Header.Get("X-Correlation-ID")}
		return d.Err()
	}
	return body.Error.Err()
}

// CorrelationID returns the correlation ID of the gateway's error answer
// in err's chain, or "".
func CorrelationID(err error) string {
	var se *sandgate.Error
	if errors.As(err, &se) {
		id, _ := se.Details["correlation_id"].(string)
		return id
	}
	return ""
}

// ReplayOptions select the recorded decisions a policy replay evaluates;
// zero fields mean the whole trail, the gateway's maximum of decisions
// and its default number of examples per rule.
type ReplayOptions struct {
	Since    time.Time
	Until    time.Time
	Team     string
	Limit    int
	Examples int
	// Drift also compares the records with the policy in force
	// (ReplayReport.Drift).
	Drift bool
}

// ReplayPolicy re-evaluates the recorded admission decisions with the
// candidate bundle made of files (name to content, the top of a bundle
// directory) and returns the decisions that would change (security,
// admin). A candidate the gateway refuses is a POLICY-INVALID error with
// the problems in Details["errors"]. Files must be UTF-8 text.
func (c *Client) ReplayPolicy(ctx context.Context, files map[string][]byte, o ReplayOptions) (api.ReplayReport, error) {
	req := api.ReplayRequest{Files: make(map[string]string, len(files))}
	for name, data := range files {
		if !utf8.Valid(data) {
			return api.ReplayReport{}, fmt.Errorf("bundle file %s is not UTF-8 text", name)
		}
		req.Files[name] = string(data)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return api.ReplayReport{}, fmt.Errorf("encode the candidate bundle: %w", err)
	}
	q := url.Values{}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		q.Set("until", o.Until.UTC().Format(time.RFC3339Nano))
	}
	if o.Team != "" {
		q.Set("team", o.Team)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Examples > 0 {
		q.Set("examples", strconv.Itoa(o.Examples))
	}
	if o.Drift {
		q.Set("drift", "true")
	}
	var rep api.ReplayReport
	err = c.do(ctx, http.MethodPost, "/v1/policies/replay", q, nil, bytes.NewReader(body), &rep)
	return rep, err
}

// ImagePackages returns the Debian packages image ref carries on the
// node's daemon (auditor, admin): NOT-FOUND when it has no such image,
// Listed false with the reason when the image carries no list.
func (c *Client) ImagePackages(ctx context.Context, ref string) (api.ImagePackagesView, error) {
	var v api.ImagePackagesView
	err := c.do(ctx, http.MethodGet, "/v1/images/"+url.PathEscape(ref)+"/packages", nil, nil, nil, &v)
	return v, err
}
