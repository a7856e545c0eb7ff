#!/usr/bin/env bash
# perf profile of the server process during the --url seckill load (BENCHMARKS.md, "profile").
set -euo pipefail
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
R="$(cd "$(dirname "$0")/.." && pwd)/results"
W=/tmp/hmdp-perf; rm -rf /tmp/hmdpsrv $W && mkdir -p $W && mkdir -p /tmp/hmdpsrv
P=benchperf$RANDOM:
HMDP_LISTEN=127.0.0.1:18082 HMDP_DATABASE_URL=sqlite:///tmp/hmdpsrv/hmdp.db HMDP_REDIS_PREFIX=$P \
  HMDP_ADMIN_TOKEN=benchadmintoken0123456789 HMDP_DATA_DIR=/tmp/hmdpsrv HMDP_LOG=warn \
  HMDP_REDIS_MANAGED=never HMDP_CODE_IP_PER_MIN=0 HMDP_RATE_LIMIT_IP=0 HMDP_RATE_LIMIT_USER=0 \
  HMDP_MAX_CONNECTIONS=0 HMDP_MAX_CONNECTIONS_PER_IP=0 \
  $CARGO_TARGET_DIR/release/hmdp serve > /tmp/hmdpsrv/server.log 2>&1 &
SRV=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18082/health >/dev/null && break; sleep 0.2; done
( until grep -q "creating the voucher" $W/perf-run.err 2>/dev/null; do sleep 0.2; done; sleep 1; perf record -e cpu-clock -F 499 -g -p $SRV -o $W/perf.data -- sleep 7 ) &
PERF=$!
$B seckill --url http://127.0.0.1:18082 --database-url sqlite:///tmp/hmdpsrv/hmdp.db \
   --redis-prefix $P --admin-token benchadmintoken0123456789 --mode async \
   --users 2000 --stock 1000 --seconds 10 --connections 256 > $W/perf-run.txt 2> $W/perf-run.err
wait $PERF
kill -TERM $SRV; wait $SRV || true
{ echo "# perf record -e cpu-clock -F 499 -g -p <hmdp serve> -- sleep 7, started 1 s into the grab phase of:"
  grep "^command" $W/perf-run.txt
  grep "POST /voucher-order/seckill" $W/perf-run.txt
  echo; echo "## by shared object"
  perf report -i $W/perf.data --no-children --sort dso --stdio -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -8
  echo; echo "## top symbols"
  perf report -i $W/perf.data --no-children --sort sym --stdio -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -45
} > $R/perf-seckill-url.txt
