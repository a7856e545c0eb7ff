#!/usr/bin/env bash
# A profile of where a hmdp build spends its CPU while wrk (2 threads, 256 connections, a
# random logged-in user's token on every request) asks for one path. perf samples the server
# for 10 s, starting 3 s into a 15 s load. PATH may name the sold-out voucher as VOUCHER
# (`/voucher-order/seckill/VOUCHER`, POST); PATH `buy` profiles the grab while buying instead:
# five vouchers of stock 20,000 in a row, each grabbed once by each of 20,000 users
# (wrk-once.lua), perf sampling from the first to the last.
#   scripts/perf-wrk.sh NAME=HMDP_BINARY [PATH] [METHOD]     (default /no-such-route, GET)
# Writes crates/hmdp-bench/results/perf-NAME.txt (and keeps perf.data at $KEEP_PERF if set).
# Needs perf (Debian: linux-perf) and wrk.
set -euo pipefail
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
command -v perf >/dev/null || { echo "perf is missing: apt-get install linux-perf" >&2; exit 1; }
build=$1 path=${2:-/no-such-route} method=${3:-GET}
name=${build%%=*} bin=${build#*=}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
HERE="$(cd "$(dirname "$0")" && pwd)" R="$(cd "$(dirname "$0")/.." && pwd)/results"
port=18097 prefix=perf$RANDOM: token=benchadmintoken0123456789 data=$(mktemp -d)
cleanup() {
  kill "$srv" 2>/dev/null || true
  wait 2>/dev/null || true
  redis-cli --scan --pattern "$prefix*" | xargs -r -n 1000 redis-cli del > /dev/null
  rm -rf "$data"
}
trap cleanup EXIT
(cd "$data" && exec env HMDP_LISTEN=127.0.0.1:$port HMDP_DATA_DIR=$data HMDP_REDIS_PREFIX=$prefix \
  HMDP_ADMIN_TOKEN=$token HMDP_LOG=warn HMDP_REDIS_MANAGED=never HMDP_RATE_LIMIT_IP=0 \
  HMDP_RATE_LIMIT_USER=0 HMDP_CODE_IP_PER_MIN=0 HMDP_SMS_HOURLY_LIMIT=0 HMDP_MAX_CONNECTIONS_PER_IP=0 "$bin" serve \
  > "$data/hmdp.log" 2>&1) &
until curl -sf http://127.0.0.1:$port/health > /dev/null; do sleep 0.2; done
srv=$(pgrep -f "^$bin serve" | head -1)
users=2000; [ "$path" = buy ] && users=20000
"$B" tokens --url http://127.0.0.1:$port --redis-prefix $prefix --admin-token $token \
  --users $users --stock 1 --out "$data/tokens" > "$data/voucher" 2> /dev/null
if [ "$path" = buy ]; then
  vouchers=()
  for _ in 1 2 3 4 5; do
    vouchers+=("$("$B" tokens --url http://127.0.0.1:$port --redis-prefix $prefix \
      --admin-token $token --users 0 --stock 20000 --out "$data/none" 2> /dev/null)")
  done
  perf record -e cpu-clock -F 999 -g -p "$srv" -o "$data/perf.data" 2> /dev/null &
  perf_pid=$!
  out=""
  for v in "${vouchers[@]}"; do
    out+=$(TOKENS=$data/tokens wrk -t2 -c256 -d3s --latency -s "$HERE/wrk-once.lua" \
      "http://127.0.0.1:$port/voucher-order/seckill/$v" | grep -E "^once:|99%")$'\n'
  done
  kill -INT "$perf_pid"; wait "$perf_pid" || true
else
  path=${path//VOUCHER/$(cat "$data/voucher")}
  (sleep 3; perf record -e cpu-clock -F 999 -g -p "$srv" -o "$data/perf.data" -- sleep 10 2> /dev/null) &
  perf_pid=$!
  out=$(TOKENS=$data/tokens METHOD=$method wrk -t2 -c256 -d15s --latency -s "$HERE/wrk-token.lua" \
    "http://127.0.0.1:$port$path")
  wait "$perf_pid"
fi
[ -z "${KEEP_PERF:-}" ] || cp "$data/perf.data" "$KEEP_PERF"
{ if [ "$path" = buy ]; then
    echo "# perf record -e cpu-clock -F 999 -g on '$name' ($bin serve) over five buying rounds:"
    echo "# wrk -t2 -c256 -s wrk-once.lua, stock 20,000 each, each of 20,000 users grabbing once"
  else
    echo "# perf record -e cpu-clock -F 999 -g on '$name' ($bin serve), 10 s of:"
    echo "# wrk -t2 -c256 -d15s, $method $path, a random token of 2,000 users on each request"
  fi
  grep -E "Requests/sec|99%|^once:" <<<"$out"
  echo; echo "## by shared object (share, samples at 999 Hz: CPU time = samples / 999 s)"
  perf report -i "$data/perf.data" --no-children -n --sort dso --stdio -g none 2>/dev/null \
    | grep -v "^#" | grep -v "^$" | head -8
  echo; echo "## top symbols"
  perf report -i "$data/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null \
    | grep -v "^#" | grep -v "^$" | head -45
} > "$R/perf-$name.txt" || true  # head closes the pipes early (SIGPIPE under pipefail)
head -8 "$R/perf-$name.txt"
