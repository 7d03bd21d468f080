package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	recipefiles "github.com/sandgate/sandgate/deploy/images"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/images"
)

// newImageCmd builds `sandgate image build|load|list|prune`: the sandbox
// image is built and other images are loaded without any registry.
func newImageCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the sandbox image, load images from a tarball, list and prune them",
	}

	var opts images.BuildOptions
	var ropts images.RecipeBuildOptions
	var verbose, list, asJSON bool
	build := &cobra.Command{
		Use:   "build [NAME]",
		Short: "Build " + images.SandboxImage + " FROM scratch with a static busybox, or a language image from Debian packages",
		Long: `Without NAME, build ` + images.SandboxImage + ` FROM scratch with a static
busybox: the host's when its wget survives -T (Debian's before 1.36.1-5 does
not), else busybox-static of Debian ` + images.DefaultBusyboxSuite + `, extracted with mmdebstrap.
With NAME, build the language image of that recipe
(deploy/images/NAME.yaml, embedded in the binary) from Debian packages with
mmdebstrap, which needs the Debian mirror (or --source naming a local one);
air-gapped sites load the images built elsewhere with 'sandgate image load'.
--list shows the recipes. docs/workspaces.md ("Language images") has the
recipe format.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				return a.listRecipes(asJSON)
			}
			ex, err := a.imageAdmin()
			if err != nil {
				return err
			}
			defer ex.Close()
			if verbose {
				opts.Progress = a.stderr
				ropts.Progress = a.stderr
			}
			if len(args) == 1 {
				return a.buildRecipe(cmd, ex, args[0], ropts, asJSON)
			}
			opts.Mmdebstrap, opts.Sources = ropts.Mmdebstrap, ropts.Sources
			id, err := ex.BuildSandboxImage(cmd.Context(), opts)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "%s %s\n", tagOr(opts.Tag), id)
			return err
		},
	}
	f := build.Flags()
	f.StringVar(&opts.Busybox, "busybox", "", "statically linked busybox to put in the sandbox image (default: the host's /bin/busybox when it passes the check, else Debian's busybox-static)")
	f.StringVar(&opts.Tag, "tag", images.SandboxImage, "the sandbox image's name")
	f.BoolVarP(&verbose, "verbose", "v", false, "show the daemon's or mmdebstrap's output")
	f.BoolVar(&list, "list", false, "list the language image recipes")
	f.BoolVar(&asJSON, "json", false, "print the result (or the recipes) as JSON")
	f.BoolVar(&ropts.Reuse, "reuse", false, "keep the image when one built from the same recipe is there")
	f.StringArrayVar(&ropts.Sources, "source", nil, "one-line apt source for mmdebstrap (\"deb URL SUITE main\"); repeatable; default deb.debian.org")
	f.Int64Var(&ropts.SourceDateEpoch, "source-date-epoch", envInt64(a.getenv, "SOURCE_DATE_EPOCH"), "creation time and newest file time (default $SOURCE_DATE_EPOCH, else the recipe's)")
	f.StringVar(&ropts.Mmdebstrap, "mmdebstrap", "mmdebstrap", "the mmdebstrap program")

	var signature string
	load := &cobra.Command{
		Use:   "load FILE [--signature PREFIX]",
		Short: "Load the images of a `docker save` tarball (FILE may be - for stdin), and its signature",
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
			ex, err := a.imageAdmin()
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
			if signature != "" {
				return a.storeSignature(cmd, ex, signature, loaded)
			}
			return nil
		},
	}
	load.Flags().StringVar(&signature, "signature", "", "PREFIX of the image's signature (PREFIX.payload, PREFIX.sig), kept in SANDGATE_IMAGE_SIGNATURE_DIR")
	cmd.AddCommand(build, load, newImageSignCmd(a), newImageListCmd(a), newImagePruneCmd(a), newImagePackagesCmd(a))
	return cmd
}

// newImageListCmd builds `sandgate image list`: the daemon's images with
// size, ID and the digest-pinned references a policy with require_digest
// admits.
func newImageListCmd(a *app) *cobra.Command {
	var opts images.ListOptions
	var out *outputFormat
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the daemon's images: names, ID, size, and the pinned references to use with require_digest",
		Long: `List the daemon's images, sandbox images first. PINNED is the reference
to name in a run spec (or in the policy data's defaults.image) when the
policy bundle sets require_digest: the registry digest when the image came
from a registry, otherwise repository@<image ID>, which the executor
resolves to exactly this local image.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ex, err := a.imageAdmin()
			if err != nil {
				return err
			}
			defer ex.Close()
			list, err := ex.ListImages(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if out.JSON() {
				return writeJSON(a, struct {
					Images []images.ImageInfo `json:"images"`
				}{list})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tSIZE\tCREATED\tCONTAINERS\tSANDBOX\tPINNED")
			for _, img := range list {
				name := "<none>"
				if len(img.RepoTags) > 0 {
					name = strings.Join(img.RepoTags, ",")
				}
				pin := "-"
				if len(img.Pins) > 0 {
					pin = strings.Join(img.Pins, ",")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%t\t%s\n", name, shortID(img.ID), humanSize(img.Size),
					img.Created.Format(time.DateTime), img.Containers, img.Sandbox, pin)
			}
			return tw.Flush()
		},
	}
	out = bindOutput(cmd)
	cmd.Flags().StringVar(&opts.Label, "label", "", "only images with this label (key or key=value)")
	return cmd
}

// newImagePruneCmd builds `sandgate image prune`.
func newImagePruneCmd(a *app) *cobra.Command {
	var opts images.PruneOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove dangling images and unused non-sandbox images (--dry-run to see what would go)",
		Long: `Remove dangling (nameless) images and every tagged image that no
container, running or stopped, uses, except sandbox images (made by
'sandgate image build', also when loaded from a tarball) and the
repositories given with --keep. --dangling-only keeps every tagged image.
Nothing is forced: an image taken into use meanwhile is refused by the
daemon and reported. On an air-gapped host a removed image comes back only
with 'sandgate image load', so look at --dry-run first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ex, err := a.imageAdmin()
			if err != nil {
				return err
			}
			defer ex.Close()
			rep, err := ex.PruneImages(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				verb := "removed"
				if rep.DryRun {
					verb = "would remove"
				}
				for _, p := range rep.Removed {
					name := "<none>"
					if len(p.RepoTags) > 0 {
						name = strings.Join(p.RepoTags, ",")
					}
					fmt.Fprintf(a.stdout, "%s %s %s (%s, %s)\n", verb, shortID(p.ID), name, p.Reason, humanSize(p.Size))
				}
				for _, f := range rep.Failed {
					fmt.Fprintln(a.stderr, "not removed:", f)
				}
				fmt.Fprintf(a.stdout, "%s %d image(s), up to %s; kept %d\n", verb, len(rep.Removed), humanSize(rep.Bytes), rep.Kept)
			}
			if len(rep.Failed) > 0 {
				return &ExitError{Code: 1, Message: fmt.Sprintf("image prune: %d image(s) could not be removed", len(rep.Failed))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&opts.DryRun, "dry-run", "n", false, "only say what would be removed")
	f.BoolVar(&opts.DanglingOnly, "dangling-only", false, "remove only dangling images")
	f.StringVar(&opts.Label, "label", "", "only consider images with this label (key or key=value)")
	f.StringSliceVar(&opts.Keep, "keep", nil, "repository whose images are kept even when unused; repeatable")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// listRecipes prints the language image recipes.
func (a *app) listRecipes(asJSON bool) error {
	recipes, err := images.LoadRecipes(recipefiles.Recipes)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(a, struct {
			Recipes []images.Recipe `json:"recipes"`
		}{recipes})
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tIMAGE\tSUITE\tPACKAGES\tDESCRIPTION")
	for _, r := range recipes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Image, r.Suite, strings.Join(r.Packages, ","), r.Description)
	}
	return tw.Flush()
}

// buildRecipe builds the language image of recipe name and says what it
// made, how big it is and how long it took.
func (a *app) buildRecipe(cmd *cobra.Command, ex *images.Images, name string, opts images.RecipeBuildOptions, asJSON bool) error {
	recipes, err := images.LoadRecipes(recipefiles.Recipes)
	if err != nil {
		return err
	}
	r, err := images.FindRecipe(recipes, name)
	if err != nil {
		return &ExitError{Code: 2, Message: err.Error()}
	}
	res, err := ex.BuildRecipeImage(cmd.Context(), r, opts)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	verb := "built"
	if res.Reused {
		verb = "reused"
	}
	_, err = fmt.Fprintf(a.stdout, "%s %s %s (%s, %d Debian packages) in %s\n", res.Image, res.ID, verb,
		humanSize(res.Size), len(res.Packages), res.Duration.Round(100*time.Millisecond))
	return err
}

// envInt64 is the integer in environment variable name, or 0.
func envInt64(getenv func(string) string, name string) int64 {
	n, _ := strconv.ParseInt(getenv(name), 10, 64)
	return n
}

// shortID is the 12 hex digits docker shows.
func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// humanSize prints bytes in binary units.
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func tagOr(tag string) string {
	if tag == "" {
		return images.SandboxImage
	}
	return tag
}

// adminExecutor returns an executor for the admin commands: the configured
// daemon and node, and no audit sink (these commands print what they do).
// imageAdmin is the image administration of the configured daemon.
func (a *app) imageAdmin() (*images.Images, error) {
	return images.New(images.Config{DockerHost: a.cfg.DockerHost})
}

func (a *app) adminExecutor() (*executor.Executor, error) {
	return executor.New(executor.Config{
		DockerHost:    a.cfg.DockerHost,
		Node:          a.cfg.Node,
		MaxConcurrent: a.cfg.MaxConcurrent,
	}, nil)
}
