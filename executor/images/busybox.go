package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
)

// The sandbox image's busybox is checked before it goes in.
//
// A busybox built without FEATURE_WGET_TIMEOUT still accepts wget's -T
// and writes its value through a NULL pointer (libbb/getopt32.c stores an
// option's integer at its destination, which that build leaves NULL):
// `wget -T 3 URL` dies of SIGSEGV, exit 139, instead of fetching or
// saying why not, and a run behind the egress proxy sees "Segmentation
// fault" where the proxy's 403 should be. Debian's busybox-static is
// built so before 1:1.36.1-5, which turned the feature on; bookworm has
// 1:1.35.0. So a busybox is never taken on faith: checkBusybox runs its
// wget with -T against a closed port on loopback and refuses one that
// dies of a signal. Without an explicit --busybox, the host's
// /bin/busybox is taken when it passes, else busybox-static of
// DefaultBusyboxSuite (statically linked, so any suite's binary runs in
// the image), extracted with mmdebstrap as the language images are.

// DefaultBusyboxSuite is the Debian release whose busybox-static the
// sandbox image takes when the host's does not pass checkBusybox: its
// build has FEATURE_WGET_TIMEOUT.
const DefaultBusyboxSuite = "trixie"

// hostBusybox is where Debian's busybox-static installs the binary.
const hostBusybox = "/bin/busybox"

// busyboxCheckTimeout bounds the run of a busybox being checked.
const busyboxCheckTimeout = 30 * time.Second

// busybox is the binary the sandbox image is built from.
type busybox struct {
	path    string
	version string // the first line of its banner
	source  string // where it came from, for /etc/sandgate-release
	// packages is the Debian package it came from (busybox_packages.go),
	// or noPackages says why there is none.
	packages   []sandgate.Package
	noPackages string
}

// pickBusybox returns the busybox the sandbox image is built from: the
// one opts names, else the host's, else Debian's busybox-static of
// opts.BusyboxSuite, extracted into dir. Each is checked (checkBusybox);
// a named one that fails is refused.
func pickBusybox(ctx context.Context, opts BuildOptions, dir string) (busybox, error) {
	if opts.Busybox != "" {
		v, err := checkBusybox(ctx, opts.Busybox)
		if err != nil {
			return busybox{}, err
		}
		return busybox{path: opts.Busybox, version: v, source: opts.Busybox,
			noPackages: "the sandbox image was built from a busybox binary named with --busybox, which no Debian package records"}, nil
	}
	v, hostErr := checkBusybox(ctx, hostBusybox)
	if hostErr == nil {
		bb := busybox{path: hostBusybox, version: v, source: "host " + hostBusybox}
		bb.packages, bb.noPackages = hostPackage(ctx, hostBusybox)
		return bb, nil
	}
	suite := opts.BusyboxSuite
	if suite == "" {
		suite = DefaultBusyboxSuite
	}
	fmt.Fprintf(opts.Progress, "the host's busybox is not used: %v\ntaking busybox-static from Debian %s\n", hostErr, suite)
	path, pkgs, err := debianBusybox(ctx, opts, suite, dir)
	if err != nil {
		return busybox{}, fmt.Errorf("the host's busybox is not usable (%v), and busybox-static of Debian %s could not be had: %w", hostErr, suite, err)
	}
	if v, err = checkBusybox(ctx, path); err != nil {
		return busybox{}, fmt.Errorf("busybox-static of Debian %s: %w", suite, err)
	}
	return busybox{path: path, version: v, source: "debian " + suite + " busybox-static", packages: pkgs}, nil
}

// checkBusybox refuses a busybox the sandbox image cannot carry: not
// statically linked (FROM scratch has no loader), or one whose wget dies
// of a signal on -T. It returns the first line of its banner.
func checkBusybox(ctx context.Context, path string) (string, error) {
	if err := checkStatic(path); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, busyboxCheckTimeout)
	defer cancel()
	if err := wgetSurvivesTimeout(ctx, path); err != nil {
		return "", err
	}
	banner, _ := runQuiet(ctx, path)
	first, _, _ := strings.Cut(strings.TrimSpace(banner), "\n")
	return first, nil
}

// wgetSurvivesTimeout runs path's wget with -T against port 1 on
// loopback, where nothing listens: a working wget says it cannot connect
// and exits 1 at once; one that dies of a signal is refused.
func wgetSurvivesTimeout(ctx context.Context, path string) error {
	out, err := runQuiet(ctx, path, "wget", "-T", "1", "-O", "/dev/null", "http://127.0.0.1:1/")
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && !exit.Exited():
		return fmt.Errorf("%s: `wget -T 1` dies of %s (%s); a busybox built without FEATURE_WGET_TIMEOUT (Debian's before 1:1.36.1-5) writes -T through a NULL pointer: use another busybox (--busybox)",
			path, exit.ProcessState.String(), strings.TrimSpace(out))
	case err != nil && !errors.As(err, &exit):
		return fmt.Errorf("%s: run wget: %w", path, err)
	}
	return nil
}

// runQuiet runs a program with no environment (no proxy variables) and
// no input, and returns what it printed.
func runQuiet(ctx context.Context, path string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// debianBusybox extracts the busybox binary of Debian suite's
// busybox-static package into dir with mmdebstrap, and returns its path
// and the package, as the recipe images list theirs.
func debianBusybox(ctx context.Context, opts BuildOptions, suite, dir string) (string, []sandgate.Package, error) {
	prog := opts.Mmdebstrap
	if prog == "" {
		prog = "mmdebstrap"
	}
	if _, err := exec.LookPath(prog); err != nil {
		return "", nil, fmt.Errorf("%s: %w (apt-get install mmdebstrap, or run deploy/bootstrap.sh)", prog, err)
	}
	sources := opts.Sources
	if len(sources) == 0 {
		sources = debianSources(suite)
	}
	args := append([]string{"--variant=extract", "--format=tar", "--include=busybox-static", "--extract-hook=" + extractHook, suite, "-"}, sources...)
	cmd := exec.CommandContext(ctx, prog, args...)
	var stderr tailBuffer
	cmd.Stderr = io.MultiWriter(&stderr, opts.Progress)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", prog, err)
	}
	path, pkgs, ferr := extractBusybox(out, dir)
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return "", nil, fmt.Errorf("%s: %w: %s", prog, err, strings.TrimSpace(stderr.String()))
	}
	if ferr == nil && len(pkgs) == 0 {
		ferr = errors.New("mmdebstrap's extract hook listed no packages")
	}
	return path, pkgs, ferr
}

// extractBusybox writes the busybox binary of a root filesystem's tar
// stream (usr/bin/busybox, or bin/busybox before the /usr merge) to
// dir/busybox, and reads the packages the extract hook listed.
func extractBusybox(in io.Reader, dir string) (string, []sandgate.Package, error) {
	tr := tar.NewReader(in)
	var path string
	var pkgs []sandgate.Package
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", nil, fmt.Errorf("read the package's files: %w", err)
		}
		name := strings.TrimPrefix(filepath.Clean("/"+hdr.Name), "/")
		switch {
		case hdr.Typeflag == tar.TypeReg && name == packagesFile:
			data, err := io.ReadAll(io.LimitReader(tr, maxPackages*5*maxPackageField))
			if err != nil {
				return "", nil, err
			}
			if pkgs, err = parsePackages(data); err != nil {
				return "", nil, fmt.Errorf("mmdebstrap's extract hook: %w", err)
			}
		case hdr.Typeflag == tar.TypeReg && path == "" && (name == "usr/bin/busybox" || name == "bin/busybox"):
			if path, err = writeBusybox(tr, dir); err != nil {
				return "", nil, err
			}
		}
	}
	if path == "" {
		return "", nil, errors.New("the package has no busybox binary")
	}
	return path, pkgs, nil
}

// writeBusybox writes r to dir/busybox, executable.
func writeBusybox(r io.Reader, dir string) (string, error) {
	path := filepath.Join(dir, "busybox")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(f, io.LimitReader(r, 64<<20))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return path, err
}

// debianSources are deb.debian.org's suite, suite-updates and
// suite-security, main.
func debianSources(suite string) []string {
	return []string{
		"deb http://deb.debian.org/debian " + suite + " main",
		"deb http://deb.debian.org/debian " + suite + "-updates main",
		"deb http://deb.debian.org/debian-security " + suite + "-security main",
	}
}
