package cli

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// newSessionCmd builds `sandgate session create|exec|cp|ls|rm`.
func newSessionCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Open a long-lived sandbox, run commands and copy files in it",
		Long: `A session is one long-lived, locked-down container with a workspace at its
workdir (/workspace by default), admitted by policy like a run. Every command
in it is a run of its own: admitted, recorded, listed with sandgate runs list
--session ID, and followed like any run. A session ends when it is removed,
idle for its idle timeout, older than its lifetime, or its container dies.`,
		Example: `  id=$(sandgate session create --idle 10m)
  sandgate session cp ./src "$id":                 # the workspace's src/
  sandgate session exec "$id" -- sh -c 'cd src && ./test.sh'
  sandgate session cp "$id":src/report.txt ./report.txt
  sandgate session rm "$id"`,
	}
	cmd.AddCommand(newSessionCreateCmd(a), newSessionExecCmd(a), newSessionCpCmd(a), newSessionLsCmd(a), newSessionRmCmd(a), newSessionShellCmd(a))
	return cmd
}

func newSessionCreateCmd(a *app) *cobra.Command {
	var (
		o         runOptions
		idle, age time.Duration
		keepalive []string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Open a session and print its ID",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stdin = false
			spec, err := buildSpec(a, o, nil)
			if err != nil {
				return &ExitError{Code: exitPlatform, Message: err.Error()}
			}
			req := api.SessionRequest{RunSpec: spec, Keepalive: keepalive,
				IdleTimeoutSeconds: int(math.Ceil(idle.Seconds())), MaxLifetimeSeconds: int(math.Ceil(age.Seconds()))}
			c, err := a.newClient()
			if err != nil {
				return &ExitError{Code: exitPlatform, Message: err.Error()}
			}
			ss, err := c.CreateSession(cmd.Context(), req)
			if err != nil {
				return submitError(a, err)
			}
			for _, w := range ss.Warnings {
				fmt.Fprintf(a.stderr, "sandgate: warning: %s\n", w)
			}
			if asJSON {
				return writeJSON(a, ss)
			}
			_, err = fmt.Fprintln(a.stdout, ss.ID)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.image, "image", "", "image (default from the policy)")
	f.StringVar(&o.language, "language", "", "the image the policy names for this language (shell, python, node, toolchain) instead of --image")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable K=V (or K to take it from here); repeatable")
	f.StringVar(&o.network, "network", "", "network: none, bridge or egress")
	f.StringArrayVar(&o.egress, "egress", nil, "destination host:port, *.domain:port or cidr:port the session's commands may reach through the egress proxy; implies --network egress (repeatable)")
	f.StringVar(&o.workdir, "workdir", "", "workdir, where the workspace is (default /workspace)")
	f.StringVar(&o.user, "user", "", "uid:gid")
	f.Int64Var(&o.memoryMB, "memory", 0, "memory limit in MB")
	f.Float64Var(&o.cpus, "cpus", 0, "CPU limit")
	f.Int64Var(&o.workspaceMB, "workspace-mb", 0, "size of the workspace in MB")
	f.DurationVar(&o.timeout, "timeout", 0, "default timeout of each command")
	f.StringVar(&o.task, "task", "", "task ID label")
	f.StringArrayVar(&o.labels, "label", nil, "label K=V; repeatable")
	f.DurationVar(&idle, "idle", 0, "end the session after this long unused (default from the policy)")
	f.DurationVar(&age, "lifetime", 0, "end the session this long after it started (default from the policy)")
	f.StringArrayVar(&keepalive, "keepalive", nil, "the container's main process, one argument per flag (default from the policy by image)")
	f.BoolVar(&asJSON, "json", false, "print the session as JSON")
	return cmd
}

func newSessionExecCmd(a *app) *cobra.Command {
	var (
		env     []string
		workdir string
		timeout time.Duration
		stdin   bool
		detach  bool
		limit   int64
	)
	cmd := &cobra.Command{
		Use:   "exec SESSION -- COMMAND [ARG...]",
		Short: "Run a command in a session; stream its output and exit with its code",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			x := api.ExecRequest{Command: args[1:], Workdir: workdir, OutputLimitBytes: limit}
			if limit < 0 {
				return &ExitError{Code: exitUsage, Message: "--output-limit must be positive"}
			}
			if timeout > 0 {
				x.TimeoutSeconds = int(math.Ceil(timeout.Seconds()))
			}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					v = a.getenv(k)
				}
				if k == "" {
					return &ExitError{Code: exitPlatform, Message: fmt.Sprintf("--env %q: want K=V or K", kv)}
				}
				if x.Env == nil {
					x.Env = map[string]string{}
				}
				x.Env[k] = v
			}
			if stdin {
				data, err := io.ReadAll(io.LimitReader(a.stdin, maxStdinBytes+1))
				if err != nil || len(data) > maxStdinBytes {
					return &ExitError{Code: exitPlatform, Message: fmt.Sprintf("stdin: unreadable or larger than %d bytes", maxStdinBytes)}
				}
				x.Stdin = string(data)
			}
			c, err := a.newClient()
			if err != nil {
				return &ExitError{Code: exitPlatform, Message: err.Error()}
			}
			run, err := c.Exec(cmd.Context(), args[0], x, 0)
			if err != nil {
				return submitError(a, err)
			}
			if detach {
				_, err := fmt.Fprintln(a.stdout, run.ID)
				return err
			}
			return followRun(cmd.Context(), a, c, run, false)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable K=V (or K to take it from here); repeatable")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory (relative: under the session's)")
	f.DurationVar(&timeout, "timeout", 0, "timeout of the command (default the session's)")
	f.Int64Var(&limit, "output-limit", 0, "bytes of stdout and of stderr kept, each (default and maximum from the policy)")
	f.BoolVarP(&stdin, "interactive", "i", false, "send this process's stdin to the command")
	f.BoolVarP(&detach, "detach", "d", false, "print the run ID and return at once")
	return cmd
}

func newSessionLsCmd(a *app) *cobra.Command {
	var state string
	var out *outputFormat
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sessions, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			list, err := c.Sessions(cmd.Context(), sandgate.SessionState(state), 0)
			if err != nil {
				return clientError(a, err)
			}
			if out.JSON() {
				return writeJSON(a, list)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tREASON\tRUNS\tPRINCIPAL\tTEAM\tCREATED\tIMAGE")
			for _, s := range list.Sessions {
				reason := string(s.EndReason)
				if reason == "" {
					reason = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.ID, s.State, reason, s.Runs, s.Principal, s.Team,
					s.CreatedAt.Local().Format(time.DateTime), s.Spec.Image)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "open or ended")
	out = bindOutput(cmd)
	return cmd
}

func newSessionRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "rm SESSION...",
		Short: "End sessions: their containers and workspaces are removed",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			for _, id := range args {
				ss, err := c.DeleteSession(cmd.Context(), id)
				if err != nil {
					return clientError(a, err)
				}
				fmt.Fprintf(a.stdout, "%s %s\n", ss.ID, ss.State)
			}
			return nil
		},
	}
}
