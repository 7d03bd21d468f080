#!/usr/bin/env bash
# deploy/cluster.sh: the parts of a sandgate cluster on this one machine,
# for make test-cluster and for trying failover by hand:
#
#   - a second Docker daemon (its own --data-root, --exec-root, unix
#     socket, pidfile and config file; no default bridge, no iptables or
#     ip_forward changes) in a network namespace of its own, so that it
#     never disturbs the main daemon at /var/run/docker.sock nor the
#     host's interfaces (a dockerd started with --bridge none deletes any
#     docker0 it finds in its namespace: in the host's, that is the main
#     daemon's bridge). It is reached through its unix socket; its
#     containers have no network but their own. The sandbox image is
#     copied into it with docker save | docker load;
#   - a PostgreSQL 15 primary and a streaming replica of it
#     (pg_createcluster, pg_basebackup -R), synchronous, on loopback ports
#     nobody else uses, trusting loopback connections (test data only).
#
# Usage: deploy/cluster.sh up | down | status | env
#                          | kill-primary | promote
#                          | docker-stop | docker-start
#
# up always starts from nothing (it runs down first), so it is safe to
# re-run after a crash; down removes every trace and is safe when nothing
# is there. env prints the variables a gateway of the cluster needs.
# Needs root (dockerd, pg_createcluster).
set -euo pipefail

PG_VERSION=15
PRIMARY=${SANDGATE_CLUSTER_PRIMARY:-sgc-primary}
REPLICA=${SANDGATE_CLUSTER_REPLICA:-sgc-replica}
PRIMARY_PORT=${SANDGATE_CLUSTER_PRIMARY_PORT:-54815}
REPLICA_PORT=${SANDGATE_CLUSTER_REPLICA_PORT:-54816}
DB_NAME=sandgate

STATE=${SANDGATE_CLUSTER_STATE:-/var/lib/sandgate-cluster}
RUNDIR=${SANDGATE_CLUSTER_RUN:-/run/sgc}
DOCKER_SOCK=$RUNDIR/docker.sock
DOCKER_PID=$RUNDIR/docker.pid
DOCKER_EXEC=$RUNDIR/exec
DOCKER_DATA=$STATE/docker
DOCKER_LOG=${SANDGATE_CLUSTER_DOCKER_LOG:-/var/log/sandgate-cluster-dockerd.log}
SANDBOX_IMAGE=${SANDGATE_CLUSTER_IMAGE:-sandgate/sandbox:latest}

say() { printf 'cluster: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (a second dockerd, pg_createcluster): sudo $0 $*"

docker2() { docker -H "unix://$DOCKER_SOCK" "$@"; }

# The second Docker daemon ----------------------------------------------

docker_running() {
  [ -f "$DOCKER_PID" ] && kill -0 "$(cat "$DOCKER_PID")" 2>/dev/null
}

docker_stop() {
  if docker_running; then
    local pid
    pid=$(cat "$DOCKER_PID")
    # Its containers go with it: stop them first so that the daemon's
    # shutdown does not wait for each.
    docker2 ps -q 2>/dev/null | xargs -r docker2 rm -f >/dev/null 2>&1 || true
    kill "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      say "dockerd $pid did not stop within 30s; killing it"
      kill -9 "$pid" || true
    fi
  fi
  rm -f "$DOCKER_PID"
}

# kill_leftovers ends what a daemon that crashed (or was killed) left
# running: its containers' processes, all in this daemon's cgroup parent,
# and their containerd shims, which name this daemon's exec root. Nothing
# else is touched.
kill_leftovers() {
  local f p
  for f in /sys/fs/cgroup/*/sandgate-cluster/*/cgroup.procs /sys/fs/cgroup/sandgate-cluster/*/cgroup.procs; do
    [ -f "$f" ] && xargs -r kill -9 <"$f" 2>/dev/null || true
  done
  for p in /proc/[0-9]*; do
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "-address $DOCKER_EXEC/"; then
      kill -9 "${p#/proc/}" 2>/dev/null || true
    fi
  done
  for f in /sys/fs/cgroup/*/sandgate-cluster/*/ /sys/fs/cgroup/sandgate-cluster/*/; do
    [ -d "$f" ] && rmdir "$f" 2>/dev/null || true
  done
}

# unmount_under unmounts whatever a crashed daemon left mounted under $1,
# deepest first.
unmount_under() {
  local prefix=$1
  awk -v p="$prefix" '$2 == p || index($2, p "/") == 1 { print $2 }' /proc/self/mounts |
    sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

docker_start() {
  docker_running && return 0
  mkdir -p "$RUNDIR" "$DOCKER_DATA" "$DOCKER_EXEC"
  # Its own (empty) config file: nothing of /etc/docker/daemon.json.
  echo '{}' >"$STATE/daemon.json"
  say "starting the second dockerd on unix://$DOCKER_SOCK (log: $DOCKER_LOG)"
  # unshare execs dockerd in a new network namespace (same pid, so the
  # pidfile names it); the namespace ends with the daemon.
  setsid nohup unshare --net dockerd \
    --config-file "$STATE/daemon.json" \
    --data-root "$DOCKER_DATA" \
    --exec-root "$DOCKER_EXEC" \
    --pidfile "$DOCKER_PID" \
    -H "unix://$DOCKER_SOCK" \
    --bridge none \
    --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
    --cgroup-parent sandgate-cluster \
    >>"$DOCKER_LOG" 2>&1 </dev/null &
  for _ in $(seq 1 150); do docker2 info >/dev/null 2>&1 && break; sleep 0.2; done
  docker2 info >/dev/null 2>&1 || die "the second dockerd did not answer within 30s; see $DOCKER_LOG"
}

docker_load_image() {
  docker image inspect "$SANDBOX_IMAGE" >/dev/null 2>&1 ||
    die "$SANDBOX_IMAGE is not in the main daemon; run make image first"
  docker save "$SANDBOX_IMAGE" | docker2 load -q >/dev/null
}

# PostgreSQL: a primary and its streaming replica ------------------------

pg_exists() { pg_lsclusters -h 2>/dev/null | awk -v v="$PG_VERSION" -v c="$1" '$1 == v && $2 == c { f=1 } END { exit !f }'; }

pg_drop() {
  if pg_exists "$1"; then
    # Test data: no need for a clean shutdown, which waits for backends
    # that may wait for a standby that is gone.
    pg_ctlcluster "$PG_VERSION" "$1" stop -m immediate 2>/dev/null || true
    pg_dropcluster "$PG_VERSION" "$1"
  fi
  # A cluster half made by a run that crashed: pg_dropcluster no longer
  # knows it, its directories may still be there.
  rm -rf "/etc/postgresql/$PG_VERSION/$1" "/var/lib/postgresql/$PG_VERSION/$1"
}

psql_at() { local port=$1; shift; runuser -u postgres -- psql -X -q -h 127.0.0.1 -p "$port" -d postgres -v ON_ERROR_STOP=1 "$@"; }

wait_pg() {
  for _ in $(seq 1 150); do
    runuser -u postgres -- pg_isready -q -h 127.0.0.1 -p "$1" && return 0
    sleep 0.2
  done
  die "PostgreSQL on port $1 did not accept connections within 30s"
}

# pg_configure gives a server its settings: loopback only, trust on
# loopback, replication. The primary's commits wait for the replica's flush
# (synchronous_standby_names, set once the replica streams), so that a
# promoted replica holds every commit the gateways were told about. The
# replica has no synchronous standby of its own: promoted, it would
# otherwise wait for one that does not exist, and every commit would hang.
pg_configure() {
  local name=$1 port=$2 conf=/etc/postgresql/$PG_VERSION/$1
  cat >"$conf/conf.d/sandgate-cluster.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
wal_level = replica
max_wal_senders = 4
hot_standby = on
fsync = off
full_page_writes = off
synchronous_standby_names = ''
max_connections = 60
shared_buffers = 32MB
log_line_prefix = '%m [%p] $name '
EOF
  cat >"$conf/pg_hba.conf" <<EOF
local all         all                 peer
local replication all                 peer
host  all         all   127.0.0.1/32  trust
host  replication all   127.0.0.1/32  trust
EOF
}

pg_up() {
  say "creating PostgreSQL $PG_VERSION primary $PRIMARY on 127.0.0.1:$PRIMARY_PORT"
  pg_createcluster -q --start-conf=manual -p "$PRIMARY_PORT" "$PG_VERSION" "$PRIMARY" >/dev/null
  pg_configure "$PRIMARY" "$PRIMARY_PORT"
  pg_ctlcluster "$PG_VERSION" "$PRIMARY" start
  wait_pg "$PRIMARY_PORT"
  psql_at "$PRIMARY_PORT" -c "CREATE DATABASE $DB_NAME"

  say "creating replica $REPLICA on 127.0.0.1:$REPLICA_PORT (pg_basebackup -R)"
  pg_createcluster -q --start-conf=manual -p "$REPLICA_PORT" "$PG_VERSION" "$REPLICA" >/dev/null
  pg_configure "$REPLICA" "$REPLICA_PORT"
  local data=/var/lib/postgresql/$PG_VERSION/$REPLICA
  rm -rf "$data"
  runuser -u postgres -- pg_basebackup -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres \
    -D "$data" -R -X stream -c fast -d "application_name=$REPLICA"
  chmod 0700 "$data"
  pg_ctlcluster "$PG_VERSION" "$REPLICA" start
  wait_pg "$REPLICA_PORT"

  sed -i "s/^synchronous_standby_names.*/synchronous_standby_names = '*'/" \
    "/etc/postgresql/$PG_VERSION/$PRIMARY/conf.d/sandgate-cluster.conf"
  pg_ctlcluster "$PG_VERSION" "$PRIMARY" reload
  for _ in $(seq 1 150); do
    [ "$(psql_at "$PRIMARY_PORT" -Atc "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'")" = 1 ] && return 0
    sleep 0.2
  done
  die "the replica did not stream synchronously within 30s"
}

dsn() {
  echo "host=127.0.0.1,127.0.0.1 port=$PRIMARY_PORT,$REPLICA_PORT user=postgres dbname=$DB_NAME sslmode=disable target_session_attrs=read-write connect_timeout=2"
}

print_env() {
  echo "SANDGATE_CLUSTER_DSN='$(dsn)'"
  echo "SANDGATE_CLUSTER_PRIMARY_DSN='host=127.0.0.1 port=$PRIMARY_PORT user=postgres dbname=$DB_NAME sslmode=disable'"
  echo "SANDGATE_CLUSTER_REPLICA_DSN='host=127.0.0.1 port=$REPLICA_PORT user=postgres dbname=$DB_NAME sslmode=disable'"
  echo "SANDGATE_CLUSTER_DOCKER_HOST=unix://$DOCKER_SOCK"
}

down() {
  docker_stop
  kill_leftovers
  unmount_under "$DOCKER_EXEC"
  unmount_under "$DOCKER_DATA"
  rm -rf "$DOCKER_DATA" "$DOCKER_EXEC" "$DOCKER_SOCK" "$STATE/daemon.json"
  pg_drop "$REPLICA"
  pg_drop "$PRIMARY"
}

status() {
  if docker_running; then echo "docker: running (pid $(cat "$DOCKER_PID"), unix://$DOCKER_SOCK)"; else echo "docker: stopped"; fi
  pg_lsclusters | awk -v a="$PRIMARY" -v b="$REPLICA" 'NR == 1 || $2 == a || $2 == b'
}

case "${1:-}" in
  up)
    down
    docker_start
    docker_load_image
    pg_up
    say "up"
    print_env
    ;;
  down) down; say "down" ;;
  status) status ;;
  env) print_env ;;
  # kill-primary stops the primary the way a crash would (immediate: no
  # checkpoint, connections cut).
  kill-primary) pg_ctlcluster "$PG_VERSION" "$PRIMARY" stop -m immediate ;;
  # promote makes the replica the primary and waits until it takes writes.
  promote)
    pg_ctlcluster "$PG_VERSION" "$REPLICA" promote
    for _ in $(seq 1 150); do
      [ "$(psql_at "$REPLICA_PORT" -Atc 'SELECT pg_is_in_recovery()')" = f ] && exit 0
      sleep 0.1
    done
    die "the replica was not promoted within 15s"
    ;;
  docker-stop) docker_stop ;;
  docker-start) docker_start ;;
  *) die "usage: $0 up|down|status|env|kill-primary|promote|docker-stop|docker-start" ;;
esac
