#!/usr/bin/env bash
# Step 12's measurement: hmdp against a bare server (`hmdp-bench floor`) under wrk, a C client
# (2 threads, 256 connections), every request with a random logged-in user's token. Workloads:
# the floor, hmdp's 404, a cached GET /shop/1, and the grab of a sold-out voucher by 2,000
# users; interleaved over ROUNDS rounds, medians and ratios to the floor printed at the end.
# hmdp runs on MariaDB-free embedded defaults (SQLite) with the abuse limits off.
#   scripts/wrk-floor.sh [ROUNDS] [SECONDS]     (build first: cargo build --release -p hmdp -p hmdp-bench)
# Writes crates/hmdp-bench/results/wrk-floor.{txt,uptime}.
set -euo pipefail
ROUNDS=${1:-3} SECS=${2:-15}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench H=$CARGO_TARGET_DIR/release/hmdp
HERE="$(cd "$(dirname "$0")" && pwd)" R="$(cd "$(dirname "$0")/.." && pwd)/results"
HP=18093 FP=18094 prefix=wrk$RANDOM: token=benchadmintoken0123456789
data=$(mktemp -d)
(cd "$data" && exec env HMDP_LISTEN=127.0.0.1:$HP HMDP_DATA_DIR=$data HMDP_REDIS_PREFIX=$prefix \
  HMDP_ADMIN_TOKEN=$token HMDP_LOG=warn HMDP_REDIS_MANAGED=never HMDP_RATE_LIMIT_IP=0 \
  HMDP_RATE_LIMIT_USER=0 HMDP_CODE_IP_PER_MIN=0 HMDP_MAX_CONNECTIONS_PER_IP=0 "$H" serve > "$data/hmdp.log" 2>&1) &
hmdp=$!
"$B" floor --listen 127.0.0.1:$FP 2> "$data/floor.log" &
floor=$!
trap 'kill $hmdp $floor 2>/dev/null || true; wait 2>/dev/null; redis-cli --scan --pattern "$prefix*" | xargs -r -n 1000 redis-cli del > /dev/null; rm -rf "$data"' EXIT
until curl -sf http://127.0.0.1:$HP/health > /dev/null; do sleep 0.2; done
until curl -s http://127.0.0.1:$FP/ > /dev/null; do sleep 0.1; done
voucher=$("$B" tokens --url http://127.0.0.1:$HP --redis-prefix $prefix --admin-token $token \
  --users 2000 --stock 1 --out "$data/tokens" 2> /dev/null)
export TOKENS="$data/tokens"
curl -sf http://127.0.0.1:$HP/shop/1 > /dev/null
# The voucher sells its one unit, then every grab is a refusal.
METHOD=POST wrk -t2 -c8 -d1s -s "$HERE/wrk-token.lua" http://127.0.0.1:$HP/voucher-order/seckill/$voucher > /dev/null
uptime > "$R/wrk-floor.uptime"
: > "$R/wrk-floor.txt"
declare -A URL=([floor]=http://127.0.0.1:$FP/shop/1 [404]=http://127.0.0.1:$HP/no-such-route
  [shop]=http://127.0.0.1:$HP/shop/1 [grab]=http://127.0.0.1:$HP/voucher-order/seckill/$voucher)
for round in $(seq "$ROUNDS"); do
  for w in floor 404 shop grab; do
    method=GET; [ $w = grab ] && method=POST
    out=$(METHOD=$method wrk -t2 -c256 -d${SECS}s --latency -s "$HERE/wrk-token.lua" "${URL[$w]}")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    bad=$(awk '/Non-2xx/ {print $5}' <<<"$out")
    echo "round $round $w req/s=$rps p99=$p99 non2xx=${bad:-0}" | tee -a "$R/wrk-floor.txt"
  done
done
uptime >> "$R/wrk-floor.uptime"
python3 - "$R/wrk-floor.txt" <<'PY' | tee -a "$R/wrk-floor.txt"
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
for w in ("floor", "404", "shop", "grab"):
    rps = statistics.median(r for r, _ in runs[w])
    p99 = statistics.median(p for _, p in runs[w])
    print(f"| {w} | {rps:,.0f} | {rps / floor:.2f}x | {p99:.2f} |")
PY
