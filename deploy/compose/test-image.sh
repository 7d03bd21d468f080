#!/usr/bin/env bash
# deploy/compose/test-image.sh — build the gateway image offline and run it
# as compose does (uid 10002, the docker group added, read-only root,
# no capabilities, no-new-privileges, the Docker socket mounted, Postgres
# over TCP as a password role) against a fresh database, on the host
# network so that the test can reach it; then admit and run one job.
# Needs root, the dockerd and Postgres of `make bootstrap`, curl and jq.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "test-image: FAIL: $*" >&2; exit 1; }
n=$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')
db=sg_gwimg_$n role=sg_gwimg_$n name=sg-gwimg-$n vol=sg-gwimg-$n tag=sandgate/gateway:test-$n
pw=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$((20000 + RANDOM % 20000))
cleanup() {
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker volume rm "$vol" >/dev/null 2>&1 || true
  docker image rm "$tag" >/dev/null 2>&1 || true
  psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "DROP ROLE IF EXISTS $role" >/dev/null 2>&1 || true
}
trap cleanup EXIT

bash "$here/build-image.sh" --tag "$tag" > /tmp/$name-build.log 2>&1 || { cat /tmp/$name-build.log; die "build failed"; }
rm -f /tmp/$name-build.log
[ "$(docker image inspect -f '{{len .RootFS.Layers}} {{.Config.User}}' "$tag")" = "3 10002:10002" ] ||
  die "image layers/user: $(docker image inspect -f '{{len .RootFS.Layers}} {{.Config.User}}' "$tag")"
# Migration 3 creates the sandgate_app role: the migrating role needs CREATEROLE.
psql -X -q -d postgres -c "CREATE ROLE $role LOGIN CREATEROLE PASSWORD '$pw'" -c "CREATE DATABASE $db OWNER $role"
docker run -d --name "$name" --network host --group-add "$(getent group docker | cut -d: -f3)" \
  --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges:true \
  -v /var/run/docker.sock:/var/run/docker.sock -v "$vol:/var/lib/sandgate" \
  -e SANDGATE_LISTEN=127.0.0.1:$port -e SANDGATE_DEV=1 -e SANDGATE_AIR_GAPPED=true -e SANDGATE_NODE="$name" \
  -e "SANDGATE_DATABASE_URL=postgres://$role:$pw@127.0.0.1:5432/$db?sslmode=disable" "$tag" serve >/dev/null
for _ in $(seq 1 120); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.5; done
curl -sf "127.0.0.1:$port/readyz" >/dev/null || { docker logs "$name"; die "not ready"; }
token=$(docker logs "$name" 2>/dev/null | sed -n 's/.*SANDGATE_TOKEN=//p')
out=$(curl -s -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"command": ["sh", "-c", "echo from the gateway image; exit 7"], "network": "bridge"}' "127.0.0.1:$port/v1/runs?wait=60s")
jq -e '.exit_code == 7 and .stdout.data == "from the gateway image\n" and .spec.network == "none"' <<<"$out" >/dev/null ||
  die "run: $out"
[ "$(docker top "$name" -o uid,pid | awk 'NR == 2 { print $1 }')" = 10002 ] || die "the gateway does not run as uid 10002"
docker stop -t 120 "$name" >/dev/null
[ "$(docker inspect -f '{{.State.ExitCode}}' "$name")" = 0 ] || { docker logs "$name" | tail; die "non-zero exit on SIGTERM"; }
echo "test-image: PASS: $tag FROM scratch, uid 10002, read-only, no capabilities; admitted and ran a job (exit 7, network forced to none); clean stop"
