package sandgate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// Package is one Debian package in an image, as dpkg names it.
type Package struct {
	// Name is the binary package ("libpython3.11-minimal").
	Name string `json:"name"`
	// Version is its Debian version ("3.11.2-6+deb12u6").
	Version string `json:"version"`
	// Architecture is "amd64", "arm64", … or "all".
	Architecture string `json:"architecture"`
	// Source is the source package it was built from ("python3.11").
	Source string `json:"source"`
	// SourceVersion is the source package's version; it differs from
	// Version for binNMUs and for packages whose version is their own.
	SourceVersion string `json:"source_version"`
}

// ImagePackages is the software an image holds, as GET
// /v1/images/{ref}/packages serves it.
type ImagePackages struct {
	// Ref is the reference the caller named.
	Ref string `json:"ref"`
	// ID is the image ID it names on the node's daemon.
	ID string `json:"id"`
	// Listed says the image carries a package list; when false, Reason
	// says why not and Packages is empty.
	Listed bool `json:"listed"`
	// Reason says why an image has no list ("" when Listed).
	Reason string `json:"reason,omitempty"`
	// Digest is the SHA-256 of the list as the image carries it (its
	// label), the value image.resolved records as packages_sha256.
	Digest string `json:"digest,omitempty"`
	// Packages are sorted by name and architecture.
	Packages []Package `json:"packages"`
}

// ImagePackageLister reads the package list an image carries.
type ImagePackageLister interface {
	// ImagePackages returns ref's list: NOT-FOUND (field "ref") when the
	// daemon has no such image, DOCKER-UNAVAILABLE when it does not answer.
	ImagePackages(ctx context.Context, ref string) (ImagePackages, error)
}

// PackagesLabel is the image label a package list travels in: compact
// JSON of the image's []Package, written by `sandgate image build`, kept
// by `docker save` and `sandgate image load` (it is in the configuration
// the image ID is the digest of).
const PackagesLabel = "org.sandgate.packages"

// PackageListDigest is the SHA-256 of a PackagesLabel value
// ("sha256:…"): ImagePackages.Digest, and image.resolved's
// packages_sha256.
func PackageListDigest(label string) string {
	sum := sha256.Sum256([]byte(label))
	return "sha256:" + hex.EncodeToString(sum[:])
}
