#!/usr/bin/env bash
# Closing unpaid orders (`close`): 10,000 pay deadlines due at once, closed by the service's own
# closer, on SQLite and on MariaDB interleaved over three rounds. Each run's table goes into
# crates/hmdp-bench/results/close.txt; the medians are printed and written to close.json.
# The idle closer looks every 200 ms, so where the due time falls in its sleep moves each run's
# figures by up to 200 ms: hence the rounds. Build first, as for all.sh:
#   cargo build --release -p hmdp-bench   (with the same CARGO_TARGET_DIR)
set -euo pipefail
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
R="$(cd "$(dirname "$0")/.." && pwd)/results"
T=$(mktemp -d)
uptime > $R/close.uptime
: > $R/close.txt
for round in 1 2 3; do
  for db in sqlite mariadb; do
    flags=()
    [ $db = mariadb ] && flags=(--database-url mysql://root@127.0.0.1:3306)
    echo "== round $round, $db" | tee -a $R/close.txt
    $B close --orders 10000 --pay-timeout 30 --connections 64 "${flags[@]}" \
      --json $T/$db-$round.json 2>/dev/null | tee -a $R/close.txt
    uptime >> $R/close.uptime
  done
done
python3 - "$T" "$R/close.json" <<'PY' | tee -a "$R/close.txt"
import json, statistics, sys, glob, os, re
src, out = sys.argv[1], sys.argv[2]
runs = {}
for f in sorted(glob.glob(os.path.join(src, "*.json"))):
    db = os.path.basename(f).split("-")[0]
    row = next(r for r in json.load(open(f))["rows"] if " close " in r["name"])
    first = float(re.search(r"first close seen (\d+) ms", " ".join(row["notes"])).group(1))
    runs.setdefault(db, []).append({
        "orders_per_s": row["rate"], "p50_ms": row["p50_ms"], "p99_ms": row["p99_ms"],
        "max_ms": row["max_ms"], "first_close_ms": first,
        "working_orders_per_s": row["requests"] / max(row["max_ms"] - first, 1) * 1e3,
    })
med = {db: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for db, rs in runs.items()}
print("\nmedians of three rounds:")
for db, m in med.items():
    print(f"  {db}: {m['orders_per_s']:.0f} orders/s from the due time "
          f"({m['working_orders_per_s']:.0f}/s first → last close), lag p50 {m['p50_ms']:.0f} ms, "
          f"p99 {m['p99_ms']:.0f} ms, max {m['max_ms']:.0f} ms, first close {m['first_close_ms']:.0f} ms")
json.dump({"runs": runs, "medians": med}, open(out, "w"), indent=2)
PY
