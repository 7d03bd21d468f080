package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/workspace"
)

// sandgate session cp copies as cp -r and docker cp do, with one rule for
// where a copy lands, on either side:
//
//   - a destination that is a directory (the session's workspace root
//     ID:, a path ending in "/", or an existing local directory) receives
//     the source under its own name: cp ./repo ID: makes repo/;
//   - any other destination is the copy's name: cp ./src ID:app makes
//     app/ with src's contents (made, with its parents, when missing;
//     merged into it, its files replaced, when it is there);
//   - a source ending in "/." copies its contents: cp ./src/. ID:app.
//
// The session's side cannot be looked at before a copy, so there a
// trailing "/" is what says "into this directory".

// localCopyLimits bound what a copy out of a session writes here: the
// session's workspace is the run's, and may be anyone's making.
var localCopyLimits = workspace.Limits{MaxEntries: 1_000_000, MaxBytes: 64 << 30}

func newSessionCpCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories into or out of a session, as cp -r does",
		Long: `Copy a local file or directory into a session (DST is SESSION:PATH) or out
of one (SRC is SESSION:PATH), as cp -r and docker cp do:

  - into a directory: a DST that is the workspace (SESSION:), ends in "/",
    or is an existing local directory gets the source under its own name;
  - otherwise DST is the copy's name: a directory is made there (with its
    parents) holding the source's contents, or merged into the directory
    already there, its files replaced;
  - a SRC ending in "/." copies the directory's contents.

"-" as SRC is stdin (a file's content), as DST stdout (a file, or a
directory as a tar). Directories travel as tar.gz in and tar out; symlinks
and special files are left out (with a warning going in).`,
		Example: `  sandgate session cp ./repo "$id":                 # the workspace's repo/
  sandgate session cp ./src "$id":app               # app/ holds src's contents
  sandgate session cp ./src/. "$id":                 # src's contents at the workspace's top
  sandgate session cp notes.txt "$id":docs/          # docs/notes.txt
  sandgate session cp "$id":repo/out ./out           # ./out holds repo/out's contents
  sandgate session cp "$id":repo/out/report.json .   # ./report.json
  sandgate session cp "$id":repo/out - | tar -t      # a directory as a tar to stdout`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if id, p, ok := sessionPath(args[1]); ok {
				return copyIn(cmd.Context(), a, id, p, args[0])
			}
			id, p, ok := sessionPath(args[0])
			if !ok {
				return &ExitError{Code: exitUsage, Message: "one of SRC and DST must be SESSION:PATH (the session's ID, a colon, a path in its workspace)"}
			}
			return copyOut(cmd.Context(), a, id, p, args[1])
		},
	}
}

// sessionPath splits SESSION:PATH; ok is false for a local path.
func sessionPath(s string) (id, path string, ok bool) {
	id, path, ok = strings.Cut(s, ":")
	if !ok || len(id) != 36 {
		return "", "", false
	}
	return id, path, true
}

// intoDir reports whether a session path names a directory to copy into:
// the workspace itself, or a path ending in "/".
func intoDir(p string) bool {
	return p == "" || p == "." || p == "/" || strings.HasSuffix(p, "/")
}

// cleanRel is p relative to the workspace, "" for the workspace itself.
func cleanRel(p string) string {
	c := path.Clean("/" + p)
	return strings.TrimPrefix(c, "/")
}

// copyIn writes the local file or directory src into session id at p.
func copyIn(ctx context.Context, a *app, id, p, src string) error {
	c, err := a.newClient()
	if err != nil {
		return &ExitError{Code: exitUsage, Message: err.Error()}
	}
	var res api.FileResult
	switch st, serr := os.Stat(src); {
	case src == "-":
		if intoDir(p) {
			return &ExitError{Code: exitUsage, Message: fmt.Sprintf("%s:%s: standard input is one file: name it, as %s:%sFILE", id, p, id, p)}
		}
		res, err = c.PutFile(ctx, id, cleanRel(p), 0, a.stdin)
	case serr != nil:
		return &ExitError{Code: 1, Message: serr.Error()}
	case st.IsDir():
		prefix := cleanRel(p)
		contents := strings.HasSuffix(src, "/.") || src == "."
		if !contents && intoDir(p) {
			prefix = path.Join(prefix, filepath.Base(filepath.Clean(src)))
		}
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(packTree(src, prefix, pw, func(rel, why string) {
				fmt.Fprintf(a.stderr, "sandgate: left out %s: %s\n", rel, why)
			}))
		}()
		defer pr.Close()
		res, err = c.PutArchive(ctx, id, "", "tar.gz", pr)
	default:
		dst := cleanRel(p)
		if intoDir(p) {
			dst = path.Join(dst, filepath.Base(src))
		}
		f, ferr := os.Open(src)
		if ferr != nil {
			return &ExitError{Code: 1, Message: ferr.Error()}
		}
		defer f.Close()
		res, err = c.PutFile(ctx, id, dst, int(st.Mode().Perm()), f)
	}
	if err != nil {
		return clientError(a, err)
	}
	fmt.Fprintf(a.stderr, "sandgate: wrote %d bytes (%d entries) sha256 %s\n", res.Bytes, max(res.Entries, 1), res.SHA256)
	return nil
}

// copyOut writes the file or directory at p of session id to dst: a
// local path, or "-" for stdout.
func copyOut(ctx context.Context, a *app, id, p, dst string) error {
	c, err := a.newClient()
	if err != nil {
		return &ExitError{Code: exitUsage, Message: err.Error()}
	}
	if dst == "-" {
		if _, err := c.GetFiles(ctx, id, p, a.stdout); err != nil {
			return clientError(a, err)
		}
		return nil
	}
	name := path.Base("/" + cleanRel(p))
	if name == "/" {
		name = "" // the workspace: its contents
	}
	target := dst
	if st, err := os.Stat(dst); (err == nil && st.IsDir()) || strings.HasSuffix(dst, string(filepath.Separator)) {
		if name != "" && !strings.HasSuffix(p, "/.") {
			target = filepath.Join(dst, name)
		}
	}
	// The answer is kept beside the target until it is whole: a file is
	// then renamed into place, a directory's tar unpacked.
	parent := filepath.Dir(filepath.Clean(target))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return &ExitError{Code: 1, Message: err.Error()}
	}
	tmp, err := os.CreateTemp(parent, ".sandgate-cp-*")
	if err != nil {
		return &ExitError{Code: 1, Message: err.Error()}
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	kind, err := c.GetFiles(ctx, id, p, tmp)
	if err != nil {
		return clientError(a, err)
	}
	if kind != sandgate.FileFormatTar {
		if st, err := os.Stat(target); err == nil && st.IsDir() {
			return &ExitError{Code: 1, Message: fmt.Sprintf("%s is a directory: cannot write the file %s:%s over it", target, id, p)}
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), target)
	}
	return unpackLocal(ctx, tmp, target)
}

// unpackLocal unpacks the tar in f into the directory dir, made when
// missing; nothing is written outside dir, whatever the tar's entries say.
func unpackLocal(ctx context.Context, f *os.File, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &ExitError{Code: 1, Message: err.Error()}
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return &ExitError{Code: 1, Message: err.Error()}
	}
	defer root.Close()
	_, err = workspace.UnpackWith(ctx, f, st.Size(), root, workspace.Options{
		Owner: workspace.Owner{UID: -1, GID: -1}, Limits: localCopyLimits, Replace: true,
	})
	var se *sandgate.Error
	if errors.As(err, &se) {
		return &ExitError{Code: 1, Message: fmt.Sprintf("%s: %s", dir, sandgate.ErrorMessageOf(se))}
	}
	if errors.Is(err, fs.ErrExist) {
		return &ExitError{Code: 1, Message: fmt.Sprintf("%s: %v", dir, err)}
	}
	return err
}
