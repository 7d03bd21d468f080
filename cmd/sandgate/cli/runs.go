package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// newRunsCmd builds `sandgate runs list|get|cancel|logs`.
func newRunsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, inspect, follow and cancel runs on the gateway",
		Long: `List, inspect, follow and cancel runs (SANDGATE_URL, token from SANDGATE_TOKEN).
A submitter sees its own team's runs; admins and auditors see every team's.`,
	}
	cmd.AddCommand(newRunsListCmd(a), newRunsGetCmd(a), newRunsCancelCmd(a), newRunsLogsCmd(a), newRunsArtifactsCmd(a))
	return cmd
}

// clientError turns an API or transport error into a command error.
func clientError(a *app, err error) error {
	var apiErr *sandgate.Error
	if errors.As(err, &apiErr) {
		return &ExitError{Code: 1, Message: apiMessage(apiErr)}
	}
	return &ExitError{Code: 1, Message: fmt.Sprintf("cannot reach the gateway at %s: %v", a.cfg.URL, err)}
}

func newRunsListCmd(a *app) *cobra.Command {
	var o client.ListOptions
	var state, outcome, since, until string
	var out *outputFormat
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Example: `  sandgate runs list --state running
  sandgate runs list --outcome failed --since 24h -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.State, o.Outcome = sandgate.State(state), sandgate.Outcome(outcome)
			var err error
			if o.Since, err = parseWhen(since); err != nil {
				return &ExitError{Code: exitUsage, Message: fmt.Sprintf("--since: %v", err)}
			}
			if o.Until, err = parseWhen(until); err != nil {
				return &ExitError{Code: exitUsage, Message: fmt.Sprintf("--until: %v", err)}
			}
			c, err := a.newClient()
			if err != nil {
				return &ExitError{Code: exitUsage, Message: err.Error()}
			}
			list, err := c.Runs(cmd.Context(), o)
			if err != nil {
				return clientError(a, err)
			}
			if out.JSON() {
				return writeJSON(a, list)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tOUTCOME\tEXIT\tPRINCIPAL\tTEAM\tCREATED\tCOMMAND")
			for _, r := range list.Runs {
				outcome, exit := "-", "-"
				if r.Outcome != nil {
					outcome = string(*r.Outcome)
				}
				if r.ExitCode != nil {
					exit = strconv.Itoa(*r.ExitCode)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, outcome, exit, r.Principal, r.Team,
					r.CreatedAt.Local().Format(time.DateTime), shorten(strings.Join(r.Spec.Command, " "), 40))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if list.NextCursor != nil {
				fmt.Fprintf(a.stderr, "more runs: sandgate runs list --cursor %s\n", *list.NextCursor)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "pending, creating, running or finished")
	f.StringVar(&outcome, "outcome", "", "succeeded, failed, oom_killed, timed_out, cancelled, error or lost")
	f.StringVar(&o.SessionID, "session", "", "session ID")
	f.StringVar(&o.TaskID, "task", "", "task ID")
	f.StringVar(&since, "since", "", "created at or after: RFC 3339 time, or a duration ago such as 24h")
	f.StringVar(&until, "until", "", "created before: RFC 3339 time, or a duration ago")
	f.IntVar(&o.Limit, "limit", 50, "runs per page (1 to 1000)")
	f.StringVar(&o.Cursor, "cursor", "", "page cursor from a previous list")
	out = bindOutput(cmd)
	return cmd
}

// parseWhen parses an RFC 3339 time or a duration before now.
func parseWhen(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", v)
	}
	return t, nil
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func writeJSON(a *app, v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newRunsGetCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "get RUN_ID",
		Short: "Print a run as JSON: state, outcome, exit code, timings, output",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			run, err := c.Run(cmd.Context(), args[0])
			if err != nil {
				return clientError(a, err)
			}
			return writeJSON(a, run)
		},
	}
}

func newRunsCancelCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel RUN_ID",
		Short: "Cancel a run: SIGTERM, 10 s grace, SIGKILL, remove",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			run, err := c.Cancel(cmd.Context(), args[0])
			if err != nil {
				return clientError(a, err)
			}
			if run.Finished() && run.Outcome != nil {
				_, err = fmt.Fprintf(a.stdout, "run %s: %s\n", run.ID, *run.Outcome)
			} else {
				_, err = fmt.Fprintf(a.stdout, "run %s: stopping\n", run.ID)
			}
			return err
		},
	}
}

func newRunsLogsCmd(a *app) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs RUN_ID",
		Short: "Print a run's output (stdout to stdout, stderr to stderr) and exit with the run's code",
		Long: `Print a run's output, stdout to stdout and stderr to stderr; with -f, follow
it live until the run ends. Once the run has ended, exit as sandgate run
does: with the run's own exit code, 124 timed out, 125 sandgate could not
run it, 130 cancelled, 137 killed for memory. A run that is still going
(without -f) exits 0 after the output so far.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return &ExitError{Code: exitUsage, Message: err.Error()}
			}
			var exit *api.ExitData
			err = c.Logs(cmd.Context(), args[0], follow, func(ev api.LogEvent) error {
				switch ev.Event {
				case api.EventStdout, api.EventStderr:
				case api.EventExit:
					x, err := ev.Exit()
					if err != nil {
						return err
					}
					exit = &x
					return client.ErrStopStream
				default:
					return nil
				}
				b, err := ev.Chunk()
				if err != nil {
					return err
				}
				w := a.stdout
				if ev.Event == api.EventStderr {
					w = a.stderr
				}
				_, err = w.Write(b)
				return err
			})
			if err != nil {
				return clientError(a, err)
			}
			if exit == nil {
				return nil
			}
			var limit int64
			if run, err := c.Run(cmd.Context(), args[0]); err == nil {
				limit = run.Spec.OutputLimitBytes
			}
			return exitFor(a, args[0], limit, *exit)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream live until the run ends")
	return cmd
}
