#!/usr/bin/env bash
# A/B of two builds of hmdp-bench (each runs its own hmdp in-process), rounds interleaved so both
# see the same machine: the shop read and the flash sale, with the HTTP floor of each run.
#
#   scripts/ab.sh TARGET_DIR_A TARGET_DIR_B [ROUNDS] > results/NAME.txt
#
# Each TARGET_DIR is a CARGO_TARGET_DIR in which `cargo build --release -p hmdp-bench -p hmdp`
# ran (e.g. one for the commit before a change, one for after it).
set -euo pipefail
A=$1/release/hmdp-bench
B=$2/release/hmdp-bench
ROUNDS=${3:-3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "A = $A"
echo "B = $B"
echo
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    "$bin" shop --seconds 5 --connections 64 > "$TMP/shop.txt" 2>/dev/null
    "$bin" seckill --mode async --users 2000 --stock 1000 --seconds 10 --connections 256 \
      > "$TMP/seckill.txt" 2>/dev/null
    echo "round $round $side ($(uptime | sed 's/.*load/load/'))"
    grep -E "^\| (GET /api/shop/1 \(hot key, L1 on|HTTP floor: unknown)" "$TMP/shop.txt" | sed 's/^/shop    /'
    grep -E "^\| (POST /voucher-order|HTTP floor)" "$TMP/seckill.txt" | sed 's/^/seckill /'
    echo "invariants ok: $(grep -c '\[ok\]' "$TMP/seckill.txt"), failed: $(grep -c '\[FAILED\]' "$TMP/seckill.txt" || true)"
    echo
  done
done
