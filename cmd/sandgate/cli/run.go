package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// Exit codes of `sandgate run` besides the container's own. They follow
// the conventions of `docker run` and timeout(1).
const (
	exitTimedOut  = 124 // the run hit its timeout
	exitPlatform  = 125 // sandgate could not run it: bad request, gateway or Docker trouble
	exitDenied    = 126 // policy denied the run
	exitCancelled = 130 // the run was cancelled (Ctrl-C or DELETE)
	exitOOM       = 137 // the container was killed for memory, when it left no code
)

// streamAttempts is how often `sandgate run` (re)connects to a run's log
// stream before it waits for the end without output; the n-th retry waits
// n times streamRetryWait.
const streamAttempts = 3

var streamRetryWait = time.Second

// maxStdinBytes caps what --stdin reads: the spec must fit in 1 MiB.
const maxStdinBytes = 768 << 10

// cancelGrace is how long `sandgate run` keeps streaming after an
// interrupt, while the gateway stops the container (10 s grace + removal).
const cancelGrace = 30 * time.Second

type runOptions struct {
	image, language        string
	network, workdir, user string
	session, task, idemKey string
	env, mounts, labels    []string
	memoryMB, outputLimit  int64
	cpus                   float64
	timeout                time.Duration
	detach, wait, stdin    bool
	// workspace is a local directory sent as the run's workspace;
	// artifacts the patterns collected after the command; download where
	// they are written once the run has ended.
	workspace, download string
	artifacts           []string
	workspaceMB         int64
	// egress are the destinations of a run with network egress; --egress
	// alone sets that network.
	egress []string
}

// newRunCmd builds `sandgate run`.
func newRunCmd(a *app) *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [flags] [--] CMD [ARG...]",
		Short: "Submit a run, stream its output live and exit with its exit code",
		Long: `Submit a run to the gateway (SANDGATE_URL, token from SANDGATE_TOKEN),
stream its stdout and stderr live, and exit with the container's exit code.

Exit codes besides the container's own:
  124  the run timed out
  125  sandgate could not run it (a wrong command line, a bad request, the gateway,
       audit or Docker unavailable)
  126  policy denied the run (the violations are printed)
  130  the run was cancelled
  137  the container was killed for exceeding its memory limit

Ctrl-C cancels the run (SIGTERM, 10 s grace, SIGKILL) and waits for its end.`,
		Example: `  sandgate run -- sh -c 'echo hello'
  sandgate run --image sandgate/python:3 --workspace . --artifact 'out/**' --download ./out -- python3 main.py
  sandgate run --language toolchain -- sh -c 'git --version && rg --version'
  sandgate run --env TOKEN --mount /srv/work/proj:/workspace:ro -- make test
  sandgate run --detach --timeout 10m -- ./long-job.sh
  sandgate run --egress pypi.org:443 --egress files.pythonhosted.org:443 -- pip download requests`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd.Context(), a, o, args)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.StringVar(&o.image, "image", "", "image to run (default: the policy's default image)")
	f.StringVar(&o.language, "language", "", "run in the image the policy names for this language (shell, python, node, toolchain) instead of --image")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable K=V, or K to pass the local value (repeatable)")
	f.StringArrayVarP(&o.mounts, "mount", "m", nil, "bind mount SRC:DST[:ro] of a host directory under the mount roots (repeatable)")
	f.StringVar(&o.network, "network", "", "network: none, bridge or egress (default: the policy's default)")
	f.StringArrayVar(&o.egress, "egress", nil, "destination host:port, *.domain:port or cidr:port the run may reach through the egress proxy; implies --network egress (repeatable)")
	f.Int64Var(&o.memoryMB, "memory", 0, "memory limit in MB")
	f.Float64Var(&o.cpus, "cpus", 0, "CPU limit, such as 0.5 or 2")
	f.DurationVar(&o.timeout, "timeout", 0, "run timeout, such as 30s or 10m")
	f.Int64Var(&o.outputLimit, "output-limit", 0, "bytes of stdout and of stderr kept, each (output_limit_bytes; default and maximum from the policy)")
	f.StringVarP(&o.workdir, "workdir", "w", "", "working directory in the container")
	f.StringVarP(&o.user, "user", "u", "", "uid[:gid] to run as (non-root)")
	f.StringVar(&o.session, "session", "", "session ID to label the run with")
	f.StringVar(&o.task, "task", "", "task ID to label the run with")
	f.StringArrayVarP(&o.labels, "label", "l", nil, "label K=V (repeatable)")
	f.StringVar(&o.idemKey, "idempotency-key", "", "retries with the same key return the same run")
	f.BoolVarP(&o.stdin, "stdin", "i", false, "send standard input to the run (up to 768 KiB)")
	f.BoolVarP(&o.detach, "detach", "d", false, "print the run ID and return at once")
	f.BoolVar(&o.wait, "wait", false, "do not stream: wait for the end, then print the captured output")
	f.StringVar(&o.workspace, "workspace", "", "send this directory as the run's workspace, unpacked into its workdir (.sandgateignore leaves paths out)")
	f.Int64Var(&o.workspaceMB, "workspace-mb", 0, "size of the run's workspace in MB")
	f.StringArrayVar(&o.artifacts, "artifact", nil, "path or glob, relative to the workdir, to collect when the command ends (repeatable)")
	f.StringVar(&o.download, "download", "", "download the run's artifacts into this directory once it ends")
	return cmd
}

// buildSpec turns the flags and command into a run spec.
func buildSpec(a *app, o runOptions, args []string) (sandgate.RunSpec, error) {
	spec := sandgate.RunSpec{
		Image: o.image, Language: o.language, Command: args, Network: o.network, Workdir: o.workdir, User: o.user,
		SessionID: o.session, TaskID: o.task,
		Resources: sandgate.Resources{MemoryMB: o.memoryMB, CPUs: o.cpus, WorkspaceMB: o.workspaceMB},
		Artifacts: o.artifacts, Egress: o.egress,
	}
	if len(o.egress) > 0 && o.network == "" {
		spec.Network = sandgate.NetworkEgress
	}
	if o.memoryMB < 0 {
		return spec, fmt.Errorf("--memory must be positive")
	}
	if o.cpus < 0 || math.IsNaN(o.cpus) {
		return spec, fmt.Errorf("--cpus must be positive")
	}
	if o.timeout < 0 {
		return spec, fmt.Errorf("--timeout must be positive")
	}
	if o.outputLimit < 0 {
		return spec, fmt.Errorf("--output-limit must be positive")
	}
	spec.OutputLimitBytes = o.outputLimit
	if o.timeout > 0 {
		spec.TimeoutSeconds = int(math.Ceil(o.timeout.Seconds()))
	}
	for _, kv := range o.env {
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			v = a.getenv(k)
		}
		if k == "" {
			return spec, fmt.Errorf("--env %q: want K=V or K", kv)
		}
		spec.Env[k] = v
	}
	for _, kv := range o.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return spec, fmt.Errorf("--label %q: want K=V", kv)
		}
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[k] = v
	}
	for _, m := range o.mounts {
		mount, err := parseMount(m)
		if err != nil {
			return spec, err
		}
		spec.Mounts = append(spec.Mounts, mount)
	}
	if o.stdin {
		data, err := io.ReadAll(io.LimitReader(a.stdin, maxStdinBytes+1))
		if err != nil {
			return spec, fmt.Errorf("read stdin: %w", err)
		}
		if len(data) > maxStdinBytes {
			return spec, fmt.Errorf("stdin is larger than %d bytes; mount a directory instead", maxStdinBytes)
		}
		spec.Stdin = string(data)
	}
	return spec, nil
}

// parseMount parses SRC:DST[:ro|rw]. A relative SRC is made absolute
// against the working directory, as the gateway needs host paths.
func parseMount(s string) (sandgate.Mount, error) {
	parts := strings.Split(s, ":")
	m := sandgate.Mount{}
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
		m.ReadOnly = parts[2] == "ro"
	default:
		return m, fmt.Errorf("--mount %q: want SRC:DST[:ro]", s)
	}
	if parts[0] == "" || parts[1] == "" {
		return m, fmt.Errorf("--mount %q: want SRC:DST[:ro]", s)
	}
	src, err := filepath.Abs(parts[0])
	if err != nil {
		return m, fmt.Errorf("--mount %q: %w", s, err)
	}
	m.Source, m.Target = src, parts[1]
	return m, nil
}

// newClient returns the gateway client from SANDGATE_URL and
// SANDGATE_TOKEN.
func (a *app) newClient() (*client.Client, error) {
	if a.cfg.Token == "" {
		return nil, errors.New("SANDGATE_TOKEN is not set: export the bearer token the gateway gave you (make run prints a development one)")
	}
	return client.New(a.cfg.URL, a.cfg.Token)
}

func runRun(ctx context.Context, a *app, o runOptions, args []string) error {
	spec, err := buildSpec(a, o, args)
	if err != nil {
		return &ExitError{Code: exitPlatform, Message: err.Error()}
	}
	c, err := a.newClient()
	if err != nil {
		return &ExitError{Code: exitPlatform, Message: err.Error()}
	}
	opts := client.SubmitOptions{IdempotencyKey: o.idemKey}
	if o.wait {
		opts.Wait = time.Hour // the gateway caps it at its MaxWait
	}
	if o.download != "" && len(o.artifacts) == 0 {
		return &ExitError{Code: exitPlatform, Message: "--download needs --artifact: name what to collect"}
	}
	if o.workspace != "" {
		if st, err := os.Stat(o.workspace); err != nil || !st.IsDir() {
			return &ExitError{Code: exitPlatform, Message: fmt.Sprintf("--workspace %s: not a directory", o.workspace)}
		}
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(packWorkspace(o.workspace, pw, func(rel, why string) {
				fmt.Fprintf(a.stderr, "sandgate: workspace: left out %s: %s\n", rel, why)
			}))
		}()
		defer pr.Close()
		opts.Workspace = pr
	}
	run, err := c.Submit(ctx, spec, opts)
	if err != nil {
		return submitError(a, err)
	}
	if o.download != "" && !o.detach {
		// The artifacts are fetched once the run has ended, whatever its
		// outcome; the process then exits with the run's code.
		defer func() {
			if err := downloadArtifacts(context.WithoutCancel(ctx), a, c, run.ID, o.download); err != nil {
				fmt.Fprintf(a.stderr, "sandgate: download artifacts: %v\n", err)
			}
		}()
	}
	for _, w := range run.Warnings {
		fmt.Fprintf(a.stderr, "sandgate: warning: %s\n", w)
	}
	if o.detach {
		_, err := fmt.Fprintln(a.stdout, run.ID)
		return err
	}
	return followRun(ctx, a, c, run, o.wait)
}

// followRun streams a started run's output live (stdout to stdout, stderr
// to stderr), or with wait prints it once the run has ended, and returns
// the exit the run ended with; Ctrl-C cancels the run. A command in a
// session is followed the same way.
func followRun(ctx context.Context, a *app, c *client.Client, run api.RunView, wait bool) error {
	// Ctrl-C cancels the run; the stream then carries on until the exit
	// event, or cancelGrace after the interrupt.
	streamCtx, stopStream := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStream()
	finished := make(chan struct{})
	defer close(finished)
	go cancelOnInterrupt(ctx, a, c, run.ID, finished, stopStream)

	if wait {
		final, err := waitFinished(streamCtx, c, run)
		if err != nil {
			return &ExitError{Code: exitPlatform, Message: err.Error()}
		}
		if err := writeOutput(a.stdout, final.Stdout); err != nil {
			return err
		}
		if err := writeOutput(a.stderr, final.Stderr); err != nil {
			return err
		}
		return exitFor(a, final.ID, final.Spec.OutputLimitBytes, exitFromRun(final))
	}

	var exit *api.ExitData
	lastID := ""
	onEvent := func(ev api.LogEvent) error {
		if ev.ID != "" {
			lastID = ev.ID
		}
		switch ev.Event {
		case api.EventStdout, api.EventStderr:
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
		case api.EventExit:
			x, err := ev.Exit()
			if err != nil {
				return err
			}
			exit = &x
			return client.ErrStopStream
		}
		return nil
	}
	// A broken stream is resumed where it stopped (Last-Event-ID), a few
	// times; after that the end is read from the run itself.
	for attempt := 0; exit == nil && attempt < streamAttempts && streamCtx.Err() == nil; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(attempt) * streamRetryWait):
			case <-streamCtx.Done():
			}
		}
		err := c.LogsFrom(streamCtx, run.ID, true, lastID, onEvent)
		if exit != nil || streamCtx.Err() != nil {
			break
		}
		if refused(err) {
			break
		}
		if err == nil {
			err = errors.New("it ended before the run did")
		}
		fmt.Fprintf(a.stderr, "sandgate: output stream interrupted (%v); reconnecting\n", err)
	}
	if exit == nil {
		fmt.Fprintf(a.stderr, "sandgate: waiting for run %s to end\n", run.ID)
		final, werr := waitFinished(streamCtx, c, run)
		if werr != nil {
			return &ExitError{Code: exitPlatform, Message: werr.Error()}
		}
		x := exitFromRun(final)
		exit = &x
	}
	return exitFor(a, run.ID, run.Spec.OutputLimitBytes, *exit)
}

// cancelOnInterrupt cancels run id once ctx ends (the first Ctrl-C),
// unless finished is closed first, and then waits up to cancelGrace for
// the run's end before it stops the stream. Every later Ctrl-C is
// answered with what it is waiting for.
func cancelOnInterrupt(ctx context.Context, a *app, c *client.Client, id string, finished <-chan struct{}, stopStream func()) {
	select {
	case <-ctx.Done():
		// finished is closed before the caller's context ends on a
		// normal return: only a real interrupt gets past here.
		select {
		case <-finished:
			return
		default:
		}
	case <-finished:
		return
	}
	fmt.Fprintf(a.stderr, "sandgate: cancelling run %s\n", id)
	deadline := time.Now().Add(cancelGrace)
	grace := time.NewTimer(cancelGrace)
	defer grace.Stop()
	go func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
		defer cancel()
		if _, err := c.Cancel(cctx, id); err != nil && sandgate.ErrorCodeOf(err) != sandgate.CodeConflict {
			fmt.Fprintf(a.stderr, "sandgate: cancel: %v\n", err)
		}
	}()
	for {
		select {
		case <-finished:
			return
		case <-grace.C:
			stopStream()
			return
		case <-a.interrupts:
			fmt.Fprintf(a.stderr, "sandgate: still waiting for run %s to stop: the gateway sends SIGTERM, waits 10 s, then SIGKILL and removes the container "+
				"(giving up in %s); the run is cancelled whether or not you wait\n", id, time.Until(deadline).Round(time.Second))
		}
	}
}

// submitError explains a refused submission and picks its exit code.
func submitError(a *app, err error) error {
	var apiErr *sandgate.Error
	if !errors.As(err, &apiErr) {
		return &ExitError{Code: exitPlatform, Message: fmt.Sprintf("cannot reach the gateway at %s: %v", a.cfg.URL, err)}
	}
	if apiErr.Code == sandgate.CodePolicyDenied {
		var b strings.Builder
		fmt.Fprintf(&b, "run denied by policy")
		if d, derr := api.DecisionFromDetails(apiErr.Details); derr == nil {
			fmt.Fprintf(&b, " (decision %s, policy %s):", d.DecisionID, d.PolicyRevision)
			for _, v := range d.Violations {
				fmt.Fprintf(&b, "\n  - %s: %s", v.Rule, v.Message)
				if len(v.Controls) > 0 {
					fmt.Fprintf(&b, " [%s]", strings.Join(v.Controls, ", "))
				}
			}
		} else {
			fmt.Fprintf(&b, ": %s", apiErr.Message)
		}
		return &ExitError{Code: exitDenied, Message: b.String()}
	}
	return &ExitError{Code: exitPlatform, Message: apiMessage(apiErr)}
}

// apiMessage is a one-line explanation of the gateway's error answer.
func apiMessage(e *sandgate.Error) string {
	msg := fmt.Sprintf("%s: %s", e.Code, sandgate.ErrorMessageOf(e))
	if id := client.CorrelationID(e); id != "" {
		msg += " (correlation ID " + id + ")"
	}
	return msg
}

// refused reports whether err is the gateway's answer that the request
// itself is at fault (a 4xx status), which asking again would not change.
func refused(err error) bool {
	var se *sandgate.Error
	return errors.As(err, &se) && api.StatusOf(se.Code) < 500
}

// waitFinished polls the run until it has finished.
func waitFinished(ctx context.Context, c *client.Client, run api.RunView) (api.RunView, error) {
	for !run.Finished() {
		select {
		case <-ctx.Done():
			return run, fmt.Errorf("gave up waiting for run %s: %w", run.ID, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
		r, err := c.Run(ctx, run.ID)
		if err != nil {
			var apiErr *sandgate.Error
			if refused(err) && errors.As(err, &apiErr) {
				return run, fmt.Errorf("run %s: %s", run.ID, apiMessage(apiErr))
			}
			continue
		}
		run = r
	}
	return run, nil
}

func writeOutput(w io.Writer, o api.OutputView) error {
	b, err := o.Decode()
	if err != nil {
		return fmt.Errorf("decode output: %w", err)
	}
	_, err = w.Write(b)
	return err
}
