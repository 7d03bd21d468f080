// Package apitest holds the gateway's answers to its OpenAPI document in
// tests. A Checker sits in a test's HTTP client: it validates every
// request the test sends and every answer it gets against the document
// (package api's openapi.json) with kin-openapi, so that the document
// cannot drift from the server.
//
// It is for tests only; it is a package of its own so that the gateway's
// tests and the end-to-end tests of cmd/sandgate share it.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/sandgate/sandgate/gateway/api"
)

// Document loads and validates the OpenAPI document. It is loaded once.
func Document() (*openapi3.T, error) {
	load.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPI())
		if err != nil {
			load.err = fmt.Errorf("load openapi.json: %w", err)
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			load.err = fmt.Errorf("openapi.json is not a valid OpenAPI document: %w", err)
			return
		}
		// Paths are matched as the gateway serves them, whatever its
		// address: the document's one server is "/", the gateway itself.
		routed := *doc
		routed.Servers = nil
		if load.router, err = legacy.NewRouter(&routed); err != nil {
			load.err = fmt.Errorf("route openapi.json: %w", err)
			return
		}
		load.doc = doc
	})
	return load.doc, load.err
}

var load struct {
	sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
}

func init() {
	// The document describes a stream by the list of its items: decode
	// an event stream into its events, and JSON Lines into its values.
	openapi3filter.RegisterBodyDecoder("text/event-stream", decodeEvents)
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", decodeLines)
}

// validated counts what every Checker of the process validated.
var validated struct {
	requests, responses atomic.Int64
}

// Validated returns how many requests and answers the Checkers of this
// process validated.
func Validated() (requests, responses int64) {
	return validated.requests.Load(), validated.responses.Load()
}

// Main runs a package's tests (call it from TestMain) and, with -v, says
// how much of their traffic the Checkers validated against the document;
// it exits with the tests' status.
func Main(m *testing.M) {
	code := m.Run()
	if testing.Verbose() {
		req, resp := Validated()
		fmt.Printf("openapi: %d requests and %d answers validated against the document\n", req, resp)
	}
	os.Exit(code)
}

// Checker validates requests and answers against the document and
// reports what does not match as errors of its test.
type Checker struct {
	t      testing.TB
	doc    *openapi3.T
	router routers.Router

	mu   sync.Mutex
	done bool
	seen map[string]int
}

// New returns a Checker that reports to t until t ends.
func New(t testing.TB) *Checker {
	t.Helper()
	doc, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	c := &Checker{t: t, doc: doc, router: load.router, seen: map[string]int{}}
	t.Cleanup(func() {
		c.mu.Lock()
		c.done = true
		c.mu.Unlock()
	})
	return c
}

// Client returns a copy of hc (http.DefaultClient when nil) whose
// requests go through the Checker.
func (c *Checker) Client(hc *http.Client) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	cp := *hc
	cp.Transport = c.Transport(hc.Transport)
	return &cp
}

// Transport returns a RoundTripper that sends requests with next
// (http.DefaultTransport when nil) and checks each request and answer.
// An event stream is checked when its body is closed, as far as it was
// read; any other body is read whole first.
func (c *Checker) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{c: c, next: next}
}

// Seen returns how many answers of each operation and status were
// validated, keyed "operationId status" ("unrouted 404" for paths the
// document does not have).
func (c *Checker) Seen() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.seen))
	for k, v := range c.seen {
		m[k] = v
	}
	return m
}

func (c *Checker) errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	c.t.Errorf("openapi: "+format, args...)
}

func (c *Checker) count(key string) {
	c.mu.Lock()
	c.seen[key]++
	c.mu.Unlock()
}

type transport struct {
	c    *Checker
	next http.RoundTripper
}

// CloseIdleConnections closes next's idle connections.
func (t *transport) CloseIdleConnections() {
	if ci, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// RoundTrip sends req and checks it and its answer.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		reqBody, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	out := req.Clone(req.Context())
	if req.Body != nil {
		out.Body = io.NopCloser(bytes.NewReader(reqBody))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	}
	resp, err := t.next.RoundTrip(out)
	if err != nil {
		return resp, err
	}
	ex := t.c.exchange(req, reqBody)
	if mt, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";"); strings.TrimSpace(mt) == "text/event-stream" {
		resp.Body = &streamBody{ReadCloser: resp.Body, check: func(b []byte) { t.c.checkResponse(ex, resp, completeEvents(b)) }}
		return resp, nil
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		// A body cut short (an export that failed midway) is the test's
		// to judge; it gets the error as it reads.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{rerr}))
		return resp, nil
	}
	t.c.checkResponse(ex, resp, body)
	return resp, nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// artifactPath splits GET /v1/runs/{id}/artifacts/{path} into its
// prefix and the artifact's path.
var artifactPath = regexp.MustCompile(`^(/v1/runs/[^/]+/artifacts/)(.+/.+)$`)

// portPath splits /v1/sessions/{id}/ports/{port}/{path} (and a port
// link's /v1/sessions/{id}/previews/{link}/{path}) likewise: the
// path asked of a session's port may have any number of segments, none.
var portPath = regexp.MustCompile(`^(/v1/sessions/[^/]+/(?:ports|previews)/[^/]+/)(.*)$`)

// imagePath is GET /v1/images/{ref}/packages as sent: a ref's slashes
// are percent-encoded, so the router is shown the path as sent.
var imagePath = regexp.MustCompile(`^/v1/images/[^/]+/packages$`)

// exchange is a request as the checker saw it.
type exchange struct {
	req    *http.Request
	input  *openapi3filter.RequestValidationInput
	reqErr error
}

// exchange finds req's operation and validates req against it.
func (c *Checker) exchange(req *http.Request, body []byte) *exchange {
	ex := &exchange{req: req}
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) > 0 && vreq.Header.Get("Content-Type") == "" {
		// The gateway reads a body without a Content-Type as JSON, as the
		// document says; OpenAPI matches bodies by their media type.
		vreq.Header.Set("Content-Type", "application/json")
	}
	// An artifact's {path} spans as many segments as the artifact's path
	// has, which an OpenAPI path template cannot say: the router is shown
	// it as one segment.
	if m := artifactPath.FindStringSubmatch(vreq.URL.Path); m != nil {
		u := *vreq.URL
		u.Path, u.RawPath = m[1]+strings.ReplaceAll(m[2], "/", "%2F"), ""
		vreq.URL = &u
	}
	if m := portPath.FindStringSubmatch(vreq.URL.Path); m != nil {
		u := *vreq.URL
		u.Path, u.RawPath = m[1]+"%2F"+strings.ReplaceAll(m[2], "/", "%2F"), ""
		vreq.URL = &u
	}
	if raw := vreq.URL.EscapedPath(); imagePath.MatchString(raw) {
		u := *vreq.URL
		u.Path, u.RawPath = raw, ""
		vreq.URL = &u
	}
	route, params, err := c.router.FindRoute(vreq)
	if err != nil {
		return ex
	}
	opts := &openapi3filter.Options{AuthenticationFunc: bearer, MultiError: true}
	opts.WithCustomSchemaErrorFunc(schemaError)
	ex.input = &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	validated.requests.Add(1)
	ex.reqErr = openapi3filter.ValidateRequest(context.Background(), ex.input)
	return ex
}

// bearer accepts a request that carries a bearer token: whether the
// token is valid is the server's to say.
func bearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme, token, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return errors.New("no bearer token")
	}
	return nil
}

// checkResponse validates an answer to ex's request.
func (c *Checker) checkResponse(ex *exchange, resp *http.Response, body []byte) {
	validated.responses.Add(1)
	what := ex.req.Method + " " + ex.req.URL.Path
	if resp.Header.Get("X-Correlation-ID") == "" {
		c.errorf("%s: %d without X-Correlation-ID", what, resp.StatusCode)
	}
	if resp.StatusCode >= 400 && ex.req.Method != http.MethodHead {
		var e api.ErrorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
			c.errorf("%s: %d is not the error shape: %.300s", what, resp.StatusCode, body)
		} else if want := api.StatusOf(e.Error.Code); want != resp.StatusCode {
			c.errorf("%s: %s answered with %d, not its status %d", what, e.Error.Code, resp.StatusCode, want)
		}
	}
	if ex.input == nil {
		// A path or method the document does not have: the server must
		// refuse it, with the error shape.
		c.count(fmt.Sprintf("unrouted %d", resp.StatusCode))
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			c.errorf("%s is not in the document, yet answered %d", what, resp.StatusCode)
		}
		if err := c.matchError(body); err != nil && ex.req.Method != http.MethodHead {
			c.errorf("%s: %d: %v", what, resp.StatusCode, err)
		}
		return
	}
	op := ex.input.Route.Operation.OperationID
	c.count(fmt.Sprintf("%s %d", op, resp.StatusCode))
	if ex.reqErr != nil && resp.StatusCode < 400 {
		c.errorf("%s (%s): the document refuses this request, yet the server answered %d: %v", what, op, resp.StatusCode, ex.reqErr)
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	opts.WithCustomSchemaErrorFunc(schemaError)
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: ex.input, Status: resp.StatusCode, Header: resp.Header, Options: opts,
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.errorf("%s (%s): answer %d does not match the document: %v\nbody: %.1000s", what, op, resp.StatusCode, err, body)
	}
}

// matchError validates body against the document's Error schema.
func (c *Checker) matchError(body []byte) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	s := c.doc.Components.Schemas["Error"].Value
	return s.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors(), openapi3.SetSchemaErrorMessageCustomizer(schemaError))
}

// schemaError says where a value does not match and why, without the
// schema and value kin-openapi would print.
func schemaError(e *openapi3.SchemaError) string {
	reason := e.Reason
	if reason == "" && e.Origin != nil {
		reason = e.Origin.Error()
	}
	if reason == "" {
		reason = "does not match " + e.SchemaField
	}
	if p := e.JSONPointer(); len(p) > 0 {
		return "at /" + strings.Join(p, "/") + ": " + reason
	}
	return reason
}

// streamBody checks an event stream, as far as it was read, when it is
// closed.
type streamBody struct {
	io.ReadCloser
	buf   bytes.Buffer
	once  sync.Once
	check func([]byte)
}

func (s *streamBody) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	s.buf.Write(p[:n])
	return n, err
}

func (s *streamBody) Close() error {
	err := s.ReadCloser.Close()
	s.once.Do(func() { s.check(s.buf.Bytes()) })
	return err
}

// completeEvents cuts an event stream after its last complete event.
func completeEvents(b []byte) []byte {
	if i := bytes.LastIndex(b, []byte("\n\n")); i >= 0 {
		return b[:i+2]
	}
	return nil
}

// decodeEvents decodes an event stream into its events, each
// {"id", "event", "data"} with its data decoded from JSON.
func decodeEvents(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	events := []any{}
	err := api.ReadEvents(body, func(ev api.LogEvent) error {
		var data any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			return fmt.Errorf("event %s %q: data is not JSON: %w", ev.ID, ev.Event, err)
		}
		events = append(events, map[string]any{"id": ev.ID, "event": ev.Event, "data": data})
		return nil
	})
	return events, err
}

// decodeLines decodes JSON Lines into the list of their values.
func decodeLines(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	values := []any{}
	dec := json.NewDecoder(body)
	for {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			return values, nil
		} else if err != nil {
			return nil, err
		}
		values = append(values, v)
	}
}

// Operations returns the "METHOD path" of every operation of the
// document, sorted, with its operationId.
func Operations() (map[string]string, error) {
	doc, err := Document()
	if err != nil {
		return nil, err
	}
	ops := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops[method+" "+path] = op.OperationID
		}
	}
	return ops, nil
}

// Keys returns m's keys, sorted.
func Keys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
