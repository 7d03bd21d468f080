// Package cli is the sandgate command line: the gateway (serve), its
// client commands and its admin tools. Package main calls Run with the
// process's environment; tests call it with one of their own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
	// Interrupts, when set, receives the interrupts (Ctrl-C) that come
	// after the first, which ends the context: a command that is still
	// waiting for something to stop says so on each.
	Interrupts <-chan os.Signal
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
	return runWithApp(ctx, &app{getenv: env.Getenv, stdin: env.Stdin, stdout: env.Stdout, stderr: env.Stderr, onListen: env.Listening, interrupts: env.Interrupts}, args)
}

// app is what every subcommand shares: the environment, the streams and the
// configuration read from both.
type app struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	cfg    config
	// onListen, when set (by tests), is told the address serve listens on
	// and the development token, if one was made.
	onListen func(addr, devToken string)
	// interrupts are the interrupts after the first (nil: none are told).
	interrupts <-chan os.Signal
	// checks are the components each command validates before it runs;
	// flagSets each component's flags, which its commands share.
	checks   map[*cobra.Command][]component
	flagSets map[component]*pflag.FlagSet
	// running is set once a command's own work has begun: an error
	// before it is the command line's (a usage error).
	running bool
}

// run is Run with the environment spelt out, for this package's tests.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	return Run(ctx, args, Env{Getenv: getenv, Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// exitUsage is the exit status of a command line sandgate cannot run: an
// unknown command or flag, a wrong number of arguments, a setting that
// does not parse. It is the status `sandgate run` gives for "could not
// run it" (as docker run does).
const exitUsage = exitPlatform

// runWithApp executes args with a's environment and streams.
func runWithApp(ctx context.Context, a *app, args []string) error {
	root := a.commands()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	var exit *ExitError
	if err == nil || a.running || errors.As(err, &exit) {
		return err
	}
	return &ExitError{Code: exitUsage, Message: fmt.Sprintf("%v\nRun '%s --help' for usage.", err, cmd.CommandPath())}
}

// commands builds the command tree, each command with the flags of the
// settings it reads.
func (a *app) commands() *cobra.Command {
	root := &cobra.Command{
		Use:   "sandgate",
		Short: "Policy-gated, audited container runs",
		Long: `Policy-gated, audited container runs: the gateway (serve), its client
commands and its admin tools. Each command takes the flags of the settings it
reads; every flag mirrors an environment variable (SANDGATE_*).

Exit status: as each command's help says; 125 when the command line cannot
be run (an unknown command or flag, wrong arguments, a setting that does not
parse), 1 for any other error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateAll(a.checks[cmd]...); err != nil {
				return &ExitError{Code: exitUsage, Message: err.Error()}
			}
			return nil
		},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	a.cfg = readConfig(a.getenv)
	a.checks, a.flagSets = map[*cobra.Command][]component{}, map[component]*pflag.FlagSet{}
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
		newApprovalsCmd(a),
		newMCPCmd(a),
		newSecretsCmd(a),
		&cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				_, err := fmt.Fprintf(a.stdout, "sandgate %s\n", sandgate.Version)
				return err
			},
		},
	)
	a.declare(root, a.settingsOf())
	return root
}

// settingsOf says which settings each command reads. A path names a
// command and every command under it; the longest path naming a command
// decides. Client commands read the client's settings only; commands on
// the database read its DSN, not the gateway's settings.
func (a *app) settingsOf() map[string][]use {
	c := &a.cfg
	client := use{c: &c.clientConfig, flags: []string{"url"}}
	dsn := use{c: &c.databaseConfig, flags: []string{"database-url"}}
	trail, node, docker := use{c: &c.trailConfig}, use{c: &c.nodeConfig}, use{c: &c.executorConfig}
	var server []use
	for _, comp := range c.server() {
		server = append(server, use{c: comp, all: true})
	}
	return map[string][]use{
		"serve":     server,
		"run":       {client},
		"runs":      {client},
		"session":   {client},
		"volume":    {client},
		"mcp":       {client},
		"secrets":   {client},
		"approvals": {client},
		// On the database, with the key file; and no settings at all.
		"secrets re-encrypt": {dsn, {c: &c.secretsConfig, all: true}},
		"secrets new-key":    nil,
		// The bundle is a directory, or the embedded one: no gateway.
		"policy":        {{c: &c.policyConfig, flags: []string{"policy-dir"}}},
		"policy verify": {{c: &c.policyConfig, flags: []string{"policy-dir", "policy-verify-keys"}}},
		"policy eval":   {{c: &c.policyConfig, all: true}},
		"policy replay": {client},
		// The trail, directly on the database; the operator's commands
		// record what they do on a chain of this node's. Its readers go
		// through the gateway, or the database with --database-url.
		"audit":                {dsn, trail},
		"audit query":          {client, dsn, trail},
		"audit export":         {client, dsn, trail},
		"audit receipt":        {client, dsn, trail},
		"audit rotate-key":     {dsn, trail, node},
		"audit archive":        {dsn, trail, node},
		"audit purge":          {dsn, trail, node},
		"audit retention":      {dsn, trail, node},
		"audit public-key":     {trail},
		"audit verify-receipt": {trail, node}, // without flags, the configuration's anchors
		"audit witness":        {{c: &c.clientConfig}},
		"migrate":              {dsn},
		"image":                {docker, node},
		"image packages":       {client}, // through the gateway, which asks its daemon
		"sandbox":              {docker, node},
		"version":              nil,

		// Which keys verify trusts is the configuration's: the trail's
		// trust settings and this host's key and node (trustAnchors).
		"audit verify": {dsn, trail, node},
		// A node's key endorsed by the root: the key and node of this host.
		"audit endorse-key": {trail, node},
	}
}

// declare binds each command under root to the settings the longest
// path in table that names it gives; a command no path names is a
// mistake caught by the tests.
func (a *app) declare(root *cobra.Command, table map[string][]use) {
	for _, cmd := range root.Commands() {
		if cmd.HasSubCommands() {
			a.declare(cmd, table)
			guardGroup(cmd)
			continue
		}
		path := strings.TrimPrefix(cmd.CommandPath(), root.Root().Name()+" ")
		best, found := "", false
		for p := range table {
			if (path == p || strings.HasPrefix(path, p+" ")) && len(p) >= len(best) {
				best, found = p, true
			}
		}
		if !found {
			panic("sandgate " + path + ": no settings declared (settingsOf)")
		}
		a.bind(cmd, table[best])
		if run := cmd.RunE; run != nil {
			cmd.RunE = func(cmd *cobra.Command, args []string) error {
				a.running = true
				return run(cmd, args)
			}
		}
	}
}

// guardGroup makes a command that only groups others refuse an argument
// that names none of them (a usage error), and print its help otherwise.
func guardGroup(cmd *cobra.Command) {
	if cmd.Runnable() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}
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
