package cli

import (
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/mcp"
)

// newMCPCmd builds `sandgate mcp`: the MCP server on stdio, for a local
// agent, as a client of the gateway SANDGATE_URL names with the token
// SANDGATE_TOKEN holds.
func newMCPCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the Model Context Protocol on stdin and stdout, for a local agent",
		Long: `Serve sandgate's MCP server (tools run, review, session_open, session_exec,
session_write_file, session_read_file, session_close, artifact_read; resources:
a run's logs and artifacts) on stdin and stdout. Every tool call is a call of
the gateway's API with SANDGATE_TOKEN: admitted as its principal, recorded with
via "mcp" and the MCP client's name and version. Logs go to stderr only.

The same server is served by the gateway itself at /v1/mcp (streamable HTTP,
with the caller's bearer token) for a remote agent.`,
		Example: `  {"mcpServers": {"sandgate": {"command": "sandgate", "args": ["mcp"],
    "env": {"SANDGATE_URL": "http://127.0.0.1:8080", "SANDGATE_TOKEN": "…"}}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.cfg.Token == "" {
				return &ExitError{Code: exitPlatform, Message: "SANDGATE_TOKEN is not set: the MCP server calls the gateway with it"}
			}
			dial, readDial, err := mcp.ClientDialer(a.cfg.URL, a.cfg.Token)
			if err != nil {
				return &ExitError{Code: exitPlatform, Message: err.Error()}
			}
			return mcp.ServeStdio(cmd.Context(), mcp.NewServer(dial, readDial), a.stdin, a.stdout)
		},
	}
}
