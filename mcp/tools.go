package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// maxOutput bounds each stream of output a tool answers with; the run
// keeps all of it (its logs resource, GET /v1/runs/{id}/logs).
const maxOutput = 64 << 10

// maxFileRead bounds what session_read_file and artifact_read answer.
const maxFileRead = 1 << 20

// maxWait is how long run and session_exec wait for their command to end
// before they answer with it still running.
const maxWait = 5 * time.Minute

// RunInput is the arguments of run.
type RunInput struct {
	Command        []string          `json:"command" jsonschema:"the program and its arguments, such as [\"sh\", \"-c\", \"make test\"]"`
	Image          string            `json:"image,omitempty" jsonschema:"the container image; the policy's default when empty"`
	Language       string            `json:"language,omitempty" jsonschema:"a language (shell, python, node, toolchain) whose image the policy names, instead of image"`
	Files          []sandgate.File   `json:"files,omitempty" jsonschema:"files written into the workdir before the command runs"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"the command's standard input"`
	Artifacts      []string          `json:"artifacts,omitempty" jsonschema:"paths or globs under the workdir to keep as artifacts"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"the command's time limit in seconds"`
}

func (in RunInput) spec() sandgate.RunSpec {
	return sandgate.RunSpec{Image: in.Image, Language: in.Language, Command: in.Command, Files: in.Files, Env: in.Env, Stdin: in.Stdin,
		Artifacts: in.Artifacts, TimeoutSeconds: in.TimeoutSeconds}
}

// Output is one stream of a command's output as a tool answers it.
type Output struct {
	Text string `json:"text" jsonschema:"the output, UTF-8 (invalid bytes replaced)"`
	// Truncated says the run's output was cut at its limit, or this
	// answer at its own.
	Truncated bool  `json:"truncated"`
	Bytes     int64 `json:"bytes" jsonschema:"the stream's size in bytes"`
}

// RunResult is what run and session_exec answer.
type RunResult struct {
	RunID     string              `json:"run_id"`
	State     string              `json:"state"`
	Outcome   string              `json:"outcome,omitempty"`
	ExitCode  *int                `json:"exit_code"`
	Stdout    Output              `json:"stdout"`
	Stderr    Output              `json:"stderr"`
	Artifacts []sandgate.Artifact `json:"artifacts"`
	// Logs is the resource with the whole output.
	Logs string `json:"logs" jsonschema:"the resource URI of the run's whole output"`
}

// ReviewResult is what review answers.
type ReviewResult struct {
	Allow      bool        `json:"allow"`
	Violations []Violation `json:"violations"`
	Warnings   []Violation `json:"warnings"`
}

// Violation is a policy rule's finding, with the fix the policy suggests.
type Violation struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
	Action  string `json:"action"`
}

// SessionOpenInput is the arguments of session_open.
type SessionOpenInput struct {
	Image              string `json:"image,omitempty"`
	Language           string `json:"language,omitempty" jsonschema:"a language (shell, python, node, toolchain) whose image the policy names, instead of image"`
	IdleTimeoutSeconds int    `json:"idle_timeout_seconds,omitempty"`
	MaxLifetimeSeconds int    `json:"max_lifetime_seconds,omitempty"`
	MemoryMB           int64  `json:"memory_mb,omitempty"`
}

// SessionResult is what session_open and session_close answer.
type SessionResult struct {
	SessionID string `json:"session_id"`
	State     string `json:"state"`
	EndReason string `json:"end_reason,omitempty"`
}

// SessionExecInput is the arguments of session_exec.
type SessionExecInput struct {
	SessionID      string            `json:"session_id"`
	Command        []string          `json:"command"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          string            `json:"stdin,omitempty"`
	Workdir        string            `json:"workdir,omitempty" jsonschema:"relative to the session's workdir"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
}

// FileInput is the arguments of session_write_file.
type FileInput struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path" jsonschema:"relative to the session's workdir"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64"`
}

// FileRef names a file of a session (session_read_file) or a run's
// artifact (artifact_read).
type FileRef struct {
	SessionID string `json:"session_id,omitempty"`
	RunID     string `json:"run_id,omitempty"`
	Path      string `json:"path"`
}

// FileResult is what the file tools answer.
type FileResult struct {
	Path     string `json:"path"`
	Bytes    int64  `json:"bytes"`
	SHA256   string `json:"sha256,omitempty"`
	Content  string `json:"content,omitempty"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 or base64"`
}

// SessionRef names a session.
type SessionRef struct {
	SessionID string `json:"session_id"`
}

type tools struct{ dial Dialer }

func (t tools) register(s *sdk.Server) {
	sdk.AddTool(s, &sdk.Tool{Name: "run", Description: "Run one command in a fresh, locked-down container admitted by policy; answers its exit code, output (bounded) and artifacts."}, t.run)
	sdk.AddTool(s, &sdk.Tool{Name: "review", Description: "Ask whether a command would be admitted, and why not: the rules it breaks and the fixes the policy suggests. Nothing runs."}, t.review)
	sdk.AddTool(s, &sdk.Tool{Name: "session_open", Description: "Open a session: a long-lived sandbox whose commands share files."}, t.sessionOpen)
	sdk.AddTool(s, &sdk.Tool{Name: "session_exec", Description: "Run a command in an open session; answers its exit code and output (bounded)."}, t.sessionExec)
	sdk.AddTool(s, &sdk.Tool{Name: "session_write_file", Description: "Write a file into an open session's workdir."}, t.writeFile)
	sdk.AddTool(s, &sdk.Tool{Name: "session_read_file", Description: "Read a file (up to 1 MiB) from an open session's workdir."}, t.readFile)
	sdk.AddTool(s, &sdk.Tool{Name: "session_close", Description: "End a session: its container and files are removed."}, t.sessionClose)
	sdk.AddTool(s, &sdk.Tool{Name: "artifact_read", Description: "Read one artifact (up to 1 MiB) a run kept."}, t.artifactRead)
}

// call runs fn with the caller's client; an error of the API is a tool
// error with its code, message, correlation ID and, for a denial, the
// rules, their reasons and the fixes, in the result's structured content.
func (t tools) call(ctx context.Context, req *sdk.CallToolRequest, fn func(*client.Client) (any, error)) (*sdk.CallToolResult, any, error) {
	c, err := t.dial(ctx, req, clientInfo(req))
	if err != nil {
		return nil, nil, err
	}
	out, err := fn(c)
	if err == nil {
		return nil, out, nil
	}
	var se *sandgate.Error
	if !errors.As(err, &se) {
		return nil, nil, err
	}
	return toolError(se, client.CorrelationID(err)), nil, nil
}

// toolError is an API error as a tool error.
func toolError(se *sandgate.Error, correlation string) *sdk.CallToolResult {
	doc := map[string]any{"code": string(se.Code), "message": se.Message, "correlation_id": correlation}
	if se.Field != "" {
		doc["field"] = se.Field
	}
	text := string(se.Code) + ": " + se.Message
	if se.Code == sandgate.CodePolicyDenied {
		if d, err := api.DecisionFromDetails(se.Details); err == nil {
			vs := violations(d.Violations)
			doc["violations"], doc["policy_revision"], doc["decision_id"] = vs, d.PolicyRevision, d.DecisionID
			for _, v := range vs {
				if v.Action == "warn" {
					continue
				}
				text += "\n- " + v.Rule + ": " + v.Message
				if v.Fix != "" {
					text += " (fix: " + v.Fix + ")"
				}
			}
		}
	}
	res := &sdk.CallToolResult{IsError: true, StructuredContent: map[string]any{"error": doc},
		Content: []sdk.Content{&sdk.TextContent{Text: text}}}
	return res
}

func violations(vs []sandgate.Violation) []Violation {
	out := make([]Violation, 0, len(vs))
	for _, v := range vs {
		out = append(out, Violation{Rule: v.Rule, Message: v.Message, Fix: v.Fix, Action: v.Action})
	}
	return out
}

func (t tools) run(ctx context.Context, req *sdk.CallToolRequest, in RunInput) (*sdk.CallToolResult, any, error) {
	return t.call(ctx, req, func(c *client.Client) (any, error) {
		if len(in.Command) == 0 {
			return nil, sandgate.FieldError("command", "is required")
		}
		run, err := c.Submit(ctx, in.spec(), client.SubmitOptions{Wait: maxWait})
		if err != nil {
			return nil, err
		}
		return runResult(ctx, c, run), nil
	})
}

func (t tools) review(ctx context.Context, req *sdk.CallToolRequest, in RunInput) (*sdk.CallToolResult, any, error) {
	return t.call(ctx, req, func(c *client.Client) (any, error) {
		d, err := c.Review(ctx, in.spec())
		if err != nil {
			return nil, err
		}
		return ReviewResult{Allow: d.Allow, Violations: violations(d.Violations), Warnings: violations(d.Warnings)}, nil
	})
}

func (t tools) sessionOpen(ctx context.Context, req *sdk.CallToolRequest, in SessionOpenInput) (*sdk.CallToolResult, any, error) {
	return t.call(ctx, req, func(c *client.Client) (any, error) {
		spec := api.SessionRequest{IdleTimeoutSeconds: in.IdleTimeoutSeconds, MaxLifetimeSeconds: in.MaxLifetimeSeconds}
		spec.Image, spec.Language = in.Image, in.Language
		if in.MemoryMB > 0 {
			spec.Resources = sandgate.Resources{MemoryMB: in.MemoryMB}
		}
		ss, err := c.CreateSession(ctx, spec)
		if err != nil {
			return nil, err
		}
		return SessionResult{SessionID: ss.ID, State: string(ss.State)}, nil
	})
}

func (t tools) sessionExec(ctx context.Context, req *sdk.CallToolRequest, in SessionExecInput) (*sdk.CallToolResult, any, error) {
	return t.call(ctx, req, func(c *client.Client) (any, error) {
		if len(in.Command) == 0 {
			return nil, sandgate.FieldError("command", "is required")
		}
		run, err := c.Exec(ctx, in.SessionID, api.ExecRequest{Command: in.Command, Env: in.Env, Stdin: in.Stdin,
			Workdir: in.Workdir, TimeoutSeconds: in.TimeoutSeconds}, maxWait)
		if err != nil {
			return nil, err
		}
		return runResult(ctx, c, run), nil
	})
}

func (t tools) writeFile(ctx context.Context, req *sdk.CallToolRequest, in FileInput) (*sdk.CallToolResult, any, error) {
	return t.call(ctx, req, func(c *client.Client) (any, error) {
		content := []byte(in.Content)
		switch in.Encoding {
		case "", "utf8", sandgate.EncodingUTF8:
		case sandgate.EncodingBase64:
			b, err := base64.StdEncoding.DecodeString(in.Content)
			if err != nil {
				return nil, sandgate.FieldError("content", "is not base64: %v", err)
			}
			content = b
		default:
			return nil, sandgate.FieldError("encoding", "must be utf-8 or base64")
		}
		d, err := c.PutFile(ctx, in.SessionID, in.Path, 0o644, bytes.NewReader(content))
		if err != nil {
			return nil, err
		}
		return FileResult{Path: in.Path, Bytes: d.Bytes, SHA256: d.SHA256}, nil
	})
}

func (t tools) readFile(ctx context.Context, req *sdk.CallToolRequest, in FileRef) (*sdk.CallToolResult, any, error) {
	return t.call(ctx, req, func(c *client.Client) (any, error) {
		var buf limitedBuffer
		kind, err := c.GetFiles(ctx, in.SessionID, in.Path, &buf)
		if err != nil && !errors.Is(err, errTooBig) {
			return nil, err
		}
		if kind != "" && kind != "file" {
			return nil, sandgate.FieldError("path", "names a directory; read its files one by one")
		}
		if buf.over {
			return nil, sandgate.Errorf(sandgate.CodeTooLarge, "the file is over the %d bytes session_read_file answers", maxFileRead)
		}
		return fileResult(in.Path, buf.Bytes(), ""), nil
	})
}

func (t tools) sessionClose(ctx context.Context, req *sdk.CallToolRequest, in SessionRef) (*sdk.CallToolResult, any, error) {
	return t.call(ctx, req, func(c *client.Client) (any, error) {
		ss, err := c.DeleteSession(ctx, in.SessionID)
		if err != nil {
			return nil, err
		}
		return SessionResult{SessionID: ss.ID, State: string(ss.State), EndReason: string(ss.EndReason)}, nil
	})
}

func (t tools) artifactRead(ctx context.Context, req *sdk.CallToolRequest, in FileRef) (*sdk.CallToolResult, any, error) {
	return t.call(ctx, req, func(c *client.Client) (any, error) {
		var buf limitedBuffer
		a, err := c.Artifact(ctx, in.RunID, in.Path, &buf)
		if err != nil && !errors.Is(err, errTooBig) {
			return nil, err
		}
		if buf.over {
			return nil, sandgate.Errorf(sandgate.CodeTooLarge, "the artifact is %d bytes, over the %d artifact_read answers", a.Size, maxFileRead)
		}
		return fileResult(in.Path, buf.Bytes(), a.SHA256), nil
	})
}

// runResult is a run as run and session_exec answer it, with its
// artifacts listed once it has finished.
func runResult(ctx context.Context, c *client.Client, run api.RunView) RunResult {
	r := RunResult{RunID: run.ID, State: string(run.State), ExitCode: run.ExitCode, Stdout: output(run.Stdout), Stderr: output(run.Stderr),
		Artifacts: []sandgate.Artifact{}, Logs: "sandgate://runs/" + run.ID + "/logs"}
	if run.Outcome != nil {
		r.Outcome = string(*run.Outcome)
	}
	if run.Artifacts != nil && run.Artifacts.Count > 0 {
		if list, err := c.Artifacts(ctx, run.ID); err == nil {
			r.Artifacts = list.Artifacts
		}
	}
	return r
}

func output(o api.OutputView) Output {
	b, err := o.Decode()
	if err != nil {
		b = []byte(o.Data)
	}
	out := Output{Bytes: o.Bytes, Truncated: o.Truncated}
	if len(b) > maxOutput {
		b, out.Truncated = b[:maxOutput], true
	}
	out.Text = strings.ToValidUTF8(string(b), "\uFFFD")
	return out
}

// fileResult is a file's content: UTF-8 text as it is, other bytes in
// base64.
func fileResult(path string, b []byte, sum string) FileResult {
	r := FileResult{Path: path, Bytes: int64(len(b)), SHA256: sum, Content: string(b), Encoding: sandgate.EncodingUTF8}
	if !utf8.Valid(b) {
		r.Content, r.Encoding = base64.StdEncoding.EncodeToString(b), sandgate.EncodingBase64
	}
	return r
}

// errTooBig ends a read past maxFileRead.
var errTooBig = errors.New("over the size a tool answers")

// limitedBuffer keeps at most maxFileRead bytes, and says so past them.
type limitedBuffer struct {
	bytes.Buffer
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxFileRead {
		b.over = true
		return 0, errTooBig
	}
	return b.Buffer.Write(p)
}
