#!/usr/bin/env bash
# A/B of HMDP_SESSION_CACHE_MS against a separate server, rounds interleaved (BENCHMARKS.md).
set -euo pipefail
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
OUT="$(cd "$(dirname "$0")/.." && pwd)/results/session-cache-ab.txt"
: > $OUT
for round in 1 2 3; do
  for cache in 0 1000; do
    rm -rf /tmp/hmdpab && mkdir -p /tmp/hmdpab
    P=benchab$RANDOM:
    HMDP_LISTEN=127.0.0.1:18083 HMDP_DATABASE_URL=sqlite:///tmp/hmdpab/hmdp.db HMDP_REDIS_PREFIX=$P \
      HMDP_ADMIN_TOKEN=benchadmintoken0123456789 HMDP_DATA_DIR=/tmp/hmdpab HMDP_LOG=warn \
      HMDP_REDIS_MANAGED=never HMDP_CODE_IP_PER_MIN=0 HMDP_RATE_LIMIT_IP=0 HMDP_RATE_LIMIT_USER=0 \
      HMDP_MAX_CONNECTIONS=0 HMDP_MAX_CONNECTIONS_PER_IP=0 \
      HMDP_SESSION_CACHE_MS=$cache $CARGO_TARGET_DIR/release/hmdp serve > /tmp/hmdpab/server.log 2>&1 &
    SRV=$!
    for _ in $(seq 100); do curl -sf http://127.0.0.1:18083/health >/dev/null && break; sleep 0.2; done
    $B seckill --url http://127.0.0.1:18083 --database-url sqlite:///tmp/hmdpab/hmdp.db \
       --redis-prefix $P --admin-token benchadmintoken0123456789 --mode async \
      --users 2000 --stock 1000 --seconds 10 --connections 256 > /tmp/hmdpab/run.txt 2>/dev/null
    kill -TERM $SRV; wait $SRV || true
    { echo "round $round HMDP_SESSION_CACHE_MS=$cache ($(uptime | sed 's/.*load/load/'))"
      grep -E "^\| (raw Redis GRAB|POST /voucher-order|HTTP floor)" /tmp/hmdpab/run.txt
      grep -E "\[(ok|FAILED)\]" /tmp/hmdpab/run.txt | grep -c "\[ok\]" | sed 's/^/invariants ok: /'
      grep -E "\[FAILED\]" /tmp/hmdpab/run.txt || true
      echo; } >> $OUT
  done
done
