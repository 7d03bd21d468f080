#!/usr/bin/env bash
# bench-gate.sh [REV]: measures the build of REV (default main) and the
# working tree's side by side (BenchmarkGateBeforeAfter): a cold run, a
# warm run, a session command and an admission review, interleaved, each
# build in a process of its own on the same Docker daemon and Postgres.
# It exports REV into a temporary directory, builds both binaries
# statically (each is its own sandbox agent) and prints the medians and
# the after/before ratios. SANDGATE_BENCH_PAIRS and SANDGATE_BENCH_REVIEWS
# size the samples. `bench-gate.sh --aa` measures the working tree against
# itself: the benchmark's own noise.
set -euo pipefail
aa=false
if [[ ${1:-} == --aa ]]; then
	aa=true
	shift
fi
rev=${1:-main}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive "$rev" | tar -x -C "$tmp" --one-top-level=before
(cd "$tmp/before" && CGO_ENABLED=0 go build -trimpath -o "$tmp/sandgate-before" ./cmd/sandgate)
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$tmp/sandgate-after" ./cmd/sandgate)
if $aa; then
	cp "$tmp/sandgate-after" "$tmp/sandgate-before"
	rev=HEAD
fi
echo "before: $rev ($(git -C "$root" rev-parse --short "$rev")); after: the working tree ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ', with changes'))"
cd "$root"
SANDGATE_BENCH_BEFORE="$tmp/sandgate-before" SANDGATE_BENCH_AFTER="$tmp/sandgate-after" \
	go test -run '^$' -bench BenchmarkGateBeforeAfter -benchtime 1x -count 1 -timeout 60m -v ./cmd/sandgate/e2e/
