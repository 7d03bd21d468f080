#!/usr/bin/env bash
# deploy/bootstrap.sh: make this machine ready to build, test and run
# sandgate. Idempotent and quiet when all is well: installs Debian's
# docker.io, postgresql, busybox-static, mmdebstrap (the language images),
# rsyslog and rsyslog-gnutls (the audit sinks' receiver in tests) and (for
# the console's browser tests) chromium when missing (as root; otherwise
# prints what to run), starts dockerd and the PostgreSQL 15 cluster when they
# are stopped, waits until both answer, and makes sure the current user has a
# Postgres role and a "sandgate" database.
set -euo pipefail

PG_VERSION=15
PG_CLUSTER=main
DB_NAME=${SANDGATE_DB_NAME:-sandgate}
DOCKERD_LOG=${SANDGATE_DOCKERD_LOG:-/var/log/sandgate-dockerd.log}

say() { printf 'bootstrap: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }
as_root() { if is_root; then "$@"; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"; else return 1; fi; }

# Packages ----------------------------------------------------------------
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
[ -x /usr/lib/postgresql/$PG_VERSION/bin/postgres ] || missing+=(postgresql)
[ -x /bin/busybox ] && file_is_static=$( (LC_ALL=C ldd /bin/busybox 2>&1 || true) | grep -c 'not a dynamic' || true) || file_is_static=0
[ "$file_is_static" = 1 ] || missing+=(busybox-static)
# The air-gapped bundle test (make test) drives the installed gateway with
# curl and jq; cache volumes are ext4 images made with mkfs.ext4.
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
# `sandgate image build python|node` extracts Debian packages with
# mmdebstrap (it needs the Debian mirror, not a container registry).
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
# The console's tests drive Debian's headless Chromium (chromedp).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# The audit sinks' tests deliver to Debian's rsyslog, which each test
# starts itself (rsyslogd -n on a loopback port), also over TLS with its
# GnuTLS driver. (On a host with systemd, installing the package also
# enables the system's logger, as Debian does.)
[ -x /usr/sbin/rsyslogd ] || missing+=(rsyslog)
compgen -G '/usr/lib/*/rsyslog/lmnsd_gtls.so' >/dev/null || missing+=(rsyslog-gnutls)
if [ ${#missing[@]} -gt 0 ]; then
  if is_root || (command -v sudo >/dev/null && sudo -n true 2>/dev/null); then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq >/dev/null
    as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    die "missing packages: ${missing[*]}. Run: sudo apt-get update && sudo apt-get install -y ${missing[*]}"
  fi
fi

# Docker ------------------------------------------------------------------
docker_ok() { docker info >/dev/null 2>&1; }
if ! docker_ok; then
  if [ -n "${DOCKER_HOST:-}" ]; then
    die "DOCKER_HOST=$DOCKER_HOST does not answer; start that daemon or unset DOCKER_HOST"
  fi
  is_root || die "dockerd is not running. Run: sudo dockerd >/var/log/dockerd.log 2>&1 &   (or: sudo systemctl start docker)"
  if [ -d /run/systemd/system ] && systemctl start docker >/dev/null 2>&1; then
    :
  else
    say "starting dockerd (log: $DOCKERD_LOG)"
    # A stale pid file from a killed daemon stops a new one from starting.
    if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
      rm -f /var/run/docker.pid
    fi
    # In a session of its own: the daemon outlives the shell, job or test
    # run that started it (a process-group kill of that job included).
    setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  for _ in $(seq 1 60); do docker_ok && break; sleep 0.5; done
  docker_ok || die "dockerd did not answer within 30s; see $DOCKERD_LOG"
fi

# PostgreSQL --------------------------------------------------------------
if ! pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}' | grep -qx "$PG_VERSION $PG_CLUSTER"; then
  is_root || die "no PostgreSQL $PG_VERSION cluster. Run: sudo pg_createcluster $PG_VERSION $PG_CLUSTER"
  say "creating PostgreSQL cluster $PG_VERSION/$PG_CLUSTER"
  pg_createcluster "$PG_VERSION" "$PG_CLUSTER" >/dev/null
fi
if ! pg_lsclusters -h | awk -v v="$PG_VERSION" -v c="$PG_CLUSTER" '$1==v && $2==c {print $4}' | grep -qx online; then
  is_root || die "PostgreSQL is stopped. Run: sudo pg_ctlcluster $PG_VERSION $PG_CLUSTER start"
  say "starting PostgreSQL $PG_VERSION/$PG_CLUSTER"
  pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" start
fi
for _ in $(seq 1 60); do pg_isready -q && break; sleep 0.5; done
pg_isready -q || die "PostgreSQL did not answer within 30s; see /var/log/postgresql/"

# A role for the current user (superuser: it runs migrations and creates
# test databases) and the default database.
me=$(id -un)
pg() { if is_root; then runuser -u postgres -- psql -X -q -tA "$@"; else psql -X -q -tA "$@"; fi; }
if is_root || [ "$me" = postgres ]; then
  if [ "$(pg -d postgres -c "SELECT 1 FROM pg_roles WHERE rolname = '$me'")" != 1 ]; then
    say "creating Postgres role $me"
    pg -d postgres -c "CREATE ROLE \"$me\" LOGIN SUPERUSER"
  fi
  if [ "$(pg -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]; then
    say "creating database $DB_NAME"
    pg -d postgres -c "CREATE DATABASE \"$DB_NAME\" OWNER \"$me\""
  fi
elif ! psql -X -q -d "$DB_NAME" -c 'SELECT 1' >/dev/null 2>&1; then
  die "cannot connect to database $DB_NAME as $me. Run: sudo -u postgres createuser -s $me && createdb $DB_NAME"
fi
