// Package mcp is sandgate's Model Context Protocol server, built with the
// official Go SDK (github.com/modelcontextprotocol/go-sdk), whose only
// importer it is. Its tools (run, review, session_open, session_exec,
// session_write_file, session_read_file, session_close, artifact_read)
// and resources (a run's logs and artifacts) are calls of the HTTP API as
// the caller's principal, through package gateway/client: every call goes
// through the gateway's authentication, roles and its one gate, exactly as
// the same call over HTTP would, and is recorded with via "mcp" and the
// MCP client's name and version.
//
// It serves over stdio (`sandgate mcp`, a client of a gateway named by
// SANDGATE_URL and SANDGATE_TOKEN) and over the streamable HTTP transport
// at /v1/mcp of the gateway itself (Handler), where each call is made
// with the bearer token of the HTTP request that carries it.
package mcp

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/client"
)

// MaxArguments bounds a tool call's arguments, in bytes of JSON: a call
// over it is refused with a JSON-RPC invalid-params error before any tool
// runs.
const MaxArguments = 512 << 10

// Via is what the trail records as the surface of an MCP call.
const Via = "mcp"

// Dialer makes the API client a tool call goes through: the caller's
// token, and the MCP client's name and version for the trail.
type Dialer func(ctx context.Context, req *sdk.CallToolRequest, info *sdk.Implementation) (*client.Client, error)

// ResourceDialer makes the API client a resource read goes through.
type ResourceDialer func(ctx context.Context, req *sdk.ReadResourceRequest) (*client.Client, error)

// NewServer returns the MCP server whose tools and resources call the
// API through clients dial makes.
func NewServer(dial Dialer, readDial ResourceDialer) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "sandgate", Title: "sandgate", Version: sandgate.Version}, &sdk.ServerOptions{
		Instructions: "sandgate runs commands in locked-down containers admitted by policy. " +
			"Use run for one command, session_open/session_exec for several sharing files. " +
			"A refusal is a tool error naming the policy rule, its reason and the fix it suggests.",
	})
	s.AddReceivingMiddleware(boundArguments)
	t := tools{dial: dial}
	t.register(s)
	r := resources{dial: readDial}
	r.register(s)
	return s
}

// boundArguments refuses, as a JSON-RPC error, a tool call whose
// arguments are larger than MaxArguments.
func boundArguments(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if method == "tools/call" {
			if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok && len(p.Arguments) > MaxArguments {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
					Message: fmt.Sprintf("the arguments of %s are %d bytes, over the %d sandgate takes", p.Name, len(p.Arguments), MaxArguments)}
			}
		}
		return next(ctx, method, req)
	}
}

// clientInfo is the MCP client's name and version, as it said in
// initialize (or in a request's metadata).
func clientInfo(req interface{ ClientInfo() *sdk.Implementation }) *sdk.Implementation {
	if info := req.ClientInfo(); info != nil {
		return info
	}
	return &sdk.Implementation{}
}

// viaTransport marks every request of a tool call with via "mcp" and the
// MCP client's name and version, which the gateway records.
type viaTransport struct {
	base http.RoundTripper
	info *sdk.Implementation
	// source, when set, is the address the call came from (for the
	// gateway's per-address limits); in process only.
	source string
}

func (t viaTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("X-Sandgate-Via", Via)
	if t.info != nil && t.info.Name != "" {
		req.Header.Set("X-Sandgate-Client", t.info.Name+"/"+t.info.Version)
	}
	if t.source != "" {
		req.RemoteAddr = t.source
	}
	return t.base.RoundTrip(req)
}

// withVia returns c with its requests marked for info.
func withVia(c *client.Client, info *sdk.Implementation, source string) *client.Client {
	base := c.HTTP.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.HTTP = &http.Client{Transport: viaTransport{base: base, info: info, source: source}}
	return c
}

// ClientDialer is the Dialer of `sandgate mcp`: every call is made with
// the one token the process was started with, to the gateway at url.
func ClientDialer(url, token string) (Dialer, ResourceDialer, error) {
	if _, err := client.New(url, token); err != nil {
		return nil, nil, err
	}
	dial := func(_ context.Context, info *sdk.Implementation) (*client.Client, error) {
		c, err := client.New(url, token)
		if err != nil {
			return nil, err
		}
		return withVia(c, info, ""), nil
	}
	return func(ctx context.Context, req *sdk.CallToolRequest, info *sdk.Implementation) (*client.Client, error) {
			return dial(ctx, info)
		}, func(ctx context.Context, req *sdk.ReadResourceRequest) (*client.Client, error) {
			return dial(ctx, clientInfo(req))
		}, nil
}

// MaxLine bounds one JSON-RPC message on stdio: a tool call with its
// arguments at MaxArguments, and room for the rest.
const MaxLine = 2 * MaxArguments

// ServeStdio serves the MCP server over in and out (a process's stdin and
// stdout) until the client leaves or ctx ends.
func ServeStdio(ctx context.Context, s *sdk.Server, in io.Reader, out io.Writer) error {
	return s.Run(ctx, &sdk.IOTransport{Reader: io.NopCloser(in), Writer: nopCloser{out}, MaxLineLength: MaxLine})
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
