#!/usr/bin/env bash
# deploy/bundle.sh — build the air-gapped install bundle:
#   dist/sandgate-<version>-linux-amd64.tar.gz
# holding a static sandgate binary, the sandbox image as a `docker save`
# tarball, the policy bundle, the migrations, the systemd unit and its
# environment example, the docs and install.sh. Run on a connected build
# machine with Go, Docker and busybox-static (make bootstrap); the bundle
# then installs with no network at all.
#
# Usage: deploy/bundle.sh [--out DIR] [--image REF]... [--language-images | --recipe NAME...]
#   VERSION=… overrides the version (default: git describe, as make build).
#   --image REF adds another local image (loaded by install.sh as well).
#   --language-images adds every language image of deploy/images
#   (sandgate/python:3, sandgate/node:18), --recipe NAME one of them: built
#   with mmdebstrap when missing (this machine needs the Debian mirror),
#   saved as images/NAME.tar with its ID in images/NAME.id.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=dist
extra_images=()
recipes=()
all_recipes=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --image) extra_images+=("$2"); shift 2 ;;
    --language-images) all_recipes=1; shift ;;
    --recipe) recipes+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "bundle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

die() { echo "bundle.sh: $*" >&2; exit 1; }
version=${VERSION:-$(git describe --always --dirty 2>/dev/null || echo dev)}
arch=amd64
[ "$(go env GOARCH)" = "$arch" ] || die "only linux/$arch bundles are made (go env GOARCH says $(go env GOARCH))"
name=sandgate-$version-linux-$arch
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/$name
mkdir -p "$b/images" "$b/policies" "$b/migrations" "$b/systemd" "$b/docs"

# A static binary: no cgo, so no libc, loader or NSS at run time (the
# Makefile's build keeps CGO_ENABLED=1 for -race).
echo "building static sandgate $version"
CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
  -ldflags "-s -w -X github.com/sandgate/sandgate.Version=$version" \
  -o "$b/sandgate" ./cmd/sandgate
go version -m "$b/sandgate" | grep -q 'CGO_ENABLED=0' || die "the binary was not built with CGO_ENABLED=0"
if command -v readelf >/dev/null; then
  ! readelf -lW "$b/sandgate" | grep -q 'INTERP' || die "the binary asks for a dynamic loader"
  [ -z "$(readelf -dW "$b/sandgate" 2>/dev/null | grep NEEDED)" ] || die "the binary needs shared libraries"
fi
"$b/sandgate" version | grep -qF "$version" || die "the binary does not report version $version"

# The sandbox image, built FROM scratch with a static busybox (the host's
# when its wget survives -T, else Debian trixie's busybox-static) when the
# daemon does not have it yet.
sandbox=sandgate/sandbox:latest
if ! docker image inspect "$sandbox" >/dev/null 2>&1; then
  echo "building $sandbox"
  "$b/sandgate" image build
fi
echo "saving $sandbox ${extra_images[*]:-}"
docker save -o "$b/images/sandbox.tar" "$sandbox"
for ref in "${extra_images[@]}"; do
  safe=$(printf %s "$ref" | tr -c 'A-Za-z0-9._-' '_')
  docker save -o "$b/images/$safe.tar" "$ref"
done
docker image inspect -f '{{.Id}}' "$sandbox" > "$b/images/sandbox.id"

# The language images: the recipes' images, built (or kept, when one of the
# same recipe is there) and saved under the recipe's name.
if [ "$all_recipes" = 1 ]; then
  mapfile -t recipes < <("$b/sandgate" image build --list | awk 'NR > 1 { print $1 }')
fi
for recipe in "${recipes[@]}"; do
  built=$("$b/sandgate" image build --reuse "$recipe") || die "could not build the $recipe image"
  echo "$built"
  ref=$(awk '{ print $1 }' <<<"$built")
  docker save -o "$b/images/$recipe.tar" "$ref"
  docker image inspect -f '{{.Id}}' "$ref" > "$b/images/$recipe.id"
done

# The policy bundle: what SANDGATE_POLICY_DIR loads (modules, their tests,
# data.json); no Go files.
cp policies/*.rego policies/data.json "$b/policies/"
cp migrations/*.sql "$b/migrations/"
cp deploy/systemd/sandgate.service deploy/systemd/sandgate-isolation.conf deploy/systemd/sandgate.env.example "$b/systemd/"
cp docs/*.md "$b/docs/"
[ -f README.md ] && cp README.md "$b/"
install -m 0755 deploy/install.sh "$b/install.sh"
echo "$version" > "$b/VERSION"
(cd "$b" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)

tarball=$out/$name.tar.gz
tar -C "$stage" --owner=0 --group=0 --numeric-owner -czf "$tarball.tmp" "$name"
mv "$tarball.tmp" "$tarball"
echo "bundle: $tarball ($(du -h "$tarball" | cut -f1))"
