package mcp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/client"
)

// sourceHeader carries, from the HTTP request of a call to its tool, the
// address the call came from: the handler sets it on every request,
// whatever the client sent.
const sourceHeader = "X-Sandgate-Mcp-Source"

// internalURL is the base of the API calls a tool makes in process; no
// request to it leaves the process.
const internalURL = "http://sandgate.internal"

// Handler is the streamable HTTP transport of the MCP server, for the
// gateway to mount at /v1/mcp behind its authentication. Each tool call
// is made, in process, through api (the gateway's own handler: its
// authentication, roles and gate) with the bearer token of the HTTP
// request that carries the call, so an MCP session is never more than
// the token of each request. maxBody bounds a request's body.
func Handler(api http.Handler, maxBody int64) http.Handler {
	in := handlerTransport{h: api}
	dial := func(h http.Header, info *sdk.Implementation) (*client.Client, error) {
		token, ok := bearer(h.Get("Authorization"))
		if !ok {
			return nil, sandgate.Errorf(sandgate.CodeUnauthenticated, "a bearer token is required (Authorization: Bearer <token>)")
		}
		c, err := client.New(internalURL, token)
		if err != nil {
			return nil, err
		}
		c.HTTP = &http.Client{Transport: in}
		return withVia(c, info, h.Get(sourceHeader)), nil
	}
	s := NewServer(func(_ context.Context, req *sdk.CallToolRequest, info *sdk.Implementation) (*client.Client, error) {
		return dial(headerOf(req.Extra), info)
	}, func(_ context.Context, req *sdk.ReadResourceRequest) (*client.Client, error) {
		return dial(headerOf(req.Extra), clientInfo(req))
	})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{
		// The gateway authenticates every request with a bearer token,
		// which a page that rebinds a name to the loopback cannot send;
		// and a gateway behind a proxy on the loopback is reached by its
		// public name.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        maxBody,
		SessionTimeout:             30 * time.Minute,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set(sourceHeader, r.RemoteAddr)
		h.ServeHTTP(w, r)
	})
}

func headerOf(extra *sdk.RequestExtra) http.Header {
	if extra == nil || extra.Header == nil {
		return http.Header{}
	}
	return extra.Header
}

func bearer(h string) (string, bool) {
	const prefix = "bearer "
	if len(h) <= len(prefix) || !equalFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return h[len(prefix):], true
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// handlerTransport answers a request with an http.Handler in process,
// streaming the answer as it is written.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	in := req.Clone(req.Context())
	in.RequestURI = req.URL.RequestURI()
	if in.RemoteAddr == "" {
		in.RemoteAddr = "127.0.0.1:0"
	}
	if in.Body == nil {
		in.Body = http.NoBody
	}
	go func() {
		defer func() {
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing
			_ = pw.Close()
		}()
		t.h.ServeHTTP(w, in)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		_ = pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.header, Body: pr, ContentLength: -1, Request: req}, nil
}

// pipeWriter is the in-process answer: its header, then its body into a
// pipe the caller reads.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.status = code
		w.header = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	n, err := w.pw.Write(b)
	if errors.Is(err, io.ErrClosedPipe) {
		return n, http.ErrHandlerTimeout
	}
	return n, err
}

// Flush is a no-op: every Write reaches the reader.
func (w *pipeWriter) Flush() {}
