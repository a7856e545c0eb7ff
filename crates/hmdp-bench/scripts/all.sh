#!/usr/bin/env bash
# The exact commands behind BENCHMARKS.md; writes crates/hmdp-bench/results/. Build first:
#   cargo build --release -p hmdp-bench -p hmdp   (with the same CARGO_TARGET_DIR)
set -euo pipefail
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
R="$(cd "$(dirname "$0")/.." && pwd)/results"
run() { local name=$1; shift; uptime > $R/$name.uptime; "$@" | tee $R/$name.txt; uptime >> $R/$name.uptime; }

run seckill-sqlite $B seckill --users 2000 --stock 1000 --seconds 10 --connections 256 \
   --json $R/seckill-sqlite.json --svg $R/seckill-sqlite.svg
run seckill-mariadb $B seckill --mode async --drain backlog --users 10000 --stock 10000 --seconds 10 --connections 256 \
   --database-url mysql://root@127.0.0.1:3306 --json $R/seckill-mariadb.json --svg $R/seckill-mariadb.svg

rm -rf /tmp/hmdpsrv && mkdir -p /tmp/hmdpsrv
P=benchsrv$RANDOM:
HMDP_LISTEN=127.0.0.1:18081 HMDP_DATABASE_URL=sqlite:///tmp/hmdpsrv/hmdp.db HMDP_REDIS_PREFIX=$P \
  HMDP_ADMIN_TOKEN=benchadmintoken0123456789 HMDP_DATA_DIR=/tmp/hmdpsrv HMDP_LOG=warn \
  HMDP_REDIS_MANAGED=never HMDP_CODE_IP_PER_MIN=0 HMDP_RATE_LIMIT_IP=0 HMDP_RATE_LIMIT_USER=0 \
  HMDP_MAX_CONNECTIONS=0 HMDP_MAX_CONNECTIONS_PER_IP=0 \
  $CARGO_TARGET_DIR/release/hmdp serve > /tmp/hmdpsrv/server.log 2>&1 &
SRV=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18081/health >/dev/null && break; sleep 0.2; done
run seckill-url $B seckill --url http://127.0.0.1:18081 --database-url sqlite:///tmp/hmdpsrv/hmdp.db \
   --redis-prefix $P --admin-token benchadmintoken0123456789 --mode async \
   --users 2000 --stock 1000 --seconds 10 --connections 256 --json $R/seckill-url.json --svg $R/seckill-url.svg
run conns $B conns --count 10000 --url http://127.0.0.1:18081 --server-pid $SRV --json $R/conns.json
kill -TERM $SRV; wait $SRV || true

run shop  $B shop  --seconds 5 --connections 64 --json $R/shop.json  --svg $R/shop.svg
run login $B login --seconds 5 --connections 64 --json $R/login.json --svg $R/login.svg
run ids   $B ids   --seconds 3 --connections 64 --json $R/ids.json
run lock  $B lock  --seconds 3 --connections 64 --json $R/lock.json
run social-sqlite  $B social --seconds 5 --connections 64 --json $R/social-sqlite.json --svg $R/social-sqlite.svg
run social-mariadb $B social --seconds 5 --connections 64 --database-url mysql://root@127.0.0.1:3306 \
   --json $R/social-mariadb.json --svg $R/social-mariadb.svg
run uv             $B uv --seconds 5 --connections 64 --json $R/uv.json
run queues $B queues --database-url mysql://root@127.0.0.1:3306 --json $R/queues.json
"$(dirname "$0")/close.sh"
