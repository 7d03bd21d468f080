#!/usr/bin/env bash
# deploy/test-bundle.sh — install the air-gapped bundle inside a network
# namespace that has only `lo`, start the installed gateway there with
# SANDGATE_AIR_GAPPED=true, and have it admit and run jobs. Docker and
# Postgres are reached over their Unix sockets, which work across network
# namespaces; nothing else is reachable. Needs root (unshare -n), the
# running dockerd and Postgres of `make bootstrap`, curl and jq.
#
# Usage: deploy/test-bundle.sh [TARBALL]   (default: build one with bundle.sh)
# Exit status 0 when every check passed.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
die() { printf 'test-bundle: FAIL: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root for unshare -n"
for tool in unshare ip curl jq docker psql runuser; do
  command -v "$tool" >/dev/null || die "$tool is missing"
done

work=$(mktemp -d /tmp/sandgate-bundle-test.XXXXXX)
chmod 0755 "$work" # the migrations run as the postgres user
db=sandgate_bundle_$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')
cleanup() {
  status=$?
  if [ -f "$work/gateway.pid" ] && kill -0 "$(cat "$work/gateway.pid")" 2>/dev/null; then
    kill "$(cat "$work/gateway.pid")" || true
  fi
  psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  if [ "$status" = 0 ]; then rm -rf "$work"; else echo "test-bundle: logs kept in $work" >&2; fi
}
trap cleanup EXIT

tarball=${1:-}
if [ -z "$tarball" ]; then
  bash "$root/deploy/bundle.sh" --out "$work/dist"
  tarball=$(ls "$work"/dist/sandgate-*-linux-amd64.tar.gz)
fi
start=$(date +%s)
mkdir -p "$work/bundle"
tar -C "$work/bundle" -xzf "$tarball"
bundle=$(ls -d "$work"/bundle/sandgate-*-linux-amd64)
psql -X -q -d postgres -c "CREATE DATABASE $db" || die "cannot create database $db"
echo "test-bundle: bundle $(basename "$tarball"), database $db, work $work"

# Everything in inner.sh runs with no network but loopback.
cat > "$work/inner.sh" <<'INNER_EOF'
set -euo pipefail
work=$1 bundle=$2 db=$3
[ -d "$work" ] && [ -x "$bundle/install.sh" ] && [ -n "$db" ] || { echo "test-bundle: bad arguments" >&2; exit 1; }
die() { printf 'test-bundle: FAIL: %s\n' "$*" >&2; exit 1; }
ok() { printf 'test-bundle: ok: %s\n' "$*"; }
ip link set lo up
links=$(ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')
[ "$links" = "lo " ] || die "the namespace has links other than lo: $links"
if ip route get 192.0.2.1 >/dev/null 2>&1; then die "a route out of the namespace exists"; fi
if curl -s -m 3 -o /dev/null http://192.0.2.1/ 2>/dev/null; then die "an outside address answered"; fi
ok "network namespace has only lo and no route out"

prefix=$work/root
args=(--prefix "$prefix" --no-systemd --no-user --database-url "host=/var/run/postgresql dbname=$db")
"$bundle/install.sh" "${args[@]}" > "$work/install1.log" 2>&1 || { cat "$work/install1.log"; die "install.sh failed"; }
envfile=$prefix/etc/sandgate/sandgate.env
sum1=$(sha256sum < "$envfile")
"$bundle/install.sh" "${args[@]}" > "$work/install2.log" 2>&1 || { cat "$work/install2.log"; die "install.sh failed the second time"; }
[ "$(sha256sum < "$envfile")" = "$sum1" ] || die "a second install changed $envfile"
[ "$(grep -c '^SANDGATE_AIR_GAPPED=' "$envfile")" = 1 ] && grep -qx 'SANDGATE_AIR_GAPPED=true' "$envfile" ||
  die "$envfile does not set SANDGATE_AIR_GAPPED=true exactly once"
# The bundle's own migrations decide how many the first install applies.
want=$(find "$bundle/migrations" -maxdepth 1 -name '*.sql' | wc -l)
[ "$want" -gt 0 ] || die "the bundle holds no migrations"
grep -q "applied $want migration(s)" "$work/install1.log" || { cat "$work/install1.log"; die "the first install did not apply the bundle's $want migrations"; }
grep -q 'applied 0 migration(s)' "$work/install2.log" || { cat "$work/install2.log"; die "the second install applied migrations again"; }
bin=$prefix/usr/local/bin/sandgate
[ -x "$bin" ] && [ -f "$prefix/etc/sandgate/policies/data.json" ] || die "binary or policy bundle not installed"
ok "install.sh installed with no network, twice, idempotently (env file unchanged, migrations applied once)"

# A tokens file: alice submits for team payments; audra audits.
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
atoken=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
{
  echo "principals:"
  echo "  - {name: alice, team: payments, roles: [submitter], token_sha256: $(printf %s "$token" | sha256sum | cut -d' ' -f1)}"
  echo "  - {name: audra, team: audit, roles: [auditor], token_sha256: $(printf %s "$atoken" | sha256sum | cut -d' ' -f1)}"
} > "$prefix/etc/sandgate/tokens.yaml"

# The installed gateway with exactly the installed environment file.
mapfile -t envs < <(grep -E '^[A-Z_]+=' "$envfile")
node=bundle-test-${db#sandgate_bundle_}
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${envs[@]}" SANDGATE_NODE="$node" \
  "$bin" serve > "$work/gateway.log" 2>&1 &
echo $! > "$work/gateway.pid"
url=http://127.0.0.1:8080
for _ in $(seq 1 120); do
  curl -sf "$url/readyz" >/dev/null 2>&1 && break
  kill -0 "$(cat "$work/gateway.pid")" 2>/dev/null || { cat "$work/gateway.log"; die "the gateway exited"; }
  sleep 0.5
done
curl -sf "$url/readyz" >/dev/null || { curl -s "$url/readyz"; cat "$work/gateway.log"; die "the gateway never became ready"; }
ok "installed gateway ready"

auth=(-H "Authorization: Bearer $token" -H 'Content-Type: application/json')
cfg=$(curl -sf "${auth[@]}" "$url/v1/config")
[ "$(jq -r .air_gapped <<<"$cfg")" = true ] || die "GET /v1/config: air_gapped is not true: $cfg"

# 1. A job asking for the bridge network: admitted, mutated to none, run.
code=$(curl -s -o "$work/run1.json" -w '%{http_code}' "${auth[@]}" \
  -d '{"command": ["sh", "-c", "echo hello from the bundle; id -u; exit 3"], "network": "bridge"}' "$url/v1/runs?wait=60s")
[ "$code" = 200 ] || { cat "$work/run1.json"; die "POST /v1/runs answered $code"; }
jq -e '.state == "finished" and .exit_code == 3 and .outcome == "failed"
       and .stdout.data == "hello from the bundle\n10001\n" and .spec.network == "none"' "$work/run1.json" >/dev/null ||
  { cat "$work/run1.json"; die "run 1 is not finished with exit 3, sandbox output and network none"; }
run1=$(jq -r .id "$work/run1.json")
ok "run $run1 admitted with network forced to none, ran as uid 10001, exit code 3"

# 2. The sandbox image pinned by the digest `sandgate image list` prints.
pin=$("$bin" image list --json | jq -r '.images[] | select(.repo_tags | index("sandgate/sandbox:latest")) | .pins[0]')
[ "$pin" = "sandgate/sandbox@$(cat "$bundle/images/sandbox.id")" ] || die "image list pins $pin"
code=$(curl -s -o "$work/run2.json" -w '%{http_code}' "${auth[@]}" \
  -d "{\"image\": \"$pin\", \"command\": [\"sh\", \"-c\", \"echo pinned\"]}" "$url/v1/runs?wait=60s")
[ "$code" = 200 ] && jq -e '.exit_code == 0 and .stdout.data == "pinned\n"' "$work/run2.json" >/dev/null ||
  { cat "$work/run2.json"; die "the digest-pinned run failed ($code)"; }
ok "digest-pinned run ($pin) succeeded"

# 3. A privileged job is denied by policy.
code=$(curl -s -o "$work/run3.json" -w '%{http_code}' "${auth[@]}" \
  -d '{"command": ["true"], "privileged": true}' "$url/v1/runs")
[ "$code" = 403 ] && jq -e '.error.code == "SANDGATE-POLICY-DENIED"' "$work/run3.json" >/dev/null ||
  { cat "$work/run3.json"; die "a privileged run was not denied ($code)"; }
ok "privileged run denied (403 SANDGATE-POLICY-DENIED)"

# 4. The CLI client streams output and exits with the container's code.
set +e
SANDGATE_URL=$url SANDGATE_TOKEN=$token "$bin" run -- sh -c 'echo from the cli; exit 5' > "$work/cli.out" 2> "$work/cli.err"
rc=$?
set -e
[ "$rc" = 5 ] && grep -qx 'from the cli' "$work/cli.out" || { cat "$work/cli.out" "$work/cli.err"; die "sandgate run exited $rc"; }
ok "sandgate run streamed the output and exited 5"

# 5. The audit trail holds the run, and verifies after a clean stop.
types=$(curl -sf -H "Authorization: Bearer $atoken" "$url/v1/audit/events?run_id=$run1&limit=100" | jq -r '[.events[].type] | join(" ")')
for t in admission.allowed container.created container.started container.exited container.removed; do
  [[ " $types " == *" $t "* ]] || die "audit events of $run1 lack $t: $types"
done
ok "audit trail of $run1: $types"
pid=$(cat "$work/gateway.pid")
kill -TERM "$pid"
for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
if kill -0 "$pid" 2>/dev/null; then die "the gateway did not stop on SIGTERM"; fi
wait "$pid" || { cat "$work/gateway.log"; die "the gateway exited non-zero on SIGTERM"; }
env -i PATH=/usr/bin:/bin "${envs[@]}" "$bin" audit public-key > "$work/checkpoints.pub"
env -i PATH=/usr/bin:/bin "${envs[@]}" "$bin" audit verify --public-key "$work/checkpoints.pub" > "$work/verify.json" ||
  { cat "$work/verify.json"; die "audit verify found problems"; }
left=$(docker ps -aq --filter "label=sandgate.node=$node" | wc -l)
[ "$left" = 0 ] || die "$left container(s) of node $node left behind"
ok "gateway stopped cleanly; audit verify ok ($(jq .checked "$work/verify.json") events); no container left"

# 6. Key rotation as docs/operations.md describes it: retire the key, start
# again (a new key is made, the chain continues), stop; verify needs both.
keyfile=$(grep '^SANDGATE_SIGNING_KEY_FILE=' "$envfile" | cut -d= -f2)
mv "$keyfile" "$work/retired.key"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${envs[@]}" SANDGATE_NODE="$node" \
  "$bin" serve > "$work/gateway2.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do curl -sf "$url/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
code=$(curl -s -o "$work/run4.json" -w '%{http_code}' "${auth[@]}" -d '{"command": ["true"]}' "$url/v1/runs?wait=60s")
[ "$code" = 200 ] || { cat "$work/run4.json" "$work/gateway2.log"; die "run after the key rotation answered $code"; }
kill -TERM "$pid"
wait "$pid" || { cat "$work/gateway2.log"; die "the gateway exited non-zero after the rotation"; }
env -i PATH=/usr/bin:/bin "${envs[@]}" "$bin" audit public-key > "$work/new.pub"
cmp -s "$work/new.pub" "$work/checkpoints.pub" && die "no new key was made"
# Every chain (lifecycle, and decisions when serve keeps them apart) went
# on under the new key: none was restarted.
chains=$(psql -X -tA -d "$db" -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE keys = 2) FROM (SELECT count(DISTINCT key_id) AS keys FROM audit_checkpoints GROUP BY chain_id) c")
[ "${chains% *}" -ge 1 ] && [ "${chains% *}" = "${chains#* }" ] ||
  die "checkpoints: want every chain signed by the old and the new key, got (chains, chains with two keys) $chains"
env -i PATH=/usr/bin:/bin "${envs[@]}" "$bin" audit verify --public-key "$work/checkpoints.pub" --public-key "$work/new.pub" > "$work/verify2.json" ||
  { cat "$work/verify2.json"; die "verify with the old and the new key found problems"; }
if env -i PATH=/usr/bin:/bin "${envs[@]}" "$bin" audit verify --public-key "$work/new.pub" > "$work/verify3.json" 2>/dev/null; then
  die "verify with only the new key passed"
fi
jq -e '[.problems[].kind] | unique == ["untrusted_key"]' "$work/verify3.json" >/dev/null ||
  { cat "$work/verify3.json"; die "verify with only the new key: want only untrusted_key problems"; }
ok "key rotation: the chain continued under a new key; verify passes with both keys, reports untrusted_key with the new one only"
INNER_EOF
unshare --net -- bash "$work/inner.sh" "$work" "$bundle" "$db" < /dev/null

# The user and group handling, which the run above skips (--no-user): in a
# mount namespace whose /etc is a private copy, so the host's accounts are
# untouched, and again with no network.
cat > "$work/user.sh" <<'USER_EOF'
set -euo pipefail
work=$1 bundle=$2
die() { printf 'test-bundle: FAIL: %s\n' "$*" >&2; exit 1; }
mount --make-rprivate /
cp -a /etc "$work/etc-copy"
mount --bind "$work/etc-copy" /etc
ip link set lo up
getent passwd sandgate >/dev/null && die "a sandgate user exists before the install"
for i in 1 2; do
  "$bundle/install.sh" --prefix "$work/root-user" --skip-migrate > "$work/install-user$i.log" 2>&1 ||
    { cat "$work/install-user$i.log"; die "install.sh with user creation failed (run $i)"; }
done
[ "$(getent passwd sandgate | cut -d: -f6,7)" = "/var/lib/sandgate:$(command -v nologin || echo /usr/sbin/nologin)" ] ||
  die "sandgate user: $(getent passwd sandgate)"
id -nG sandgate | tr ' ' '\n' | grep -qx docker || die "sandgate is not in the docker group: $(id -nG sandgate)"
[ "$(grep -c '^sandgate:' /etc/passwd)" = 1 ] || die "the second install added the user again"
[ "$(stat -c '%U %a' "$work/root-user/var/lib/sandgate")" = "sandgate 700" ] || die "state directory: $(stat -c '%U %a' "$work/root-user/var/lib/sandgate")"
[ "$(stat -c '%U:%G %a' "$work/root-user/etc/sandgate/sandgate.env")" = "root:sandgate 640" ] ||
  die "env file: $(stat -c '%U:%G %a' "$work/root-user/etc/sandgate/sandgate.env")"
grep -q "ExecStart=$work/root-user/usr/local/bin/sandgate serve" "$work/root-user/etc/systemd/system/sandgate.service" ||
  die "the unit does not start the installed binary"
# The listing is read whole before it is searched: grep -q stops reading
# at the first match, and under pipefail the writer's broken pipe fails
# the check when more images follow.
images=$(runuser -u sandgate -- "$work/root-user/usr/local/bin/sandgate" image list) &&
  grep -q 'sandgate/sandbox:latest' <<<"$images" ||
  die "the sandgate user cannot list images through the Docker socket"
printf 'test-bundle: ok: %s\n' "user sandgate created once, in group docker, reaches the Docker socket; state 0700, env 0640 root:sandgate; unit installed"
USER_EOF
chmod 0755 "$work"
unshare --net --mount -- bash "$work/user.sh" "$work" "$bundle" < /dev/null
echo "test-bundle: PASS in $(( $(date +%s) - start )) s (after the bundle was built)"
