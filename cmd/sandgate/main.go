// Command sandgate is the sandgate gateway, its CLI client and its admin
// tools in one binary; package cli holds them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandgate/sandgate/cmd/sandgate/cli"
)

func main() {
	// The in-sandbox agent (hidden): it runs inside a container as the
	// sandbox user, with no signal handling of sandgate's.
	if len(os.Args) == 2 && os.Args[1] == cli.AgentCommand {
		os.Exit(cli.RunAgent(os.Stdin, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], cli.Env{Getenv: os.Getenv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	if err != nil {
		os.Exit(cli.ExitCode(err, os.Stderr))
	}
}
