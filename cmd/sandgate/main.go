// Command sandgate is the sandgate gateway, its CLI client and its admin
// tools in one binary.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
)

func main() {
	// The in-sandbox agent (hidden): it runs inside a container as the
	// sandbox user, reads nothing but its stdin and needs no configuration.
	if len(os.Args) == 2 && os.Args[1] == agentCommand {
		os.Exit(runAgent())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		os.Exit(exitCode(err, os.Stderr))
	}
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

// run builds the command tree and executes args. Tests call it directly.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	return runWithApp(ctx, &app{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}, args)
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

// exitError makes a command exit with a given code after printing Message
// (when not empty).
type exitError struct {
	Code    int
	Message string
}

func (e *exitError) Error() string { return e.Message }

// exitCode prints err and returns the process exit code for it.
func exitCode(err error, stderr io.Writer) int {
	if e, ok := err.(*exitError); ok {
		if e.Message != "" {
			fmt.Fprintln(stderr, "sandgate:", e.Message)
		}
		return e.Code
	}
	fmt.Fprintln(stderr, "sandgate:", err)
	return 1
}
