// Package cli is the sandgate command line: the gateway (serve), its
// client commands and its admin tools. Package main calls Run with the
// process's environment; tests call it with one of their own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
)

// Env is what a command line runs with: its environment and its streams.
type Env struct {
	// Getenv looks up an environment variable ("" when unset); the
	// process's is os.Getenv.
	Getenv func(string) string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Listening, when set, is told the address serve listens on and the
	// development token it made, if any, once it accepts connections:
	// tests start serve on port 0 and learn where it is.
	Listening func(addr, devToken string)
}

// Run executes the command line args (without the program's name) until
// it ends or ctx is done. The error, if any, gives the process's exit
// code through ExitCode.
func Run(ctx context.Context, args []string, env Env) error {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	return runWithApp(ctx, &app{getenv: env.Getenv, stdin: env.Stdin, stdout: env.Stdout, stderr: env.Stderr, onListen: env.Listening}, args)
}

// app is what every subcommand shares: the environment, the streams and the
// configuration read from both.
type app struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	cfg    Config
	// onListen, when set (by tests), is told the address serve listens on
	// and the development token, if one was made.
	onListen func(addr, devToken string)
}

// run is Run with the environment spelt out, for this package's tests.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	return Run(ctx, args, Env{Getenv: getenv, Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// runWithApp executes args with a's environment and streams.
func runWithApp(ctx context.Context, a *app, args []string) error {
	getenv, stdin, stdout, stderr := a.getenv, a.stdin, a.stdout, a.stderr
	root := &cobra.Command{
		Use:           "sandgate",
		Short:         "Policy-gated, audited container runs",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.cfg.loadFlags(cmd)
		},
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	a.cfg = defaultConfig(getenv)
	a.cfg.bindPersistentFlags(root)
	root.AddCommand(
		newServeCmd(a),
		newRunCmd(a),
		newRunsCmd(a),
		newSessionCmd(a),
		newPolicyCmd(a),
		newAuditCmd(a),
		newMigrateCmd(a),
		newImageCmd(a),
		newSandboxCmd(a),
		newVolumeCmd(a),
		&cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				_, err := fmt.Fprintf(stdout, "sandgate %s\n", sandgate.Version)
				return err
			},
		},
	)
	return root.ExecuteContext(ctx)
}

// ExitError makes the process exit with Code after printing Message
// (when not empty).
type ExitError struct {
	Code    int
	Message string
}

func (e *ExitError) Error() string { return e.Message }

// ExitCode prints err to stderr and returns the process's exit code for
// it: an *ExitError's code, 1 for any other error.
func ExitCode(err error, stderr io.Writer) int {
	var e *ExitError
	if errors.As(err, &e) {
		if e.Message != "" {
			fmt.Fprintln(stderr, "sandgate:", e.Message)
		}
		return e.Code
	}
	fmt.Fprintln(stderr, "sandgate:", err)
	return 1
}
