#!/usr/bin/env bash
# One voucher's sale on private Redis Clusters of 1, 2 and 3 masters, its stock in one key and in
# 12 stock buckets, HMDP_SECKILL_SHARDS=12 throughout (`hmdp-bench hot-voucher`): accepted
# grabs/s, latency, and per master the EVALSHA calls, script time and redis-server CPU per
# accepted grab. Builds the release binary first, then writes
# crates/hmdp-bench/results/hot-voucher.{txt,json,svg,uptime}. Needs redis-server and redis-cli
# (7.0 or later) on PATH; the clusters are private, on free ports, and removed afterwards.
#   scripts/hot-voucher.sh
# Knobs (environment): MASTERS=1,2,3 BUCKETS=1,12 SHARDS=12 USERS=20000 (every user grabs once)
# STOCK (each sale's stock; the users if unset) SECONDS_PER_CASE=15 (the load of a case stops at
# whichever comes first) CONNECTIONS=256 DATABASE_URL (mysql://… for a fresh MariaDB database;
# SQLite if unset) OUT=hot-voucher (the results' file name).
set -euo pipefail
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
R=$ROOT/crates/hmdp-bench/results
(cd "$ROOT" && cargo build --release -p hmdp-bench)
B=$CARGO_TARGET_DIR/release/hmdp-bench
db=()
[ -z "${DATABASE_URL:-}" ] || db=(--database-url "$DATABASE_URL")
stock=()
[ -z "${STOCK:-}" ] || stock=(--stock "$STOCK")
OUT=$R/${OUT:-hot-voucher}
uptime > "$OUT.uptime"
"$B" hot-voucher --masters "${MASTERS:-1,2,3}" --buckets "${BUCKETS:-1,12}" \
  --shards "${SHARDS:-12}" --users "${USERS:-20000}" "${stock[@]}" \
  --seconds "${SECONDS_PER_CASE:-15}" --connections "${CONNECTIONS:-256}" "${db[@]}" \
  --json "$OUT.json" --svg "$OUT.svg" | tee "$OUT.txt"
uptime >> "$OUT.uptime"
