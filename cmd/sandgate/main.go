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
	// The first interrupt (or SIGTERM) ends ctx; the later interrupts
	// are told to the command, which says what it is still waiting for.
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	later := make(chan os.Signal, 4)
	go func() {
		<-sigs
		cancel()
		for s := range sigs {
			select {
			case later <- s:
			default:
			}
		}
	}()
	err := cli.Run(ctx, os.Args[1:], cli.Env{Getenv: os.Getenv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Interrupts: later})
	signal.Stop(sigs)
	cancel()
	if err != nil {
		os.Exit(cli.ExitCode(err, os.Stderr))
	}
}
