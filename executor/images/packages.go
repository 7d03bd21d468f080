package images

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// The package list an image carries.
//
// A recipe image (and the sandbox image, when its busybox came from a
// Debian package) carries its Debian packages in two forms that travel
// with it through `docker save` and `sandgate image load`: the label
// LabelPackages, compact JSON of sandgate.Package sorted by name and
// architecture, which GET /v1/images/{ref}/packages serves and whose
// SHA-256 image.resolved records; and var/lib/dpkg/status in the image,
// a stanza per package, so that `dpkg -l` and image scanners (which read
// that file) see the same list. Both are made from the fields of the .deb
// files mmdebstrap extracted, so the same recipe gives the same list and
// the same image ID.
const (
	// LabelPackages holds the image's package list as compact JSON.
	LabelPackages = sandgate.PackagesLabel
	// LabelNoPackages says, on an image sandgate built without a list,
	// why it has none.
	LabelNoPackages = "org.sandgate.packages.none"
)

// Bounds of a package list: more packages, or a longer field, fail the
// build; an image whose label is larger is answered as having no list.
const (
	maxPackages      = 4096
	maxPackageField  = 256
	maxPackagesLabel = 512 << 10
)

// packageFormat is the dpkg-deb/dpkg-query --showformat of one package:
// name, version, architecture, source package and source version.
const packageFormat = `${Package}\t${Version}\t${Architecture}\t${source:Package}\t${source:Version}\n`

// parsePackages reads packageFormat lines into a list sorted by name and
// architecture, without duplicates. Each field must be printable, without
// spaces, at most maxPackageField bytes.
func parsePackages(data []byte) ([]sandgate.Package, error) {
	var out []sandgate.Package
	seen := map[[2]string]bool{}
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			return nil, fmt.Errorf("package line %d: %d fields, want 5", i+1, len(f))
		}
		for _, v := range f {
			if err := checkPackageField(v); err != nil {
				return nil, fmt.Errorf("package line %d: %w", i+1, err)
			}
		}
		p := sandgate.Package{Name: f[0], Version: f[1], Architecture: f[2], Source: f[3], SourceVersion: f[4]}
		if p.Name == "" || p.Version == "" || p.Architecture == "" {
			return nil, fmt.Errorf("package line %d: name, version and architecture are required", i+1)
		}
		if p.Source == "" {
			p.Source = p.Name
		}
		if p.SourceVersion == "" {
			p.SourceVersion = p.Version
		}
		if k := [2]string{p.Name, p.Architecture}; !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
		if len(out) > maxPackages {
			return nil, fmt.Errorf("more than %d packages", maxPackages)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Architecture < out[j].Architecture
	})
	return out, nil
}

func checkPackageField(v string) error {
	if len(v) > maxPackageField {
		return fmt.Errorf("a field of %d bytes (at most %d)", len(v), maxPackageField)
	}
	for _, r := range v {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("field %q has a space or a control character", v)
		}
	}
	return nil
}

// packagesLabel is the value of LabelPackages for pkgs.
func packagesLabel(pkgs []sandgate.Package) (string, error) {
	b, err := json.Marshal(pkgs)
	if err != nil {
		return "", err
	}
	if len(b) > maxPackagesLabel {
		return "", fmt.Errorf("the package list is %d bytes of JSON (at most %d)", len(b), maxPackagesLabel)
	}
	return string(b), nil
}

// packageVersions are pkgs as name=version, for LabelDebianPackages.
func packageVersions(pkgs []sandgate.Package) []string {
	out := make([]string, 0, len(pkgs))
	for _, p := range pkgs {
		out = append(out, p.Name+"="+p.Version)
	}
	return out
}

// dpkgStatus is var/lib/dpkg/status for pkgs: each installed, with its
// architecture, source and version, which is what `dpkg -l` and image
// scanners read.
func dpkgStatus(pkgs []sandgate.Package) string {
	var b bytes.Buffer
	for i, p := range pkgs {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "Package: %s\nStatus: install ok installed\nArchitecture: %s\n", p.Name, p.Architecture)
		switch {
		case p.Source != p.Name && p.SourceVersion != p.Version:
			fmt.Fprintf(&b, "Source: %s (%s)\n", p.Source, p.SourceVersion)
		case p.Source != p.Name:
			fmt.Fprintf(&b, "Source: %s\n", p.Source)
		case p.SourceVersion != p.Version:
			fmt.Fprintf(&b, "Source: %s (%s)\n", p.Source, p.SourceVersion)
		}
		fmt.Fprintf(&b, "Version: %s\n", p.Version)
	}
	return b.String()
}

// ImagePackages returns the package list image ref carries. An image
// without one is answered with Listed false and the reason. Errors are
// NOT-FOUND (field "ref") when the daemon has no such image, else
// SBX-002 or DOCKER-UNAVAILABLE.
func (im *Images) ImagePackages(ctx context.Context, ref string) (sandgate.ImagePackages, error) {
	out := sandgate.ImagePackages{Ref: ref, Packages: []sandgate.Package{}}
	var labels map[string]string
	err := im.call(ctx, "inspect image", func(ctx context.Context) error {
		img, err := im.api.ImageInspect(ctx, ref)
		out.ID = img.ID
		if img.Config != nil {
			labels = img.Config.Labels
		}
		return err
	})
	if cerrdefs.IsNotFound(err) {
		return out, &sandgate.Error{Code: sandgate.CodeNotFound, Field: "ref", Message: fmt.Sprintf("the node's daemon has no image %s", ref)}
	}
	if err != nil {
		return out, daemon.Error(sandgate.CodeImageUnavailable, err, "inspect image %s", ref)
	}
	label, ok := labels[LabelPackages]
	switch {
	case !ok && labels[LabelNoPackages] != "":
		out.Reason = labels[LabelNoPackages]
		return out, nil
	case !ok && labels[sandboxLabel] == sandboxLabelValue:
		out.Reason = "the image was built by a sandgate that did not record package lists; rebuild it with `sandgate image build`"
		return out, nil
	case !ok:
		out.Reason = "the image was not built by sandgate from Debian packages: it carries no package list (" + LabelPackages + ")"
		return out, nil
	}
	var pkgs []sandgate.Package
	if err := json.Unmarshal([]byte(label), &pkgs); err != nil || len(label) > maxPackagesLabel {
		out.Reason = fmt.Sprintf("the image's %s label is not a package list sandgate wrote", LabelPackages)
		return out, nil
	}
	out.Listed, out.Digest = true, sandgate.PackageListDigest(label)
	if pkgs != nil {
		out.Packages = pkgs
	}
	return out, nil
}

var _ sandgate.ImagePackageLister = (*Images)(nil)
