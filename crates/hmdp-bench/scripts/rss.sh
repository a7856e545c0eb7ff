#!/usr/bin/env bash
# Memory under idle connections: each hmdp build's RSS with 10,000 idle keep-alive connections (each
# served one GET /health first), one build after the other, on embedded defaults with the
# connection caps off; first the bare floor server's (`hmdp-bench floor`: hyper alone), the
# least any hyper server can hold.
#   scripts/rss.sh [NAME=HMDP_BINARY ...]     (default: the release hmdp of CARGO_TARGET_DIR)
# Writes crates/hmdp-bench/results/rss.txt.
set -euo pipefail
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
R="$(cd "$(dirname "$0")/.." && pwd)/results"
BUILDS=("$@")
[ ${#BUILDS[@]} -gt 0 ] || BUILDS=("hmdp=$CARGO_TARGET_DIR/release/hmdp")
ulimit -n "$(ulimit -Hn)"  # above 10,256 is needed
: > "$R/rss.txt"
"$B" floor --listen 127.0.0.1:18095 2> /dev/null &
floor=$!
until curl -sf http://127.0.0.1:18095/health > /dev/null; do sleep 0.2; done
echo "== floor" | tee -a "$R/rss.txt"
"$B" conns --count 10000 --url http://127.0.0.1:18095 --server-pid "$floor" 2>/dev/null \
  | grep -E 'RSS|open|failed' | tee -a "$R/rss.txt"
kill "$floor"; wait 2>/dev/null || true
for build in "${BUILDS[@]}"; do
  name=${build%%=*} bin=${build#*=} prefix=rss$RANDOM: data=$(mktemp -d)
  (cd "$data" && exec env HMDP_LISTEN=127.0.0.1:18095 HMDP_DATA_DIR=$data HMDP_REDIS_PREFIX=$prefix \
    HMDP_ADMIN_TOKEN=benchadmintoken0123456789 HMDP_LOG=warn HMDP_REDIS_MANAGED=never \
    HMDP_RATE_LIMIT_IP=0 HMDP_MAX_CONNECTIONS=0 HMDP_MAX_CONNECTIONS_PER_IP=0 "$bin" serve \
    > "$data/hmdp.log" 2>&1) &
  until curl -sf http://127.0.0.1:18095/health > /dev/null; do sleep 0.2; done
  pid=$(pgrep -f "^$bin serve" | head -1)
  echo "== $name" | tee -a "$R/rss.txt"
  "$B" conns --count 10000 --url http://127.0.0.1:18095 --server-pid "$pid" 2>/dev/null \
    | grep -E 'RSS|open|failed' | tee -a "$R/rss.txt"
  kill "$pid"; wait 2>/dev/null || true
  redis-cli --scan --pattern "$prefix*" | xargs -r -n 1000 redis-cli del > /dev/null
  rm -rf "$data"
done
