#!/usr/bin/env bash
# What HMDP_REDIS_WAIT_REPLICAS costs: the same sale (every grab accepted, so every grab waits)
# against a private Redis primary with one replica, without WAIT and with WAIT 1, interleaved over
# ROUNDS rounds (default 3); prints the medians and their ratio and writes
# crates/hmdp-bench/results/replica-wait.{txt,json}. Build first, as for all.sh:
#   cargo build --release -p hmdp-bench -p hmdp   (with the same CARGO_TARGET_DIR)
set -euo pipefail
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
R="$(cd "$(dirname "$0")/.." && pwd)/results"
ROUNDS=${1:-3}
T=$(mktemp -d)
P=6391
S=6392
redis-server --port $P --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile $T/p.pid --logfile $T/p.log --dir $T
redis-server --port $S --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile $T/s.pid --logfile $T/s.log --dir $T --replicaof 127.0.0.1 $P
trap 'kill $(cat $T/p.pid) $(cat $T/s.pid) 2>/dev/null; rm -rf "$T"' EXIT
until redis-cli -p $S info replication | grep -q 'master_link_status:up'; do sleep 0.2; done
uptime > $R/replica-wait.uptime
: > $R/replica-wait.txt
for round in $(seq "$ROUNDS"); do
  for w in 0 1; do
    echo "== round $round, HMDP_REDIS_WAIT_REPLICAS=$w" | tee -a $R/replica-wait.txt
    $B seckill --mode async --redis-url redis://127.0.0.1:$P --wait-replicas $w \
      --users 10000 --stock 10000 --seconds 10 --connections 256 --no-baselines \
      --json $T/wait$w-$round.json 2>/dev/null \
      | grep -E '^\| POST|\[(ok|FAILED)\]' | tee -a $R/replica-wait.txt
    redis-cli -p $P flushall > /dev/null
  done
done
uptime >> $R/replica-wait.uptime
python3 - "$T" "$R/replica-wait.json" <<'PY' | tee -a "$R/replica-wait.txt"
import json, statistics, sys, glob, os
src, out = sys.argv[1], sys.argv[2]
runs = {}
for f in sorted(glob.glob(os.path.join(src, "wait*.json"))):
    w = os.path.basename(f)[4:].split("-")[0]
    rows = json.load(open(f))["rows"]
    grab = next(r for r in rows if r["name"].startswith("POST"))
    runs.setdefault(w, []).append({"grab_per_s": grab["rate"], "p50_ms": grab["p50_ms"], "p99_ms": grab["p99_ms"]})
summary = {}
print(f"\nmedians of {len(runs.get('0', []))} interleaved runs (10,000 grabs, all accepted, 256 connections, SQLite):")
print("| HMDP_REDIS_WAIT_REPLICAS | grabs/s | p50 ms | p99 ms |")
print("|---|---|---|---|")
for w, rs in sorted(runs.items()):
    m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    summary[w] = {"median": m, "runs": rs}
    print(f"| {w} | {m['grab_per_s']:.0f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} |")
if "0" in summary and "1" in summary:
    a, b = summary["0"]["median"], summary["1"]["median"]
    print(f"WAIT 1: {b['grab_per_s'] / a['grab_per_s']:.2f}x the throughput, p50 {b['p50_ms'] / a['p50_ms']:.2f}x, p99 {b['p99_ms'] / a['p99_ms']:.2f}x")
json.dump(summary, open(out, "w"), indent=2)
PY
