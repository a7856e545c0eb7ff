#!/usr/bin/env bash
# hmdp against a bare server (`hmdp-bench floor`) under wrk, a C client
# (2 threads, 256 connections), every request with a random logged-in user's token. Workloads:
# the floor, hmdp's 404, a cached GET /shop/1, the grab of a sold-out voucher by 2,000 users, and
# the grab while buying (each round a new voucher with stock 20,000 grabbed once by each of
# 20,000 users, `wrk-once.lua`; it ends when every user was answered); interleaved over ROUNDS
# rounds, medians and ratios to the floor printed at the end.
# hmdp runs on MariaDB-free embedded defaults (SQLite) with the abuse limits off.
#   scripts/wrk-floor.sh [ROUNDS] [SECONDS] [NAME=HMDP_BINARY ...]
# With NAME=BINARY pairs (e.g. before=/tmp/hmdp-before after=/tmp/hmdp-after) every build runs
# as its own server (idle while the others are measured) and each round measures them in turn;
# without, the hmdp of CARGO_TARGET_DIR's release build ("hmdp").
# (build first: cargo build --release -p hmdp -p hmdp-bench)
# WORKLOADS="404 shop" measures only those (and always the floor).
# Writes crates/hmdp-bench/results/wrk-floor.{txt,uptime}.
set -euo pipefail
ROUNDS=${1:-3} SECS=${2:-15}
shift $(( $# < 2 ? $# : 2 ))
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
HERE="$(cd "$(dirname "$0")" && pwd)" R="$(cd "$(dirname "$0")/.." && pwd)/results"
FP=18094 token=benchadmintoken0123456789
BUILDS=("$@")
[ ${#BUILDS[@]} -gt 0 ] || BUILDS=("hmdp=$CARGO_TARGET_DIR/release/hmdp")
work=$(mktemp -d)
pids=() prefixes=() names=()
declare -A URL PORT PREFIX
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  for p in "${prefixes[@]}"; do
    redis-cli --scan --pattern "$p*" | xargs -r -n 1000 redis-cli del > /dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
"$B" floor --listen 127.0.0.1:$FP 2> "$work/floor.log" &
pids+=($!)
until curl -s http://127.0.0.1:$FP/ > /dev/null; do sleep 0.1; done
URL[floor]=http://127.0.0.1:$FP/shop/1
port=18093
for build in "${BUILDS[@]}"; do
  name=${build%%=*} bin=${build#*=} prefix=wrk$RANDOM: data=$work/$name
  mkdir -p "$data"
  (cd "$data" && exec env HMDP_LISTEN=127.0.0.1:$port HMDP_DATA_DIR=$data HMDP_REDIS_PREFIX=$prefix \
    HMDP_ADMIN_TOKEN=$token HMDP_LOG=warn HMDP_REDIS_MANAGED=never HMDP_RATE_LIMIT_IP=0 \
    HMDP_RATE_LIMIT_USER=0 HMDP_CODE_IP_PER_MIN=0 HMDP_SMS_HOURLY_LIMIT=0 HMDP_MAX_CONNECTIONS_PER_IP=0 "$bin" serve > "$data/hmdp.log" 2>&1) &
  pids+=($!) prefixes+=("$prefix") names+=("$name") PREFIX[$name]=$prefix
  until curl -sf http://127.0.0.1:$port/health > /dev/null; do sleep 0.2; done
  voucher=$("$B" tokens --url http://127.0.0.1:$port --redis-prefix $prefix --admin-token $token \
    --users 20000 --stock 1 --out "$data/buyers" 2> /dev/null)
  head -2000 "$data/buyers" > "$data/tokens"
  PORT[$name]=$port
  curl -sf http://127.0.0.1:$port/shop/1 > /dev/null
  # The voucher sells its one unit, then every grab is a refusal.
  TOKENS="$data/tokens" METHOD=POST wrk -t2 -c8 -d1s -s "$HERE/wrk-token.lua" \
    http://127.0.0.1:$port/voucher-order/seckill/$voucher > /dev/null
  URL[$name/404]=http://127.0.0.1:$port/no-such-route
  URL[$name/shop]=http://127.0.0.1:$port/shop/1
  URL[$name/grab]=http://127.0.0.1:$port/voucher-order/seckill/$voucher
  port=$((port + 2))
done
uptime > "$R/wrk-floor.uptime"
: > "$R/wrk-floor.txt"
for round in $(seq "$ROUNDS"); do
  for w in floor ${WORKLOADS:-404 shop grab buy}; do
    targets=(floor)
    [ $w = floor ] || targets=("${names[@]/%//$w}")
    for t in "${targets[@]}"; do
      method=GET; [ $w = grab ] && method=POST
      tokens=$work/${t%%/*}/tokens; [ $t = floor ] && tokens=$work/${names[0]}/tokens
      if [ $w = buy ]; then
        n=${t%%/*} port=${PORT[${t%%/*}]}
        voucher=$("$B" tokens --url http://127.0.0.1:$port --redis-prefix "${PREFIX[$n]}" \
          --admin-token $token --users 0 --stock 20000 --out "$work/$n/none" 2> /dev/null)
        # -d only bounds it: the threads stop once each of their users was answered.
        out=$(TOKENS=$work/$n/buyers wrk -t2 -c256 -d10s --latency -s "$HERE/wrk-once.lua" \
          http://127.0.0.1:$port/voucher-order/seckill/$voucher)
        echo "round $round $t $(grep '^once:' <<<"$out")" >> "$R/wrk-floor.txt"
        # wrk's own rate divides by all of -d: the rate over the buying itself replaces it.
        out=$(sed -E "s|^Requests/sec:.*|Requests/sec: $(awk '/^once:/ {print $NF}' <<<"$out")|" <<<"$out")
      else
        out=$(TOKENS=$tokens METHOD=$method wrk -t2 -c256 -d${SECS}s --latency -s "$HERE/wrk-token.lua" "${URL[$t]}")
      fi
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
      bad=$(awk '/Non-2xx/ {print $5}' <<<"$out")
      echo "round $round $t req/s=$rps p99=$p99 non2xx=${bad:-0}" | tee -a "$R/wrk-floor.txt"
    done
  done
done
uptime >> "$R/wrk-floor.uptime"
python3 - "$R/wrk-floor.txt" "${names[@]}" <<'PY' | tee -a "$R/wrk-floor.txt"
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\S+) req/s=([\d.]+) p99=([\d.]+)(us|ms|s)", line)
    if m:
        scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(4)]
        runs.setdefault(m.group(1), []).append((float(m.group(2)), float(m.group(3)) * scale))
floor = statistics.median(r for r, _ in runs["floor"])
print("\nmedians (wrk -t2 -c256, a random token on every request):")
print("| workload | req/s | / floor | p99 ms |")
print("|---|---|---|---|")
for w in ["floor"] + [f"{n}/{w}" for w in ("404", "shop", "grab", "buy") for n in sys.argv[2:]
                     if f"{n}/{w}" in runs]:
    rps = statistics.median(r for r, _ in runs[w])
    p99 = statistics.median(p for _, p in runs[w])
    print(f"| {w} | {rps:,.0f} | {rps / floor:.2f}x | {p99:.2f} |")
PY
