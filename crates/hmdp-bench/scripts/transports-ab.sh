#!/usr/bin/env bash
# Two builds of hmdp-bench compared on the backlog drain of both order transports, in one run:
# three rounds, the order of the four runs balanced across rounds (ABBA), 5 s between runs.
# Usage: scripts/transports-ab.sh BEFORE_BINARY AFTER_BINARY OUT_DIR (needs RabbitMQ, with a
# vhost hmdp-bench-ab made here, and MariaDB at 127.0.0.1:3306). Writes OUT_DIR/all.txt and
# one JSON per run; each build's ratio is its RabbitMQ median over its stream median.
set -uo pipefail
declare -A BIN=([before]=$1 [after]=$2)
OUT=$3
mkdir -p "$OUT"
rabbitmqctl -q add_vhost hmdp-bench-ab 2>/dev/null || true
rabbitmqctl -q set_permissions -p hmdp-bench-ab guest '.*' '.*' '.*'
uptime > "$OUT/uptime"
run() { # build transport round
  echo "== round $3, $1, $2" | tee -a "$OUT/all.txt"
  sleep 5
  "${BIN[$1]}" seckill --mode async --drain backlog --transport "$2" \
    --amqp-url amqp://guest:guest@127.0.0.1:5672/hmdp-bench-ab \
    --users 10000 --stock 10000 --seconds 10 --connections 256 --no-baselines \
    --database-url mysql://root@127.0.0.1:3306 --json "$OUT/$1-$2-$3.json" 2>/dev/null \
    | grep -E '^\| (POST|order drain)|↳|\[FAILED\]' | tee -a "$OUT/all.txt"
}
run before stream 1; run after stream 1; run after rabbitmq 1; run before rabbitmq 1
run before rabbitmq 2; run after rabbitmq 2; run after stream 2; run before stream 2
run after stream 3; run before stream 3; run before rabbitmq 3; run after rabbitmq 3
uptime >> "$OUT/uptime"
python3 - "$OUT" <<'PY' | tee -a "$OUT/all.txt"
import json, statistics, sys, glob, os
runs = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    b, t, _ = os.path.basename(f)[:-5].split("-")
    rows = json.load(open(f))["rows"]
    runs.setdefault((b, t), []).append(next(r for r in rows if r["name"].startswith("order drain"))["rate"])
med = {k: statistics.median(v) for k, v in runs.items()}
print("| build | transport | backlog drain orders/s, median (runs) | vs the stream, same build |")
print("|---|---|---|---|")
for (b, t), v in sorted(runs.items()):
    print(f"| {b} | {t} | {med[(b, t)]:.0f} ({', '.join(f'{x:.0f}' for x in v)}) | {med[(b, t)] / med[(b, 'stream')]:.2f}x |")
PY
