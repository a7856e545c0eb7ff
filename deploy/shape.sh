#!/usr/bin/env bash
# hmdp as several instances behind nginx, on one machine, on loopback ports:
#
#   deploy/shape.sh up       # start everything (fails if a port is taken or the shape is up)
#   deploy/shape.sh status   # what runs where; exit 0 when every part answers, 3 otherwise
#   deploy/shape.sh down     # stop what `up` started, drop the database and vhost it made
#
# The shape: nginx → DEPLOY_INSTANCES (3) `hmdp serve` instances sharing one MariaDB database,
# one upload folder and the secrets; Redis as a primary, two replicas and three Sentinels; the
# orders go through the Redis streams or a RabbitMQ vhost of their own. Ports, from
# DEPLOY_BASE_PORT (B, default 18080):
#
#   B        nginx (the address to use)          B+10     Redis primary
#   B+1..B+N the hmdp instances                  B+11,12  Redis replicas
#   B+31..B+30+N their scrapers' listeners       B+20..22 Redis Sentinels
#            (/metrics, /health; no credential)
#
# Settings (environment):
#   DEPLOY_BASE_PORT     first port (18080)
#   DEPLOY_INSTANCES     hmdp instances (3, at most 9)
#   DEPLOY_STATE_DIR     pid, log, config and data files (deploy/state)
#   DEPLOY_HMDP_BIN      the hmdp binary (default: $CARGO_TARGET_DIR or target/, release then
#                        debug)
#   DEPLOY_MYSQL_URL     the MariaDB server, no database (mysql://root@127.0.0.1:3306)
#   DEPLOY_DB_NAME       the database to create (hmdp_shape_B); it must not exist yet
#   DEPLOY_REDIS         sentinel: hmdp finds the primary through the Sentinels (follows a
#                        failover); primary: hmdp talks to the first primary directly (a
#                        failover then leaves it behind)
#   DEPLOY_SENTINEL_MASTER  the name the Sentinels monitor (hmdp)
#   DEPLOY_TRANSPORT     stream (orders through the Redis streams) or rabbitmq (a vhost made
#                        with rabbitmqctl)
#   DEPLOY_AMQP_URL      the RabbitMQ server, no vhost (amqp://guest:guest@127.0.0.1:5672)
#   DEPLOY_RABBITMQCTL   the rabbitmqctl command (rabbitmqctl)
#   DEPLOY_TRUSTED_PROXIES  nginx's address as the instances see it (127.0.0.1/32)
# Every HMDP_* variable of the caller's environment reaches the instances (HMDP_STATIC_DIR for
# the original pages, HMDP_ADMIN_TOKEN, HMDP_PAY_SECRET, ...); the ones the shape decides
# (listen address, database, Redis, upload folder, ...) are set by this script.
#
# Everything the shape writes is private to the user who runs it: the instances' logs carry
# login codes, shape.env the database URL with its password, nginx's logs the clients' requests.
# So the state folder is 0700 and every file and folder made by this script or by the processes
# it starts (they inherit the umask) has no group or other permission bits.
set -euo pipefail
umask 077

DEPLOY_DIR=$(cd "$(dirname "$0")" && pwd)
STATE=${DEPLOY_STATE_DIR:-$DEPLOY_DIR/state}
[[ $STATE == /* ]] || STATE=$PWD/$STATE
SHAPE_ENV=$STATE/shape.env

log() { printf '\033[1m[shape]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[shape] error:\033[0m %s\n' "$*" >&2; exit 1; }
# `need COMMAND APT-PACKAGE`: fails with the package to install when COMMAND is missing.
need() {
  command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ] ||
    die "$1 is missing: install it with \`apt-get install $2\`"
}

# ---------------------------------------------------------------------------- helpers

# True while something accepts connections on 127.0.0.1:$1.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# `wait_for SECONDS WHAT COMMAND...`: runs COMMAND every 0.1 s until it succeeds.
wait_for() {
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# True while process $1 runs (a zombie, dead but not yet reaped by its parent, does not).
runs() { local stat; stat=$(cat "/proc/$1/stat" 2>/dev/null) && [[ ${stat##*) } != Z* ]]; }

not_running() { ! runs "$1"; }

# The pid in pid file $1 when that process runs.
alive_pid() {
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && runs "$pid" && echo "$pid"
}

# `stop_pid FILE NAME`: SIGTERM, up to 10 s to exit, then SIGKILL.
stop_pid() {
  local pid
  pid=$(alive_pid "$1") || return 0
  log "stopping $2 (pid $pid)"
  kill "$pid" 2>/dev/null || true
  if ! wait_for 10 "$2 to exit" not_running "$pid"; then
    log "$2 (pid $pid) did not stop within 10 s: killing it"
    kill -9 "$pid" 2>/dev/null || true
  fi
}

# The last lines of a log, to show with an error.
tail_log() { [ -f "$1" ] && { echo "--- last lines of $1:"; tail -n 20 "$1"; } >&2 || true; }

redis_cli() { local port=$1; shift; redis-cli -h 127.0.0.1 -p "$port" --no-auth-warning "$@"; }

# `mysql://user:pass@host:port` → the variables DB_USER DB_PASS DB_HOST DB_PORT.
parse_mysql_url() {
  local rest=${1#mysql://}
  rest=${rest%%/*}
  local auth=root hostport=$rest
  if [[ $rest == *@* ]]; then auth=${rest%@*}; hostport=${rest##*@}; fi
  DB_USER=${auth%%:*}
  DB_PASS=""; [[ $auth == *:* ]] && DB_PASS=${auth#*:}
  DB_HOST=${hostport%%:*}
  DB_PORT=3306; [[ $hostport == *:* ]] && DB_PORT=${hostport##*:}
}

mariadb_sql() {
  MYSQL_PWD=$DB_PASS mariadb --protocol=tcp -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" -e "$1"
}

# The hmdp binary: DEPLOY_HMDP_BIN, or a build of the repository this folder is in (release
# before debug).
find_hmdp() {
  if [ -n "${DEPLOY_HMDP_BIN:-}" ]; then
    [ -x "$DEPLOY_HMDP_BIN" ] || die "DEPLOY_HMDP_BIN=$DEPLOY_HMDP_BIN is not an executable"
    echo "$DEPLOY_HMDP_BIN"; return
  fi
  local target=${CARGO_TARGET_DIR:-$DEPLOY_DIR/../target}
  for profile in release debug; do
    [ -x "$target/$profile/hmdp" ] && { echo "$target/$profile/hmdp"; return; }
  done
  die "no hmdp binary in $target/{release,debug}: run \`cargo build --release -p hmdp\` or set DEPLOY_HMDP_BIN"
}

# ---------------------------------------------------------------------------- up

up() {
  local base=${DEPLOY_BASE_PORT:-18080} n=${DEPLOY_INSTANCES:-3}
  local redis_mode=${DEPLOY_REDIS:-sentinel} transport=${DEPLOY_TRANSPORT:-stream}
  local master=${DEPLOY_SENTINEL_MASTER:-hmdp}
  local mysql_url=${DEPLOY_MYSQL_URL:-mysql://root@127.0.0.1:3306}
  local db_name=${DEPLOY_DB_NAME:-hmdp_shape_$base}
  local trusted=${DEPLOY_TRUSTED_PROXIES:-127.0.0.1/32}
  [[ $base =~ ^[0-9]+$ ]] && [ "$base" -ge 1024 ] && [ "$base" -le 65000 ] ||
    die "DEPLOY_BASE_PORT=$base: a port from 1024 to 65000"
  [[ $n =~ ^[1-9]$ ]] || die "DEPLOY_INSTANCES=$n: 1 to 9"
  case $redis_mode in sentinel | primary) ;; *) die "DEPLOY_REDIS=$redis_mode: sentinel or primary" ;; esac
  case $transport in stream | rabbitmq) ;; *) die "DEPLOY_TRANSPORT=$transport: stream or rabbitmq" ;; esac
  [[ $db_name =~ ^[A-Za-z0-9_]+$ ]] || die "DEPLOY_DB_NAME=$db_name: letters, digits and _ only"

  log "checking the tools"
  need nginx nginx
  need redis-server redis-server
  need redis-cli redis-tools
  need mariadb mariadb-client
  need curl curl
  local rabbitmqctl=${DEPLOY_RABBITMQCTL:-rabbitmqctl}
  [ "$transport" = rabbitmq ] && need "${rabbitmqctl%% *}" rabbitmq-server
  local nginx_bin; nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
  local hmdp; hmdp=$(find_hmdp)

  if [ -f "$SHAPE_ENV" ]; then
    die "$STATE already holds a shape: \`$0 down\` first (or set DEPLOY_STATE_DIR)"
  fi
  local redis_ports=($((base + 10)) $((base + 11)) $((base + 12)))
  local sentinel_ports=($((base + 20)) $((base + 21)) $((base + 22)))
  local ports=("$base") i
  for i in $(seq "$n"); do ports+=($((base + i)) $((base + 30 + i))); done
  ports+=("${redis_ports[@]}" "${sentinel_ports[@]}")
  for i in "${ports[@]}"; do
    listening "$i" && die "port $i is taken: choose another DEPLOY_BASE_PORT"
  done

  log "state folder $STATE"
  mkdir -p "$STATE"/{run,log,uploads,nginx/tmp}
  # Also when the folder was there already: no other user may enter it.
  chmod 700 "$STATE"
  # What `down` and `status` need, written as each part is made.
  {
    echo "BASE=$base"
    echo "N=$n"
    echo "REDIS_MODE=$redis_mode"
    echo "MASTER=$master"
    echo "TRANSPORT=$transport"
  } >"$SHAPE_ENV"

  # The secrets every instance shares: the caller's, else made once here.
  local secrets=$STATE/secrets.env
  (umask 077; {
    echo "HMDP_ADMIN_TOKEN=${HMDP_ADMIN_TOKEN:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
    echo "HMDP_PAY_SECRET=${HMDP_PAY_SECRET:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
  } >"$secrets")

  log "Redis primary on ${redis_ports[0]}, replicas on ${redis_ports[1]} and ${redis_ports[2]}"
  local port
  for port in "${redis_ports[@]}"; do
    local args=(--port "$port" --bind 127.0.0.1 --daemonize yes
      --pidfile "$STATE/run/redis-$port.pid" --logfile "$STATE/log/redis-$port.log"
      --dir "$STATE/redis-$port" --save "" --appendonly no
      # A flash sale's keys must never be evicted.
      --maxmemory-policy noeviction)
    [ "$port" != "${redis_ports[0]}" ] && args+=(--replicaof 127.0.0.1 "${redis_ports[0]}")
    mkdir -p "$STATE/redis-$port"
    redis-server "${args[@]}" >>"$STATE/log/redis-$port.log" 2>&1 || { tail_log "$STATE/log/redis-$port.log"; die "redis-server on $port did not start"; }
    echo "REDIS_PORTS=\"\${REDIS_PORTS:-} $port\"" >>"$SHAPE_ENV"
  done
  for port in "${redis_ports[@]}"; do
    wait_for 10 "Redis $port" redis_cli "$port" ping ||
      { tail_log "$STATE/log/redis-$port.log"; die "Redis on $port is not answering"; }
  done
  for port in "${redis_ports[@]:1}"; do
    wait_for 20 "replica $port in sync" bash -c \
      "redis-cli -h 127.0.0.1 -p $port info replication | grep -q master_link_status:up" ||
      { tail_log "$STATE/log/redis-$port.log"; die "the replica on $port did not sync"; }
  done

  log "Redis Sentinels on ${sentinel_ports[*]}, watching \"$master\""
  for port in "${sentinel_ports[@]}"; do
    mkdir -p "$STATE/sentinel-$port"
    # Sentinel rewrites its file (what it learnt), so each gets its own.
    cat >"$STATE/sentinel-$port/sentinel.conf" <<EOF
port $port
bind 127.0.0.1
daemonize yes
pidfile $STATE/run/sentinel-$port.pid
logfile $STATE/log/sentinel-$port.log
dir $STATE/sentinel-$port
sentinel monitor $master 127.0.0.1 ${redis_ports[0]} 2
sentinel down-after-milliseconds $master 2000
sentinel failover-timeout $master 10000
sentinel parallel-syncs $master 1
EOF
    redis-server "$STATE/sentinel-$port/sentinel.conf" --sentinel >>"$STATE/log/sentinel-$port.log" 2>&1 ||
      { tail_log "$STATE/log/sentinel-$port.log"; die "the Sentinel on $port did not start"; }
    echo "SENTINEL_PORTS=\"\${SENTINEL_PORTS:-} $port\"" >>"$SHAPE_ENV"
  done
  for port in "${sentinel_ports[@]}"; do
    # Each Sentinel must know the two replicas and the two other Sentinels before a failover
    # can be agreed on (they find each other through the primary within a few seconds).
    wait_for 30 "Sentinel $port sees the shape" bash -c \
      "redis-cli -h 127.0.0.1 -p $port info sentinel | grep -q 'name=$master,status=ok,.*slaves=2,sentinels=3'" ||
      { tail_log "$STATE/log/sentinel-$port.log"; die "the Sentinel on $port does not see 2 replicas and 3 Sentinels"; }
  done

  parse_mysql_url "$mysql_url"
  log "MariaDB database $db_name on $DB_HOST:$DB_PORT"
  mariadb_sql "CREATE DATABASE \`$db_name\` CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci" ||
    die "cannot create the database $db_name on $DB_HOST:$DB_PORT as $DB_USER (it must not exist yet; set DEPLOY_MYSQL_URL / DEPLOY_DB_NAME)"
  echo "MYSQL_URL=$mysql_url" >>"$SHAPE_ENV"
  echo "DB_NAME=$db_name" >>"$SHAPE_ENV"
  local userinfo=$DB_USER; [ -n "$DB_PASS" ] && userinfo="$DB_USER:$DB_PASS"
  local database_url="mysql://$userinfo@$DB_HOST:$DB_PORT/$db_name"

  local amqp_url=""
  if [ "$transport" = rabbitmq ]; then
    local amqp_base=${DEPLOY_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672}
    amqp_base=${amqp_base%/}
    local vhost=hmdp_shape_$base amqp_user=${amqp_base#amqp://}
    amqp_user=${amqp_user%%[:@]*}
    log "RabbitMQ vhost $vhost (user $amqp_user)"
    $rabbitmqctl -q add_vhost "$vhost" || die "rabbitmqctl add_vhost $vhost failed (run as root or the rabbitmq user, or set DEPLOY_RABBITMQCTL)"
    echo "VHOST=$vhost" >>"$SHAPE_ENV"
    echo "RABBITMQCTL=\"$rabbitmqctl\"" >>"$SHAPE_ENV"
    $rabbitmqctl -q set_permissions -p "$vhost" "$amqp_user" '.*' '.*' '.*' >/dev/null ||
      die "rabbitmqctl set_permissions for $amqp_user on $vhost failed"
    amqp_url="$amqp_base/$vhost"
  fi

  # What every instance gets: the caller's HMDP_* settings, the secrets, then the shape's.
  local common=(
    "HMDP_DATABASE_URL=$database_url"
    "HMDP_REDIS_MANAGED=never"
    "HMDP_UPLOAD_DIR=$STATE/uploads"
    "HMDP_TRUSTED_PROXIES=$trusted"
    "HMDP_SMS=${HMDP_SMS:-log}"
    "HMDP_ORDER_TRANSPORT=$transport"
    # An accepted grab is answered once a replica holds it, so a failover keeps it.
    "HMDP_REDIS_WAIT_REPLICAS=${HMDP_REDIS_WAIT_REPLICAS:-1}"
  )
  [ -n "$amqp_url" ] && common+=("HMDP_AMQP_URL=$amqp_url")
  if [ "$redis_mode" = sentinel ]; then
    local list="" p
    for p in "${sentinel_ports[@]}"; do list+="${list:+,}127.0.0.1:$p"; done
    common+=("HMDP_REDIS_SENTINELS=$list" "HMDP_REDIS_SENTINEL_MASTER=$master")
  else
    common+=("HMDP_REDIS_URL=redis://127.0.0.1:${redis_ports[0]}")
  fi
  set -a; . "$secrets"; set +a

  log "schema (hmdp migrate) with $hmdp"
  env "${common[@]}" HMDP_DATA_DIR="$STATE/hmdp-migrate" "$hmdp" migrate >"$STATE/log/hmdp-migrate.log" 2>&1 ||
    { tail_log "$STATE/log/hmdp-migrate.log"; die "hmdp migrate failed"; }

  for i in $(seq "$n"); do
    port=$((base + i))
    log "hmdp instance $i on $port (metrics for the scraper on $((base + 30 + i)))"
    mkdir -p "$STATE/hmdp-$i"
    # The scraper's listener: /metrics and /health without the admin token, on loopback, so a
    # Prometheus (deploy/observability/prometheus.yml) needs no credential.
    env "${common[@]}" \
      HMDP_LISTEN="127.0.0.1:$port" \
      HMDP_METRICS_LISTEN="127.0.0.1:$((base + 30 + i))" \
      HMDP_DATA_DIR="$STATE/hmdp-$i" \
      HMDP_WORKER_CONSUMER="hmdp-$i" \
      setsid "$hmdp" serve </dev/null >"$STATE/log/hmdp-$i.log" 2>&1 &
    echo $! >"$STATE/run/hmdp-$i.pid"
  done
  for i in $(seq "$n"); do
    port=$((base + i))
    wait_for 60 "hmdp $i" curl -fsS "http://127.0.0.1:$port/health" ||
      { tail_log "$STATE/log/hmdp-$i.log"; die "hmdp instance $i (port $port) is not healthy"; }
  done

  log "nginx on $base in front of the $n instances"
  local servers="" body_max
  for i in $(seq "$n"); do
    servers+="        server 127.0.0.1:$((base + i)) max_fails=1 fail_timeout=5s;"$'\n'
  done
  # hmdp's limit plus room for the multipart framing around the photo.
  body_max=$(( ${HMDP_UPLOAD_MAX_BYTES:-8388608} + 65536 ))
  local user_line="" nginx_tmp=$STATE/nginx/tmp
  if [ "$(id -u)" = 0 ]; then
    # A master started as root runs its workers as an unprivileged user, who writes the temp
    # files (request bodies). That user cannot enter the private state folder, so they get a
    # private folder of their own, outside it, which `down` removes.
    user_line="user nobody nogroup;"
    nginx_tmp=$(mktemp -d "${TMPDIR:-/tmp}/hmdp-shape-nginx.XXXXXX")
    echo "NGINX_TMP=$nginx_tmp" >>"$SHAPE_ENV"
    chown nobody:nogroup "$nginx_tmp"
    runuser -u nobody -- test -w "$nginx_tmp" ||
      die "nginx's workers (user nobody) cannot reach $nginx_tmp: set TMPDIR to a folder whose parent folders everyone may enter"
  fi
  local conf; conf=$(<"$DEPLOY_DIR/nginx.conf")
  conf=${conf//@UPSTREAM_SERVERS@/${servers%$'\n'}}
  conf=${conf//@USER_LINE@/$user_line}
  conf=${conf//@WORKER_PROCESSES@/2}
  conf=${conf//@STATE@/$STATE}
  conf=${conf//@NGINX_TMP@/$nginx_tmp}
  conf=${conf//@LISTEN@/127.0.0.1:$base}
  conf=${conf//@CLIENT_MAX_BODY@/$body_max}
  printf '%s\n' "$conf" >"$STATE/nginx/nginx.conf"
  "$nginx_bin" -t -q -p "$STATE/nginx" -e "$STATE/log/nginx-error.log" -c "$STATE/nginx/nginx.conf" ||
    { tail_log "$STATE/log/nginx-error.log"; die "nginx refuses $STATE/nginx/nginx.conf"; }
  "$nginx_bin" -p "$STATE/nginx" -e "$STATE/log/nginx-error.log" -c "$STATE/nginx/nginx.conf" \
    >>"$STATE/log/nginx-error.log" 2>&1 ||
    { tail_log "$STATE/log/nginx-error.log"; die "nginx did not start"; }
  wait_for 20 "nginx" curl -fsS "http://127.0.0.1:$base/health" ||
    { tail_log "$STATE/log/nginx-error.log"; die "nginx on $base does not reach the instances"; }

  log "up: http://127.0.0.1:$base/ (admin token and pay secret in $secrets)"
}

# ---------------------------------------------------------------------------- down

down() {
  [ -f "$SHAPE_ENV" ] || { log "nothing to stop: no $SHAPE_ENV"; return 0; }
  # shellcheck disable=SC1090
  . "$SHAPE_ENV"
  local f port
  stop_pid "$STATE/run/nginx.pid" nginx
  for f in "$STATE"/run/hmdp-*.pid; do
    [ -e "$f" ] || continue
    stop_pid "$f" "$(basename "$f" .pid)"
  done
  for port in ${SENTINEL_PORTS:-}; do
    stop_pid "$STATE/run/sentinel-$port.pid" "the Sentinel on $port"
  done
  for port in ${REDIS_PORTS:-}; do
    stop_pid "$STATE/run/redis-$port.pid" "Redis on $port"
  done
  if [ -n "${DB_NAME:-}" ]; then
    parse_mysql_url "$MYSQL_URL"
    log "dropping the database $DB_NAME"
    mariadb_sql "DROP DATABASE IF EXISTS \`$DB_NAME\`" || log "could not drop $DB_NAME: drop it by hand"
  fi
  if [ -n "${VHOST:-}" ]; then
    log "deleting the RabbitMQ vhost $VHOST"
    $RABBITMQCTL -q delete_vhost "$VHOST" || log "could not delete the vhost $VHOST: delete it by hand"
  fi
  if [ -n "${NGINX_TMP:-}" ]; then rm -rf "$NGINX_TMP"; fi
  log "removing $STATE"
  rm -rf "$STATE"
  log "down"
}

# ---------------------------------------------------------------------------- status

status() {
  [ -f "$SHAPE_ENV" ] || { log "no shape in $STATE"; return 3; }
  # shellcheck disable=SC1090
  . "$SHAPE_ENV"
  local bad=0 port i pid
  row() { printf '%-22s %-17s %-8s %s\n' "$@"; }
  row PART ADDRESS PID STATE
  if pid=$(alive_pid "$STATE/run/nginx.pid"); then
    row nginx "127.0.0.1:$BASE" "$pid" "$(curl -s -o /dev/null -w '/health %{http_code}' "http://127.0.0.1:$BASE/health")"
  else row nginx "127.0.0.1:$BASE" - down; bad=1; fi
  for i in $(seq "$N"); do
    port=$((BASE + i))
    if pid=$(alive_pid "$STATE/run/hmdp-$i.pid"); then
      row "hmdp $i" "127.0.0.1:$port" "$pid" "$(curl -s -o /dev/null -w '/health %{http_code}' "http://127.0.0.1:$port/health")"
    else row "hmdp $i" "127.0.0.1:$port" - down; bad=1; fi
  done
  for port in ${REDIS_PORTS:-}; do
    if pid=$(alive_pid "$STATE/run/redis-$port.pid"); then
      row "redis" "127.0.0.1:$port" "$pid" "$(redis_cli "$port" info replication | tr -d '\r' | grep '^role:')"
    else row "redis" "127.0.0.1:$port" - down; bad=1; fi
  done
  for port in ${SENTINEL_PORTS:-}; do
    if pid=$(alive_pid "$STATE/run/sentinel-$port.pid"); then
      row "sentinel" "127.0.0.1:$port" "$pid" "primary at $(redis_cli "$port" sentinel get-master-addr-by-name "$MASTER" | paste -sd: -)"
    else row "sentinel" "127.0.0.1:$port" - down; bad=1; fi
  done
  [ -n "${DB_NAME:-}" ] && row database "${MYSQL_URL#*@}" - "$DB_NAME"
  [ -n "${VHOST:-}" ] && row rabbitmq vhost - "$VHOST"
  row redis-for-hmdp - - "$REDIS_MODE"
  [ $bad = 0 ] || return 3
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status (settings: see the top of this file)" >&2; exit 2 ;;
esac
