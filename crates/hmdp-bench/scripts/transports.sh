#!/usr/bin/env bash
# Stream vs RabbitMQ order transport (HMDP_ORDER_TRANSPORT) on MariaDB, the same sale interleaved
# over three rounds: the backlog drain (the worker alone on the whole backlog after the load: its
# own rate), the live drain (the worker during a sale as fast as the grabs are answered, as in
# production) and a steady sale of 1,000 grabs/s (below both transports' drain rate, so the
# grab-to-row lag is the pipeline's own, not a backlog's). Prints the medians and writes
# crates/hmdp-bench/results/transports.{txt,json}. Build first, as for all.sh:
#   cargo build --release -p hmdp-bench -p hmdp   (with the same CARGO_TARGET_DIR)
# Needs RabbitMQ (a vhost hmdp-bench is made with rabbitmqctl) and MariaDB at 127.0.0.1:3306.
set -euo pipefail
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
R="$(cd "$(dirname "$0")/.." && pwd)/results"
T=$(mktemp -d)
rabbitmqctl -q add_vhost hmdp-bench 2>/dev/null || true
rabbitmqctl -q set_permissions -p hmdp-bench guest '.*' '.*' '.*'
uptime > $R/transports.uptime
: > $R/transports.txt
for round in 1 2 3; do
  for drain in backlog live steady; do
    for t in stream rabbitmq; do
      echo "== round $round, $drain drain, $t" | tee -a $R/transports.txt
      case $drain in
        steady) how=(--drain live --rate 1000) ;;
        *) how=(--drain $drain) ;;
      esac
      $B seckill --mode async "${how[@]}" --transport $t \
        --amqp-url amqp://guest:guest@127.0.0.1:5672/hmdp-bench \
        --users 10000 --stock 10000 --seconds 10 --connections 256 --no-baselines \
        --database-url mysql://root@127.0.0.1:3306 --json $T/$t-$drain-$round.json 2>/dev/null \
        | grep -E '^\| (POST|order drain|grab → row)|^\|   ↳ worker|\[(ok|FAILED)\]' | tee -a $R/transports.txt
    done
  done
done
uptime >> $R/transports.uptime
python3 - "$T" "$R/transports.json" <<'PY' | tee -a "$R/transports.txt"
import json, statistics, sys, glob, os
src, out = sys.argv[1], sys.argv[2]
runs = {}
for f in sorted(glob.glob(os.path.join(src, "*.json"))):
    t, drain, _ = os.path.basename(f)[:-5].split("-")
    rows = json.load(open(f))["rows"]
    grab = next(r for r in rows if r["name"].startswith("POST"))
    dr = next(r for r in rows if r["name"].startswith("order drain"))
    lag = next(r for r in rows if r["name"].startswith("grab → row"))
    runs.setdefault((t, drain), []).append({"drain_per_s": dr["rate"], "grab_per_s": grab["rate"], "grab_p99_ms": grab["p99_ms"], "lag_p50_ms": lag["p50_ms"], "lag_p99_ms": lag["p99_ms"]})
summary = {}
print("\nmedians of 3 interleaved runs (10,000 orders, 256 connections, MariaDB):")
print("| transport | drain | orders/s written | grabs/s | grab p99 ms | grab→row p50 ms | grab→row p99 ms |")
print("|---|---|---|---|---|---|---|")
for (t, drain), rs in sorted(runs.items()):
    m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    summary[f"{t}/{drain}"] = {"median": m, "runs": rs}
    print(f"| {t} | {drain} | {m['drain_per_s']:.0f} | {m['grab_per_s']:.0f} | {m['grab_p99_ms']:.2f} | {m['lag_p50_ms']:.1f} | {m['lag_p99_ms']:.1f} |")
for drain in ("backlog", "live", "steady"):
    s, r = summary.get(f"stream/{drain}"), summary.get(f"rabbitmq/{drain}")
    if s and r:
        print(f"{drain}: rabbitmq writes at {r['median']['drain_per_s'] / s['median']['drain_per_s']:.2f}x the stream's rate, grab→row p50 {r['median']['lag_p50_ms'] / s['median']['lag_p50_ms']:.2f}x, p99 {r['median']['lag_p99_ms'] / s['median']['lag_p99_ms']:.2f}x the stream's")
json.dump(summary, open(out, "w"), indent=2)
PY
rm -rf "$T"
