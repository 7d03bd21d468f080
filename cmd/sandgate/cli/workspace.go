package cli

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/gateway/client"
)

// ignoreFile names the file of patterns `sandgate run --workspace` leaves
// out of the archive, one per line as .gitignore has them: "#" comments,
// "!" to take a path back, a trailing "/" for directories only, a leading
// "/" to anchor a pattern at the workspace's root; "**" globs.
const ignoreFile = ".sandgateignore"

// ignoreRule is one line of an ignore file.
type ignoreRule struct {
	pattern string
	negate  bool
	dirOnly bool
}

// readIgnore reads dir's ignore file; none is no rules.
func readIgnore(dir string) ([]ignoreRule, error) {
	f, err := os.Open(filepath.Join(dir, ignoreFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rules []ignoreRule
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var r ignoreRule
		if r.negate = strings.HasPrefix(line, "!"); r.negate {
			line = line[1:]
		}
		if r.dirOnly = strings.HasSuffix(line, "/"); r.dirOnly {
			line = strings.TrimSuffix(line, "/")
		}
		if strings.HasPrefix(line, "/") {
			line = strings.TrimPrefix(line, "/")
		} else if !strings.Contains(line, "/") {
			line = "**/" + line
		}
		if !doublestar.ValidatePattern(line) {
			return nil, fmt.Errorf("%s: bad pattern %q", ignoreFile, sc.Text())
		}
		r.pattern = line
		rules = append(rules, r)
	}
	return rules, sc.Err()
}

// ignored reports whether rel (slash-separated) is left out: the last
// rule that matches decides.
func ignored(rules []ignoreRule, rel string, isDir bool) bool {
	out := false
	for _, r := range rules {
		if r.dirOnly && !isDir {
			continue
		}
		if ok, _ := doublestar.Match(r.pattern, rel); ok {
			out = !r.negate
		}
	}
	return out
}

// packWorkspace streams dir as a tar.gz to w: regular files and
// directories, relative to dir, without what the ignore file names.
// Symlinks and other special files are left out (the gateway refuses
// them) and reported through skipped.
func packWorkspace(dir string, w io.Writer, skipped func(rel, why string)) error {
	return packTree(dir, "", w, skipped)
}

// packTree is packWorkspace with every entry under prefix (a clean
// relative path, "" for none), which is itself an entry: a directory
// copied under another name (sandgate session cp ./src ID:app).
func packTree(dir, prefix string, w io.Writer, skipped func(rel, why string)) error {
	rules, err := readIgnore(dir)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	if prefix != "" {
		st, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: prefix + "/", Mode: int64(st.Mode().Perm()), ModTime: st.ModTime()}); err != nil {
			return err
		}
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignored(rules, rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: path.Join(prefix, rel) + "/", Mode: int64(info.Mode().Perm()), ModTime: info.ModTime()})
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path.Join(prefix, rel), Size: info.Size(), Mode: int64(info.Mode().Perm()), ModTime: info.ModTime()}); err != nil {
				return err
			}
			if _, err := io.CopyN(tw, f, info.Size()); err != nil {
				return fmt.Errorf("%s changed while it was packed: %w", rel, err)
			}
			return nil
		case info.Mode()&fs.ModeSymlink != 0:
			skipped(rel, "a symlink")
		default:
			skipped(rel, "not a regular file or directory")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// downloadArtifacts writes every artifact of a run under dir, each
// checked against the SHA-256 the gateway stored, never outside dir.
func downloadArtifacts(ctx context.Context, a *app, c *client.Client, runID, dir string) error {
	list, err := c.Artifacts(ctx, runID)
	if err != nil {
		return err
	}
	root, err := openDownloadRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, art := range list.Artifacts {
		if err := downloadOne(ctx, c, root, runID, art.Path, art.Mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.stderr, "sandgate: downloaded %d artifact(s) to %s\n", len(list.Artifacts), dir)
	return nil
}

func openDownloadRoot(dir string) (*os.Root, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.OpenRoot(dir)
}

// downloadOne writes one artifact under root: its directories made, the
// file replaced through a temporary one so that a failed download leaves
// no partial file.
func downloadOne(ctx context.Context, c *client.Client, root *os.Root, runID, rel string, mode uint32) error {
	clean := path.Clean(rel)
	if clean != rel || strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, "../") || rel == ".." {
		return fmt.Errorf("artifact %q: not a relative path", rel)
	}
	if d := path.Dir(rel); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("artifact %s: %w", rel, err)
		}
	}
	tmp := rel + ".sandgate-download"
	f, err := root.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", rel, err)
	}
	_, err = c.Artifact(ctx, runID, rel, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(tmp, fs.FileMode(mode&0o777))
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		root.Remove(tmp)
		return fmt.Errorf("artifact %s: %w", rel, err)
	}
	return nil
}

// newRunsArtifactsCmd builds `sandgate runs artifacts RUN [PATH]`.
func newRunsArtifactsCmd(a *app) *cobra.Command {
	var download string
	var asTar bool
	var out *outputFormat
	cmd := &cobra.Command{
		Use:   "artifacts RUN [PATH]",
		Short: "List a run's artifacts, or download one or all of them",
		Example: `  sandgate runs artifacts 0193…           # list path, size, SHA-256
  sandgate runs artifacts 0193… out/report.json > report.json
  sandgate runs artifacts 0193… --download ./out
  sandgate runs artifacts 0193… --tar > artifacts.tar`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			switch {
			case len(args) == 2:
				if _, err := c.Artifact(ctx, args[0], args[1], a.stdout); err != nil {
					return clientError(a, err)
				}
				return nil
			case asTar:
				if err := c.ArtifactsTar(ctx, args[0], a.stdout); err != nil {
					return clientError(a, err)
				}
				return nil
			case download != "":
				if err := downloadArtifacts(ctx, a, c, args[0], download); err != nil {
					return clientError(a, err)
				}
				return nil
			}
			list, err := c.Artifacts(ctx, args[0])
			if err != nil {
				return clientError(a, err)
			}
			if out.JSON() {
				return writeJSON(a, list)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PATH\tSIZE\tMODE\tSHA256")
			for _, f := range list.Artifacts {
				fmt.Fprintf(tw, "%s\t%d\t%04o\t%s\n", f.Path, f.Size, f.Mode, f.SHA256)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&download, "download", "", "download every artifact into this directory")
	cmd.Flags().BoolVar(&asTar, "tar", false, "write every artifact as one tar stream to stdout")
	out = bindOutput(cmd)
	out.hint = "; to download every artifact into a directory, use --download DIR"
	return cmd
}
