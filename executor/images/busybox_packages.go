package images

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/sandgate/sandgate"
)

// hostPackage is the Debian package dpkg says the host's file path came
// from, with its version, architecture and source, or why there is none
// (not installed by dpkg, or no dpkg on the host).
func hostPackage(ctx context.Context, path string) ([]sandgate.Package, string) {
	none := func(why string) ([]sandgate.Package, string) {
		return nil, fmt.Sprintf("the sandbox image's busybox is the host's %s, which %s", path, why)
	}
	out, err := exec.CommandContext(ctx, "dpkg-query", "--search", path).Output()
	if err != nil {
		return none("no Debian package dpkg-query knows installed")
	}
	var name string
	for _, line := range strings.Split(string(out), "\n") {
		// "busybox-static: /bin/busybox"; diversions are reported otherwise.
		if pkg, file, ok := strings.Cut(line, ": "); ok && file == path && !strings.ContainsAny(pkg, " ,") {
			name = pkg
			break
		}
	}
	if name == "" {
		return none("dpkg-query does not name one package for")
	}
	show, err := exec.CommandContext(ctx, "dpkg-query", "--show", "--showformat="+packageFormat, name).Output()
	if err != nil {
		return none("belongs to " + name + ", which dpkg-query does not show")
	}
	pkgs, err := parsePackages(show)
	if err != nil || len(pkgs) != 1 {
		return none(fmt.Sprintf("belongs to %s, whose fields dpkg-query gives as %q", name, strings.TrimSpace(string(show))))
	}
	return pkgs, ""
}

// sandboxPackageLabels are the labels that give the sandbox image its
// package list (LabelPackages), or say why it has none (LabelNoPackages).
func sandboxPackageLabels(bb busybox) (map[string]string, error) {
	if len(bb.packages) == 0 {
		why := bb.noPackages
		if why == "" {
			why = "the sandbox image's busybox came from no Debian package sandgate could name"
		}
		return map[string]string{LabelNoPackages: why}, nil
	}
	label, err := packagesLabel(bb.packages)
	if err != nil {
		return nil, err
	}
	return map[string]string{LabelPackages: label}, nil
}
