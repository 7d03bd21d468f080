package mcp

import (
	"context"
	"errors"
	"net/url"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// The resources: a run's logs (sandgate://runs/{id}/logs, its stdout and
// stderr as they were captured) and each of its artifacts
// (sandgate://runs/{id}/artifacts/{path}), read as the caller.

type resources struct{ dial ResourceDialer }

func (r resources) register(s *sdk.Server) {
	s.AddResourceTemplate(&sdk.ResourceTemplate{Name: "run-logs", URITemplate: "sandgate://runs/{id}/logs", MIMEType: "text/plain",
		Description: "A run's output: its stdout and stderr as captured."}, r.logs)
	s.AddResourceTemplate(&sdk.ResourceTemplate{Name: "run-artifact", URITemplate: "sandgate://runs/{id}/artifacts/{+path}",
		Description: "One artifact a run kept (up to 1 MiB)."}, r.artifact)
}

// parseRunURI splits sandgate://runs/{id}/{rest}.
func parseRunURI(raw string) (id, rest string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "sandgate" || u.Host != "runs" {
		return "", "", sandgate.FieldError("uri", "must be sandgate://runs/{id}/logs or sandgate://runs/{id}/artifacts/{path}")
	}
	id, rest, _ = strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	return id, rest, nil
}

func (r resources) logs(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	id, rest, err := parseRunURI(req.Params.URI)
	if err != nil || rest != "logs" {
		return nil, sdk.ResourceNotFoundError(req.Params.URI)
	}
	c, err := r.dial(ctx, req)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	err = c.Logs(ctx, id, false, func(ev api.LogEvent) error {
		if ev.Event == "stdout" || ev.Event == "stderr" {
			chunk, err := ev.Chunk()
			if err != nil {
				return err
			}
			if b.Len()+len(chunk) > maxFileRead {
				return errTooBig
			}
			b.Write(chunk)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errTooBig) {
		return nil, resourceError(req.Params.URI, err)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: b.String()}}}, nil
}

func (r resources) artifact(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	id, rest, err := parseRunURI(req.Params.URI)
	path, ok := strings.CutPrefix(rest, "artifacts/")
	if err != nil || !ok || path == "" {
		return nil, sdk.ResourceNotFoundError(req.Params.URI)
	}
	c, err := r.dial(ctx, req)
	if err != nil {
		return nil, err
	}
	var buf limitedBuffer
	if _, err := c.Artifact(ctx, id, path, &buf); err != nil {
		return nil, resourceError(req.Params.URI, err)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "application/octet-stream", Blob: buf.Bytes()}}}, nil
}

// resourceError is an API error as a resource read's: NOT-FOUND (another
// team's run among them) is the protocol's resource-not-found.
func resourceError(uri string, err error) error {
	if sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound {
		return sdk.ResourceNotFoundError(uri)
	}
	return errors.New(sandgate.ErrorMessageOf(err) + " (" + string(sandgate.ErrorCodeOf(err)) + ", correlation " + client.CorrelationID(err) + ")")
}
