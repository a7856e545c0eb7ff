#!/usr/bin/env bash
# Fuzzes a running hmdp with schemathesis, generated from the service's own /openapi.json:
# no answer may be a 5xx, and every answer must have a documented status, the documented content
# type and a body that matches its documented schema (the JSON envelope). Runs against SQLite and MariaDB, a bounded number of examples per operation.
#
#   scripts/fuzz.sh    # HMDP_FUZZ_EXAMPLES (default 25) examples per operation; a fixed
#                      # HMDP_FUZZ_SEED keeps CI reproducible: set another to explore further
#
# Needs Redis and MariaDB as scripts/test.sh sets them up (it calls this script at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1m[fuzz.sh]\033[0m %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }

apt_install() {
  log "installing $* (apt-get)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# What this script runs besides the service (scripts/test.sh installs these too).
need_install=()
command -v python3 >/dev/null || need_install+=(python3 python3-venv)
command -v curl >/dev/null || need_install+=(curl)
if [ ${#need_install[@]} -gt 0 ]; then apt_install "${need_install[@]}"; fi

venv="${HMDP_FUZZ_VENV:-$HOME/.cache/hmdp-fuzz-venv}"
if [ ! -x "$venv/bin/schemathesis" ]; then
  log "installing schemathesis into $venv"
  # Debian's python3 makes venvs only with python3-venv installed (it carries ensurepip).
  if ! python3 -m venv "$venv" 2>/dev/null; then
    apt_install python3-venv
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check schemathesis
fi

cargo build -q -p hmdp
bin="${CARGO_TARGET_DIR:-target}/debug/hmdp"
redis_url="${HMDP_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
mysql_server="${HMDP_TEST_MYSQL_URL:-}"
if [ -z "$mysql_server" ]; then
  if mariadb -h 127.0.0.1 -uroot -e 'SELECT 1' >/dev/null 2>&1; then
    mysql_server="mysql://root@127.0.0.1:3306"
  else
    mysql_server="mysql://hmdp_test:hmdp_test@127.0.0.1:3306"
  fi
fi
admin="fuzz-admin-token-$RANDOM$RANDOM"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

fuzz_one() {
  local name="$1" db_url="$2"
  local dir port prefix pid code token
  dir=$(mktemp -d)
  port=$(free_port)
  prefix="fuzz:$RANDOM$RANDOM:"
  HMDP_LISTEN="127.0.0.1:$port" HMDP_DATABASE_URL="${db_url:-sqlite://$dir/hmdp.db}" \
    HMDP_REDIS_URL="$redis_url" HMDP_REDIS_PREFIX="$prefix" HMDP_ADMIN_TOKEN="$admin" \
    HMDP_DATA_DIR="$dir" HMDP_RATE_LIMIT_IP=0 HMDP_RATE_LIMIT_USER=0 HMDP_CODE_IP_PER_MIN=0 HMDP_LOG=info \
    "$bin" >"$dir/hmdp.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
  curl -sf -X POST "http://127.0.0.1:$port/user/code?phone=13812345678" >/dev/null
  code=$(grep -o 'login code for 13812345678 is [0-9]*' "$dir/hmdp.log" | tail -1 | awk '{print $NF}')
  token=$(curl -sf -X POST "http://127.0.0.1:$port/user/login" -H 'content-type: application/json' \
    -d "{\"phone\":\"13812345678\",\"code\":\"$code\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"])')
  log "$name: fuzzing http://127.0.0.1:$port"
  local status=0
  local st=("$venv/bin/schemathesis" run "http://127.0.0.1:$port/openapi.json"
    --checks not_a_server_error,content_type_conformance,status_code_conformance,response_schema_conformance
    --max-examples "${HMDP_FUZZ_EXAMPLES:-25}" --seed "${HMDP_FUZZ_SEED:-20261121}"
    --request-timeout 10 --no-color
    -H "authorization: $token" -H "x-admin-token: $admin")
  # Logout on its own, last: it ends the session every login-required operation is fuzzed
  # with, and they would see nothing but 401s after it.
  "${st[@]}" --exclude-path /user/logout || status=$?
  "${st[@]}" --include-path /user/logout || status=$?
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if grep -q 'request failed' "$dir/hmdp.log" && grep -q 'code="internal"' "$dir/hmdp.log"; then
    log "$name: internal errors in the service log:"; grep 'code="internal"' "$dir/hmdp.log" | head -5 >&2
    status=1
  fi
  redis-cli -u "$redis_url" --scan --pattern "$prefix*" | xargs -r redis-cli -u "$redis_url" del >/dev/null
  redis-cli -u "$redis_url" --scan --pattern "{$prefix*" | xargs -r redis-cli -u "$redis_url" del >/dev/null
  rm -rf "$dir"
  return $status
}

fuzz_one sqlite ""
db="hmdp_fuzz_$RANDOM$RANDOM"
fuzz_one mariadb "$mysql_server/$db"
python3 - "$mysql_server" "$db" <<'PY' || true
import subprocess, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
args = ["mariadb", "-h", u.hostname or "127.0.0.1", "-P", str(u.port or 3306), "-u", u.username or "root"]
if u.password:
    args.append(f"-p{u.password}")
subprocess.run(args + ["-e", f"DROP DATABASE IF EXISTS `{sys.argv[2]}`"], check=False)
PY
log "no 5xx and only enveloped answers, on SQLite and MariaDB"
