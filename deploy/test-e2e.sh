#!/usr/bin/env bash
# deploy/test-e2e.sh [SHARDS]: the end-to-end tests (cmd/sandgate/e2e),
# race detector on, split round-robin into SHARDS processes that run at
# once. The tests spend most of their time waiting on containers and the
# database, not on the CPU: one process ran them one after the other for
# longer than a package's 20-minute bound. Each test is independent of the
# others (its own database, node name, directories and containers), as it
# already is beside the other packages' tests. Each shard's output is
# printed whole when it ends; the script fails if any shard fails.
set -uo pipefail
cd "$(dirname "$0")/.."
shards=${1:-3}
GO=${GO:-go}
bin=$(mktemp -d /tmp/sandgate-e2e.XXXXXX)
trap 'rm -rf "$bin"' EXIT
$GO test -race -c -o "$bin/e2e.test" ./cmd/sandgate/e2e || exit 1
mapfile -t tests < <(cd cmd/sandgate/e2e && "$bin/e2e.test" -test.list '.*' | grep '^Test')
if [ ${#tests[@]} = 0 ]; then echo "test-e2e: no tests listed" >&2; exit 1; fi
declare -a groups
for i in "${!tests[@]}"; do
  groups[$((i % shards))]+="${groups[$((i % shards))]:+|}${tests[$i]}"
done
start=$(date +%s)
pids=()
for s in $(seq 0 $((shards - 1))); do
  [ -n "${groups[$s]:-}" ] || continue
  ( cd cmd/sandgate/e2e && exec "$bin/e2e.test" -test.count=1 -test.timeout=25m -test.run "^(${groups[$s]})\$" ) >"$bin/shard-$s.log" 2>&1 &
  pids[$s]=$!
done
rc=0
for s in "${!pids[@]}"; do
  if wait "${pids[$s]}"; then
    echo "ok   e2e shard $((s + 1))/$shards ($(grep -o '|' <<<"${groups[$s]}" | wc -l | awk '{print $1 + 1}') tests)"
  else
    rc=1
    echo "FAIL e2e shard $((s + 1))/$shards:"
    cat "$bin/shard-$s.log"
  fi
done
echo "e2e: ${#tests[@]} tests in $shards shards, $(( $(date +%s) - start )) s"
exit $rc
