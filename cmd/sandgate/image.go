package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/executor"
)

// newImageCmd builds `sandgate image build|load`: the sandbox image is
// built and other images are loaded without any registry.
func newImageCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the sandbox image or load images from a tarball",
	}

	var opts executor.BuildOptions
	var verbose bool
	build := &cobra.Command{
		Use:   "build",
		Short: "Build " + executor.SandboxImage + " FROM scratch with the host's static busybox",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ex, err := a.adminExecutor()
			if err != nil {
				return err
			}
			defer ex.Close()
			if verbose {
				opts.Progress = a.stderr
			}
			id, err := ex.BuildSandboxImage(cmd.Context(), opts)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "%s %s\n", tagOr(opts.Tag), id)
			return err
		},
	}
	build.Flags().StringVar(&opts.Busybox, "busybox", "/bin/busybox", "statically linked busybox to put in the image")
	build.Flags().StringVar(&opts.Tag, "tag", executor.SandboxImage, "image name")
	build.Flags().BoolVarP(&verbose, "verbose", "v", false, "show the daemon's build output")

	load := &cobra.Command{
		Use:   "load FILE",
		Short: "Load the images of a `docker save` tarball (FILE may be - for stdin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in io.Reader = a.stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			ex, err := a.adminExecutor()
			if err != nil {
				return err
			}
			defer ex.Close()
			loaded, err := ex.LoadImage(cmd.Context(), in)
			if err != nil {
				return err
			}
			for _, ref := range loaded {
				if _, err := fmt.Fprintln(a.stdout, "loaded", ref); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.AddCommand(build, load)
	return cmd
}

func tagOr(tag string) string {
	if tag == "" {
		return executor.SandboxImage
	}
	return tag
}

// adminExecutor returns an executor for the admin commands: the configured
// daemon and node, and no audit sink (these commands print what they do).
func (a *app) adminExecutor() (*executor.Executor, error) {
	return executor.New(executor.Config{
		DockerHost:    a.cfg.DockerHost,
		Node:          a.cfg.Node,
		MaxConcurrent: a.cfg.MaxConcurrent,
	}, nil)
}
