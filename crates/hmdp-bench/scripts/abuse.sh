#!/usr/bin/env bash
# The cost of cheap requests (sale stats, unknown voucher ids, a deep name
# search) before and after, on MariaDB. Two `hmdp` binaries run in turn as real servers, each on
# a fresh database and Redis prefix with the abuse limits off, and `hmdp-bench abuse --url` drives
# each; the two alternate over two rounds. Writes crates/hmdp-bench/results/abuse.{txt,uptime}.
#   scripts/abuse.sh /path/to/hmdp-before /path/to/hmdp-after
# Build the bench first (cargo build --release -p hmdp-bench, same CARGO_TARGET_DIR as all.sh).
set -euo pipefail
BEFORE=$1 AFTER=$2
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
R="$(cd "$(dirname "$0")/.." && pwd)/results"
MYSQL=mysql://root@127.0.0.1:3306
PORT=18181
uptime > $R/abuse.uptime
: > $R/abuse.txt
for round in 1 2; do
  for which in before after; do
    bin=$BEFORE; [ $which = after ] && bin=$AFTER
    db=hmdp_abuse_${which}_$round prefix=abuse:$which:$round:$RANDOM:
    token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    dir=$(mktemp -d)
    mysql -uroot -h127.0.0.1 -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
    (cd "$dir" && exec env HMDP_LISTEN=127.0.0.1:$PORT HMDP_DATABASE_URL=$MYSQL/$db \
      HMDP_REDIS_URL=redis://127.0.0.1:6379 HMDP_REDIS_PREFIX=$prefix HMDP_ADMIN_TOKEN=$token \
      HMDP_RATE_LIMIT_IP=0 HMDP_RATE_LIMIT_USER=0 HMDP_CODE_IP_PER_MIN=0 HMDP_LOG=warn \
      HMDP_DB_MAX_CONNECTIONS=16 "$bin" serve > "$dir/log" 2>&1) &
    server=$!
    until curl -sf http://127.0.0.1:$PORT/health > /dev/null; do sleep 0.2; done
    echo "== round $round, $which ($bin)" | tee -a $R/abuse.txt
    $B abuse --url http://127.0.0.1:$PORT --database-url $MYSQL/$db --redis-prefix $prefix \
      --admin-token $token -c 64 --attackers 32 --seconds 10 2>/dev/null \
      | grep -E '^\| (grab|attack|  grab|  my orders)|^[a-z].*attacker gets' | tee -a $R/abuse.txt
    kill $server; wait $server || true
    mysql -uroot -h127.0.0.1 -e "DROP DATABASE $db"
    redis-cli --scan --pattern "$prefix*" | xargs -r -n 1000 redis-cli del > /dev/null
    rm -rf "$dir"
  done
done
uptime >> $R/abuse.uptime
