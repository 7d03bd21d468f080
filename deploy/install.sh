#!/usr/bin/env bash
# install.sh — install sandgate from the air-gapped bundle this script sits
# in. It uses no network at all: no package manager, no registry, no pull.
# It needs Docker (running) and, for the migrations, Postgres (running, with
# the database created); both may be reached over their Unix sockets.
#
# Usage: sudo ./install.sh [options]
#   --prefix DIR          install under DIR instead of / (tests, staging)
#   --no-systemd          do not install the systemd unit
#   --no-user             do not create the "sandgate" user (nor add it to docker)
#   --database-url DSN    write SANDGATE_DATABASE_URL and migrate that database
#   --migrate-as USER     Unix user that runs `sandgate migrate up` (default:
#                         postgres when run as root and that user exists)
#   --skip-migrate        do not apply the migrations
#   --skip-images         do not load the images
#
# Idempotent: run it again (or the next version's) to upgrade. The
# environment file and the policy directory in /etc/sandgate are created
# once and then left as the operator edited them, except that
# SANDGATE_AIR_GAPPED=true is always set.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
prefix=""
systemd=1
mkuser=1
dsn=""
migrate_as=""
migrate=1
images=1
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=${2%/}; shift 2 ;;
    --no-systemd) systemd=0; shift ;;
    --no-user) mkuser=0; shift ;;
    --database-url) dsn=$2; shift 2 ;;
    --migrate-as) migrate_as=$2; shift 2 ;;
    --skip-migrate) migrate=0; shift ;;
    --skip-images) images=0; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf '==> %s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }

version=$(cat "$here/VERSION")
bin=$prefix/usr/local/bin/sandgate
etc=$prefix/etc/sandgate
share=$prefix/usr/local/share/sandgate
state=$prefix/var/lib/sandgate
envfile=$etc/sandgate.env

say "sandgate $version: checking the bundle"
(cd "$here" && sha256sum --quiet -c SHA256SUMS) || die "the bundle's SHA256SUMS do not match: copy it again"
if [ -z "$prefix" ] && ! is_root; then
  die "run as root to install under /, or give --prefix DIR"
fi
if [ "$mkuser" = 1 ] && ! is_root; then
  die "creating the sandgate user needs root (or pass --no-user)"
fi

# The user: system account, no shell, in the docker group (root-equivalent
# on this host: see docs/operations.md, "The Docker socket").
# Files belong to root (or, without root, to whoever installs) and the
# service's group; the state directory to the service's user.
admin=$(id -un)
owner=$admin
if [ "$mkuser" = 1 ]; then
  if ! getent passwd sandgate >/dev/null; then
    say "creating system user sandgate"
    useradd --system --user-group --home-dir /var/lib/sandgate --no-create-home \
      --shell "$(command -v nologin || echo /usr/sbin/nologin)" --comment "sandgate gateway" sandgate
  fi
  if getent group docker >/dev/null; then
    id -nG sandgate | tr ' ' '\n' | grep -qx docker || usermod -aG docker sandgate
  else
    say "warning: no docker group: give the sandgate user access to the Docker socket yourself"
  fi
  owner=sandgate
fi

say "installing the binary to $bin"
install -d -m 0755 "$prefix/usr/local/bin" "$share" "$share/docs" "$share/migrations" "$share/images" "$share/systemd"
install -m 0755 "$here/sandgate" "$bin.new"
mv -f "$bin.new" "$bin"
"$bin" version >/dev/null || die "the installed binary does not run"

# Reference copies: the pristine policy bundle of this version, migrations
# (embedded in the binary too; kept for review), docs, unit.
rm -rf "$share/policies.new"
install -d -m 0755 "$share/policies.new"
install -m 0644 "$here"/policies/* "$share/policies.new/"
rm -rf "$share/policies" && mv "$share/policies.new" "$share/policies"
install -m 0644 "$here"/migrations/*.sql "$share/migrations/"
install -m 0644 "$here"/docs/*.md "$share/docs/"
install -m 0644 "$here"/systemd/* "$share/systemd/"
install -m 0644 "$here"/images/* "$share/images/"

# Configuration and state.
install -d -m 0750 -o "$admin" -g "$(id -gn "$owner")" "$etc"
install -d -m 0700 -o "$owner" -g "$(id -gn "$owner")" "$state"
if [ ! -d "$etc/policies" ]; then
  say "installing the policy bundle to $etc/policies"
  install -d -m 0755 "$etc/policies"
  install -m 0644 "$here"/policies/* "$etc/policies/"
elif ! diff -rq "$here/policies" "$etc/policies" >/dev/null 2>&1; then
  say "note: $etc/policies differs from this version's bundle; kept as is."
  say "      compare: diff -ru $etc/policies $share/policies"
fi

# set_env KEY VALUE: replace KEY's line (or its commented-out example) in the
# environment file, or append it.
set_env() {
  local key=$1 value=$2 tmp
  tmp=$(mktemp "$envfile.XXXXXX")
  awk -v k="$key" -v v="$value" '
    BEGIN { done = 0 }
    !done && ($0 ~ "^"k"=" || $0 ~ "^#"k"=") { print k "=" v; done = 1; next }
    $0 ~ "^"k"=" { next }
    { print }
    END { if (!done) print k "=" v }' "$envfile" > "$tmp"
  chmod 0640 "$tmp"
  chgrp "$(id -gn "$owner")" "$tmp"
  mv -f "$tmp" "$envfile"
}
get_env() { awk -F= -v k="$1" '$1 == k { sub(/^[^=]*=/, ""); v = $0 } END { print v }' "$envfile"; }

if [ ! -f "$envfile" ]; then
  say "writing $envfile"
  install -m 0640 -o "$admin" -g "$(id -gn "$owner")" "$here/systemd/sandgate.env.example" "$envfile"
  if [ -n "$prefix" ]; then
    set_env SANDGATE_POLICY_DIR "$etc/policies"
    set_env SANDGATE_TOKENS_FILE "$etc/tokens.yaml"
    set_env SANDGATE_SPOOL_DIR "$state/spool"
    set_env SANDGATE_SIGNING_KEY_FILE "$state/checkpoint.key"
  fi
fi
set_env SANDGATE_AIR_GAPPED true
[ -n "$dsn" ] && set_env SANDGATE_DATABASE_URL "$dsn"
dsn=$(get_env SANDGATE_DATABASE_URL)
dsn=${dsn:-host=/var/run/postgresql dbname=sandgate}
docker_host=$(get_env DOCKER_HOST)

if [ "$systemd" = 1 ]; then
  say "installing the systemd unit"
  install -d -m 0755 "$prefix/etc/systemd/system"
  sed "s#/usr/local/bin/sandgate#$bin#; s#/etc/sandgate/sandgate.env#$envfile#" \
    "$here/systemd/sandgate.service" > "$prefix/etc/systemd/system/sandgate.service.new"
  chmod 0644 "$prefix/etc/systemd/system/sandgate.service.new"
  mv -f "$prefix/etc/systemd/system/sandgate.service.new" "$prefix/etc/systemd/system/sandgate.service"
  if [ -z "$prefix" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
  fi
fi

if [ "$images" = 1 ]; then
  for tarball in "$here"/images/*.tar; do
    say "loading $(basename "$tarball")"
    DOCKER_HOST=$docker_host "$bin" image load "$tarball" ||
      die "could not load $tarball: is Docker running, and may $(id -un) use its socket?"
  done
  want=$(cat "$here/images/sandbox.id")
  got=$(DOCKER_HOST=$docker_host "$bin" image list | awk '$1 ~ /(^|,)sandgate\/sandbox:latest(,|$)/ { print $2 }')
  case $want in
    sha256:"$got"*) [ -n "$got" ] || die "sandgate/sandbox:latest is missing after the load" ;;
    *) die "sandgate/sandbox:latest is ${got:-missing} after the load, want $want" ;;
  esac
  say "sandbox image $want; pin it as sandgate/sandbox@$want"
fi

if [ "$migrate" = 1 ]; then
  if [ -z "$migrate_as" ] && is_root && getent passwd postgres >/dev/null; then
    migrate_as=postgres
  fi
  run_as=()
  if [ -n "$migrate_as" ] && [ "$migrate_as" != "$(id -un)" ]; then
    run_as=(runuser -u "$migrate_as" --)
  fi
  say "applying migrations to \"$dsn\" as ${migrate_as:-$(id -un)}"
  (cd / && "${run_as[@]}" "$bin" migrate up --database-url "$dsn") ||
    die "migrations failed. Is Postgres running and does the database exist? (as postgres: createdb sandgate), then run this again"
  (cd / && "${run_as[@]}" "$bin" migrate status --database-url "$dsn")
fi

cat <<NEXT

sandgate $version is installed (air-gapped: SANDGATE_AIR_GAPPED=true).

Next steps:
  1. Tokens: write $etc/tokens.yaml (see $envfile for the format), mode 0640, group $(id -gn "$owner").
  2. Database role for the gateway (once, as postgres), peer authentication:
       psql -d sandgate -c 'CREATE ROLE sandgate LOGIN IN ROLE sandgate_app'
     and keep SANDGATE_MIGRATE=false in $envfile: upgrades migrate with this script.
  3. Review $envfile (SANDGATE_NODE must be unique per gateway).
  4. Start it: systemctl enable --now sandgate   (or: $bin serve with that environment)
  5. Check it: curl -s http://127.0.0.1:8080/readyz
  6. Give auditors the checkpoint public key: $bin audit public-key --signing-key-file $state/checkpoint.key
NEXT
