#!/usr/bin/env bash
# Runs the whole hmdp test suite against real Redis, MariaDB and RabbitMQ.
#
#   scripts/test.sh            # everything (what CI runs), the book under docs/ included
#   scripts/test.sh -p hmdp    # extra arguments go to `cargo test`
#
# It makes sure what the tests need is there first: installs redis-server, mariadb-server,
# rabbitmq-server, nginx (the deploy/ shape's test), chromium + chromium-driver, prometheus (the
# board and alerts of deploy/observability/), and python3 + python3-venv + curl (for the
# fuzzing) with apt-get when missing (as root, or through sudo), starts the servers when they
# are not running, and creates a MariaDB account for the tests. Override the targets with
# HMDP_TEST_REDIS_URL, HMDP_TEST_MYSQL_URL and HMDP_TEST_AMQP_URL to use servers of your own.
# The RabbitMQ tests make a throw-away vhost each with rabbitmqctl (as root or the rabbitmq
# user); HMDP_TEST_RABBITMQCTL names another command for that (e.g. one in a container).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[test.sh]\033[0m %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }

need_install=()
command -v redis-server >/dev/null || need_install+=(redis-server)
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || need_install+=(mariadb-server)
command -v mariadb >/dev/null || need_install+=(mariadb-client)
# The order transport's tests: a real broker, and rabbitmqctl for a vhost per test.
if [ -z "${HMDP_TEST_AMQP_URL:-}" ]; then
  command -v rabbitmqctl >/dev/null || [ -x /usr/sbin/rabbitmqctl ] || need_install+=(rabbitmq-server)
fi
# The deploy test runs deploy/shape.sh: a private nginx in front of three instances.
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need_install+=(nginx)
# The UI test drives Debian's headless Chromium over WebDriver (no browser downloads).
command -v chromium >/dev/null || need_install+=(chromium)
command -v chromedriver >/dev/null || need_install+=(chromium-driver)
# Only for readable screenshots (Chinese text); the UI test checks text, not pixels.
dpkg -s fonts-wqy-microhei >/dev/null 2>&1 || need_install+=(fonts-wqy-microhei)
dpkg -s fonts-noto-color-emoji >/dev/null 2>&1 || need_install+=(fonts-noto-color-emoji)
# scripts/fuzz.sh (run at the end): schemathesis in a Python venv, curl to drive the service.
command -v python3 >/dev/null || need_install+=(python3)
dpkg -s python3-venv >/dev/null 2>&1 || need_install+=(python3-venv)
command -v curl >/dev/null || need_install+=(curl)
# The observability test runs deploy/observability/ on a private Prometheus (promtool too).
need_prometheus=
command -v prometheus >/dev/null && command -v promtool >/dev/null || need_prometheus=1
if [ ${#need_install[@]} -gt 0 ] || [ -n "$need_prometheus" ]; then
  as_root apt-get update -qq
fi
if [ ${#need_install[@]} -gt 0 ]; then
  log "installing ${need_install[*]} (apt-get)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_install[@]}" >/dev/null
fi
if [ -n "$need_prometheus" ]; then
  # Without recommends: no node exporter. Debian starts the package's own Prometheus where an
  # init system runs; the test runs a private one, so the system one is stopped and disabled
  # (it would hold port 9090 and scrape for nothing).
  log "installing prometheus (apt-get, for prometheus and promtool)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [ -d /run/systemd/system ]; then
    as_root systemctl disable --now prometheus >/dev/null 2>&1 || true
  else
    as_root service prometheus stop >/dev/null 2>&1 || true
    as_root update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
fi

# Redis on 127.0.0.1:6379 unless HMDP_TEST_REDIS_URL points elsewhere.
if [ -z "${HMDP_TEST_REDIS_URL:-}" ]; then
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    log "starting redis-server on 127.0.0.1:6379"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --logfile "${TMPDIR:-/tmp}/hmdp-test-redis.log"
    for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null || { log "Redis is not answering on 6379"; exit 1; }
fi

# MariaDB on 127.0.0.1:3306, with an account the tests can use over TCP.
if [ -z "${HMDP_TEST_MYSQL_URL:-}" ]; then
  if ! mariadb-admin ping >/dev/null 2>&1 && ! mariadb-admin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then
    log "starting mariadbd"
    as_root mkdir -p /run/mysqld
    as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
    as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
    for _ in $(seq 100); do mariadb-admin ping >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  if mariadb -h 127.0.0.1 -uroot -e 'SELECT 1' >/dev/null 2>&1; then
    export HMDP_TEST_MYSQL_URL="mysql://root@127.0.0.1:3306"
  else
    # A fresh Debian install lets root in only through the socket: add a test account.
    log "creating the MariaDB account hmdp_test for the tests"
    as_root mariadb -e "CREATE USER IF NOT EXISTS 'hmdp_test'@'127.0.0.1' IDENTIFIED BY 'hmdp_test';
      CREATE USER IF NOT EXISTS 'hmdp_test'@'localhost' IDENTIFIED BY 'hmdp_test';
      GRANT ALL PRIVILEGES ON *.* TO 'hmdp_test'@'127.0.0.1';
      GRANT ALL PRIVILEGES ON *.* TO 'hmdp_test'@'localhost';"
    export HMDP_TEST_MYSQL_URL="mysql://hmdp_test:hmdp_test@127.0.0.1:3306"
  fi
fi

# RabbitMQ on 127.0.0.1:5672 unless HMDP_TEST_AMQP_URL points elsewhere. Debian's package
# starts the broker on install where an init system runs; otherwise start it here.
amqp_listening() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }
if [ -z "${HMDP_TEST_AMQP_URL:-}" ]; then
  PATH="$PATH:/usr/sbin"
  if ! as_root rabbitmqctl -q status >/dev/null 2>&1 || ! amqp_listening; then
    if as_root service rabbitmq-server start >/dev/null 2>&1; then
      log "started rabbitmq-server (service rabbitmq-server start)"
    else
      log "starting rabbitmq-server -detached (no init system)"
      as_root rabbitmq-server -detached ||
        { log "cannot start RabbitMQ: run as root or with sudo, or set HMDP_TEST_AMQP_URL"; exit 1; }
    fi
    # await_startup fails at once while the node is not up at all: retry until a deadline.
    deadline=$((SECONDS + 120))
    until as_root rabbitmqctl -q await_startup --timeout 60 >/dev/null 2>&1; do
      [ $SECONDS -lt $deadline ] || { log "RabbitMQ did not finish starting within 120 s"; exit 1; }
      sleep 1
    done
    log "rabbitmq-server is up"
  fi
  amqp_listening || { log "RabbitMQ is not listening on 127.0.0.1:5672"; exit 1; }
fi

command -v cargo >/dev/null || { log "cargo is missing: install Rust from https://rustup.rs"; exit 1; }
amqp_target=${HMDP_TEST_AMQP_URL:-127.0.0.1:5672}
log "redis=${HMDP_TEST_REDIS_URL:-redis://127.0.0.1:6379} mysql=${HMDP_TEST_MYSQL_URL%%:*}://… amqp=${amqp_target##*@}"
# The compatibility tests always load the repository's own fixture of the original schema; the
# original hmdp.sql is loaded too when HMDP_ORIGINAL_SQL names it or it lies in shared/data/
# beside the checkout (never required).
if [ -z "${HMDP_ORIGINAL_SQL:-}" ]; then
  for dir in .. ../.. ../../..; do
    if [ -f "$dir/shared/data/hmdp.sql" ]; then
      HMDP_ORIGINAL_SQL="$(cd "$dir/shared/data" && pwd)/hmdp.sql"; export HMDP_ORIGINAL_SQL; break
    fi
  done
fi
log "compat tests: crates/hmdp/tests/fixtures/original-schema.sql + ${HMDP_ORIGINAL_SQL:-no original hmdp.sql (set HMDP_ORIGINAL_SQL to add it)}"
# The book under docs/ first (skipped when arguments narrow the run): seconds once its pinned
# mdbook is installed, and a chapter that does not render fails before the long test run.
if [ $# -eq 0 ]; then
  scripts/book.sh
fi
cargo test --workspace --no-fail-fast "$@"
# Then fuzz the running service from its OpenAPI document (skipped when arguments narrow the run).
if [ $# -eq 0 ]; then
  scripts/fuzz.sh
fi
