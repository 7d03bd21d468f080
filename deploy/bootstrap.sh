#!/usr/bin/env bash
# deploy/bootstrap.sh: make this machine ready to build, test and run
# sandgate. Idempotent and quiet when all is well: installs Debian's
# docker.io, postgresql, busybox-static, mmdebstrap (the language images),
# docker-registry (the pull tests start their own; its service is disabled),
# rsyslog and rsyslog-gnutls (the audit sinks' receiver in tests) and (for
# the console's browser tests) chromium when missing (as root; otherwise
# prints what to run), starts dockerd and the PostgreSQL 15 cluster when they
# are stopped, waits until both answer, and makes sure the current user has a
# Postgres role and a "sandgate" database. It installs crun (runtime by
# policy) and gives the dockremap user subordinate IDs (user namespaces),
# and registers crun only with a daemon it starts itself: a daemon the host
# already runs is never reconfigured. SANDGATE_DOCKER_USERNS=remap runs
# sandgate's daemon with userns-remap (see "User namespaces" below).
set -euo pipefail

PG_VERSION=15
PG_CLUSTER=main
DB_NAME=${SANDGATE_DB_NAME:-sandgate}
DOCKERD_LOG=${SANDGATE_DOCKERD_LOG:-/var/log/sandgate-dockerd.log}
DOCKER_USERNS=${SANDGATE_DOCKER_USERNS:-}
case "$DOCKER_USERNS" in
  ''|remap) ;;
  *) printf 'bootstrap: SANDGATE_DOCKER_USERNS must be empty or remap, not %s\n' "$DOCKER_USERNS" >&2; exit 1 ;;
esac
# sandgate's own daemon when the host runs another (userns-remap mode).
SG_DOCKER_DIR=${SANDGATE_DOCKER_DIR:-/var/lib/sandgate/docker}
SG_DOCKER_RUN=${SANDGATE_DOCKER_RUN:-/run/sandgate-docker}

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
# crun: the second OCI runtime the tests register on a private daemon
# (runtime by policy), and sites may route teams to.
command -v crun >/dev/null 2>&1 || missing+=(crun)
compgen -G '/usr/lib/*/rsyslog/lmnsd_gtls.so' >/dev/null || missing+=(rsyslog-gnutls)
# The agents' tests (#32): sandgate session shell through tmux, the Python
# SDK installed into a venv, the TypeScript SDK and the reference MCP
# client under node (npm ci from sdk/typescript's lockfile).
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3 python3-venv)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# The pull tests push to and pull from Debian's docker-registry, which each
# test starts itself on a loopback port with its own storage. The service
# the package enables is stopped and disabled right after its install:
# nothing here serves a registry on the host's ports.
registry_new=
command -v docker-registry >/dev/null 2>&1 || { missing+=(docker-registry); registry_new=1; }
if [ ${#missing[@]} -gt 0 ]; then
  if is_root || (command -v sudo >/dev/null && sudo -n true 2>/dev/null); then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq >/dev/null
    as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    if [ -n "$registry_new" ] && [ -d /run/systemd/system ]; then
      as_root systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
    fi
  else
    die "missing packages: ${missing[*]}. Run: sudo apt-get update && sudo apt-get install -y ${missing[*]}"
  fi
fi

# User namespaces ---------------------------------------------------------
# dockerd --userns-remap=dockremap maps a container's uids onto the
# dockremap user's subordinate range: uid 10001 inside is 231072+10001 on
# the host, a uid that owns nothing. The range is made here, once, so that
# neither the daemon nor a test has to edit /etc.
ensure_remap_user() {
  is_root || return 0
  id dockremap >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin dockremap
  grep -q '^dockremap:' /etc/subuid 2>/dev/null || echo 'dockremap:231072:65536' >>/etc/subuid
  grep -q '^dockremap:' /etc/subgid 2>/dev/null || echo 'dockremap:231072:65536' >>/etc/subgid
}
ensure_remap_user

# Docker ------------------------------------------------------------------
docker_ok() { docker info >/dev/null 2>&1; }
# The flags of a daemon this script starts, and so manages: crun
# registered beside runc, and userns-remap when asked for.
dockerd_flags=(--add-runtime "crun=$(command -v crun || echo /usr/bin/crun)")
[ "$DOCKER_USERNS" = remap ] && dockerd_flags+=(--userns-remap=dockremap)
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
    setsid nohup dockerd "${dockerd_flags[@]}" >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  for _ in $(seq 1 60); do docker_ok && break; sleep 0.5; done
  docker_ok || die "dockerd did not answer within 30s; see $DOCKERD_LOG"
elif [ "$DOCKER_USERNS" = remap ] && ! docker info --format '{{.SecurityOptions}}' | grep -q 'name=userns'; then
  # The host runs a daemon of its own: leave it as it is, and run
  # sandgate's beside it, with its own socket, data, exec root and pid
  # file. It makes no bridge and writes no iptables rule (two daemons
  # must not share those): its runs have network none, which air-gapped
  # sites force anyway; bridge and egress runs need the host's daemon.
  is_root || die "SANDGATE_DOCKER_USERNS=remap starts sandgate's own dockerd, which needs root"
  sg_sock="$SG_DOCKER_RUN/docker.sock"
  if ! DOCKER_HOST="unix://$sg_sock" docker_ok; then
    mkdir -p "$SG_DOCKER_DIR" "$SG_DOCKER_RUN"
    say "starting sandgate's dockerd with userns-remap on $sg_sock (log: $DOCKERD_LOG)"
    setsid nohup dockerd "${dockerd_flags[@]}" --data-root "$SG_DOCKER_DIR" --exec-root "$SG_DOCKER_RUN/exec" \
      -H "unix://$sg_sock" --pidfile "$SG_DOCKER_RUN/docker.pid" \
      --bridge none --iptables=false --ip-masq=false >>"$DOCKERD_LOG" 2>&1 </dev/null &
    for _ in $(seq 1 60); do DOCKER_HOST="unix://$sg_sock" docker_ok && break; sleep 0.5; done
    DOCKER_HOST="unix://$sg_sock" docker_ok || die "sandgate's dockerd did not answer within 30s; see $DOCKERD_LOG"
  fi
  say "sandgate's daemon (userns-remap): export DOCKER_HOST=unix://$sg_sock, then make image"
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
