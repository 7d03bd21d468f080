#!/usr/bin/env bash
# deploy/compose/build-image.sh — build the gateway image sandgate/gateway
# FROM scratch from a static sandgate binary, with no network: the context
# is made here (binary, /etc/passwd, /etc/group, the state directory) and
# the daemon's classic builder copies it; nothing is pulled.
#
# Usage: deploy/compose/build-image.sh [--tag REF] [--binary FILE]
#   --binary  use this static binary instead of building one
#   VERSION=… overrides the version (default: git describe)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
version=${VERSION:-$(cd "$root" && git describe --always --dirty 2>/dev/null || echo dev)}
tag=sandgate/gateway:$version
binary=""
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { echo "build-image.sh: $*" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
if [ -z "$binary" ]; then
  echo "building static sandgate $version"
  (cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath \
    -ldflags "-s -w -X github.com/sandgate/sandgate.Version=$version" -o "$ctx/sandgate" ./cmd/sandgate)
else
  install -m 0755 "$binary" "$ctx/sandgate"
fi
# FROM scratch has no loader: refuse a dynamically linked binary.
if command -v readelf >/dev/null && readelf -lW "$ctx/sandgate" | grep -q INTERP; then
  die "the binary is dynamically linked; build it with CGO_ENABLED=0"
fi
mkdir -p "$ctx/rootfs/etc" "$ctx/rootfs/tmp" "$ctx/state"
chmod 1777 "$ctx/rootfs/tmp"
chmod 0700 "$ctx/state"
printf 'root:x:0:0:root:/:/sbin/nologin\nsandgate:x:10002:10002:sandgate gateway:/var/lib/sandgate:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' > "$ctx/rootfs/etc/passwd"
printf 'root:x:0:\nsandgate:x:10002:\nnogroup:x:65534:\n' > "$ctx/rootfs/etc/group"
cp "$root/deploy/compose/Dockerfile" "$ctx/Dockerfile"
DOCKER_BUILDKIT=0 docker build --network none --pull=false \
  --label org.opencontainers.image.title="sandgate gateway" \
  --label org.opencontainers.image.version="$version" \
  -t "$tag" "$ctx"
docker run --rm --network none "$tag" version
echo "built $tag"
