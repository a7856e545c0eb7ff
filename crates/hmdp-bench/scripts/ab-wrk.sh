#!/usr/bin/env bash
# A/B of two `hmdp serve` builds under wrk (a C client, so the client costs the server little):
# a 404 (the middleware alone) and a cached GET /shop/1, rounds interleaved.
#
#   scripts/ab-wrk.sh TARGET_DIR_A TARGET_DIR_B [ROUNDS] > results/NAME.txt
set -euo pipefail
ROUNDS=${3:-4}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
declare -A PORT=([A]=18091 [B]=18092) PID=() DATA=()
for side in A B; do
  dir=$1; [ $side = B ] && dir=$2
  data=$(mktemp -d); DATA[$side]=$data
  HMDP_LISTEN=127.0.0.1:${PORT[$side]} HMDP_DATA_DIR=$data HMDP_REDIS_PREFIX=ab$side$RANDOM: \
    HMDP_ADMIN_TOKEN=benchadmintoken0123456789 HMDP_LOG=warn HMDP_REDIS_MANAGED=never \
    HMDP_RATE_LIMIT_IP=0 HMDP_RATE_LIMIT_USER=0 HMDP_MAX_CONNECTIONS_PER_IP=0 "$dir/release/hmdp" serve > "$data/server.log" 2>&1 &
  PID[$side]=$!
  echo "$side = $dir/release/hmdp on :${PORT[$side]}"
done
trap 'kill ${PID[A]} ${PID[B]} 2>/dev/null || true; sleep 1; rm -rf "${DATA[A]}" "${DATA[B]}"' EXIT
for side in A B; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${PORT[$side]}/health" >/dev/null && break; sleep 0.2; done
  curl -sf "http://127.0.0.1:${PORT[$side]}/shop/1" >/dev/null
done
echo
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    for path in /no-such-route /shop/1; do
      out=$(wrk -t2 -c256 -d10s --latency "http://127.0.0.1:${PORT[$side]}$path")
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
      echo "round $round $side $path req/s=$rps p99=$p99"
    done
  done
done
