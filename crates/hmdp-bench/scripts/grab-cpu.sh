#!/usr/bin/env bash
# CPU per accepted flash-sale grab, of hmdp and of Redis, for one or more hmdp builds measured
# in the same run. Each build runs as its own server (SQLite, embedded defaults, the stream
# transport, abuse limits off) on a private redis-server of this script's (so that nothing
# else on the machine is counted as Redis's). Each round gives every build, in turn, a new
# voucher with stock 20,000 that each of 20,000 logged-in users grabs once (wrk -t2 -c256,
# wrk-once.lua); the CPU time (user + system, /proc/PID/stat) of the hmdp process and of
# redis-server is read before the load and again once the order worker has written all
# 20,000 orders into the database, so the worker's share (reading the stream, the insert, the
# acknowledgement) is counted too. Medians over the rounds are printed at the end.
#   scripts/grab-cpu.sh [ROUNDS] NAME=HMDP_BINARY [NAME=HMDP_BINARY ...]
# GRAB_FLOOR=1 also measures, in each round first, the grab's floor (`hmdp-bench floor
# --grab-redis-url`): hyper answering each POST after one EVALSHA of hmdp's grab script through
# hmdp's Redis connection, for 20,000 new buyers, with no session, ids, memory or worker; its
# CPU is read once Redis holds its 20,000 orders.
# PERF_BUILD=NAME PERF_DATA=FILE also records that build's first round with perf (cpu-clock,
# 999 Hz, PERF_CALLS or -g).
# Writes crates/hmdp-bench/results/grab-cpu.{txt,uptime}. Needs wrk (apt-get install wrk),
# redis-server and python3.
set -euo pipefail
ROUNDS=${1:-5}
shift
[ $# -gt 0 ] || { echo "usage: $0 [ROUNDS] NAME=HMDP_BINARY ..." >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hmdp-bench-target}"
B=$CARGO_TARGET_DIR/release/hmdp-bench
HERE="$(cd "$(dirname "$0")" && pwd)" R="$(cd "$(dirname "$0")/.." && pwd)/results"
token=benchadmintoken0123456789 users=20000
work=$(mktemp -d)
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
rport=16379
while redis-cli -p $rport ping >/dev/null 2>&1; do rport=$((rport + 1)); done
redis-server --port $rport --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  > "$work/redis.log" 2>&1 &
pids+=($!) redis=$!
until redis-cli -p $rport ping >/dev/null 2>&1; do sleep 0.1; done
rurl=redis://127.0.0.1:$rport
# user + system CPU of a process (all its threads), in clock ticks
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
declare -A PID PORT DB
names=()
port=18193
for build in "$@"; do
  name=${build%%=*} bin=${build#*=} data=$work/$name
  mkdir -p "$data"
  (cd "$data" && exec env HMDP_LISTEN=127.0.0.1:$port HMDP_DATA_DIR=$data HMDP_REDIS_URL=$rurl \
    HMDP_REDIS_PREFIX=$name: HMDP_ADMIN_TOKEN=$token HMDP_LOG=warn HMDP_REDIS_MANAGED=never \
    HMDP_RATE_LIMIT_IP=0 HMDP_RATE_LIMIT_USER=0 HMDP_CODE_IP_PER_MIN=0 HMDP_SMS_HOURLY_LIMIT=0 \
    HMDP_MAX_CONNECTIONS_PER_IP=0 "$bin" serve > "$data/hmdp.log" 2>&1) &
  # the subshell execs env, which execs hmdp: $! is the server's pid
  pids+=($!) names+=("$name") PID[$name]=$!
  until curl -sf http://127.0.0.1:$port/health > /dev/null; do sleep 0.2; done
  "$B" tokens --url http://127.0.0.1:$port --redis-url $rurl --redis-prefix $name: \
    --admin-token $token --users $users --stock 1 --out "$data/buyers" > /dev/null 2> "$data/tokens.log" \
    || { cat "$data/tokens.log" >&2; exit 1; }
  PORT[$name]=$port DB[$name]=$data/hmdp.db
  port=$((port + 2))
done
if [ -n "${GRAB_FLOOR:-}" ]; then
  "$B" floor --listen 127.0.0.1:$port --grab-redis-url $rurl > "$work/floor.log" 2>&1 &
  pids+=($!) floor=$! floor_port=$port
  until grep -q grabbing "$work/floor.log"; do sleep 0.1; done
fi
floor_orders() { redis-cli -p $rport xlen 'floor:seckill:{s0}:orders'; }
# the orders of a voucher in a build's database
orders() {
  python3 -c 'import sqlite3, sys
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, timeout=10)
print(c.execute("select count(*) from tb_voucher_order where voucher_id = ?", (int(sys.argv[2]),)).fetchone()[0])' "$1" "$2"
}
# One measured load: each token of TOKENS_FILE grabs once at URL (wrk -t2 -c256, wrk-once.lua),
# until the command in the remaining arguments succeeds (the orders taken); prints and records
# the CPU of PID and of redis-server per accepted grab. `perf`, when set, is stopped with it.
measure() { # NAME PID TOKENS_FILE URL CHECK...
  local name=$1 pid=$2 tokens=$3 url=$4 h0 r0 t0 h1 r1 t1 wrk out once accepted requests give_up
  shift 4
  h0=$(ticks "$pid") r0=$(ticks "$redis") t0=$(date +%s.%N)
  # wrk sleeps its whole -d even once every thread has stopped: it is interrupted (and then
  # prints its summary) as soon as the orders are taken.
  TOKENS=$tokens wrk -t2 -c256 -d120s --latency -s "$HERE/wrk-once.lua" "$url" > "$work/wrk.out" &
  wrk=$!
  give_up=$((SECONDS + 120))
  until "$@"; do
    [ $SECONDS -lt $give_up ] || { echo "$name did not take its orders:" >&2; cat "$work/wrk.out" >&2; exit 1; }
    sleep 0.05
  done
  h1=$(ticks "$pid") r1=$(ticks "$redis") t1=$(date +%s.%N)
  kill -INT $wrk; wait $wrk || true
  [ -z "${perf:-}" ] || { kill -INT $perf; wait $perf || true; }
  out=$(cat "$work/wrk.out")
  once=$(grep '^once:' <<<"$out")
  accepted=$(awk '{print $5}' <<<"$once")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  echo "round $round $name accepted=$accepted requests=$requests" \
    "hmdp_us=$(python3 -c "print(f'{($h1 - $h0) / $hz * 1e6 / $accepted:.1f}')")" \
    "redis_us=$(python3 -c "print(f'{($r1 - $r0) / $hz * 1e6 / $accepted:.1f}')")" \
    "wall_s=$(python3 -c "print(f'{$t1 - $t0:.2f}')")" \
    "req/s=$(awk '{print $NF}' <<<"$once") p99=$(awk '$1 == "99%" {print $2}' <<<"$out")" \
    | tee -a "$R/grab-cpu.txt"
}
floor_taken() { [ "$(floor_orders)" -ge $((floor_before + users)) ]; }
build_written() { [ "$(orders "${DB[$n]}" "$voucher")" -ge "$users" ]; }
uptime > "$R/grab-cpu.uptime"
: > "$R/grab-cpu.txt"
for round in $(seq "$ROUNDS"); do
  if [ -n "${GRAB_FLOOR:-}" ]; then
    sleep 1
    floor_before=$(floor_orders) perf=""
    measure grab-floor "$floor" "$work/${names[0]}/buyers" \
      http://127.0.0.1:$floor_port/voucher-order/seckill/1 floor_taken
  fi
  for n in "${names[@]}"; do
    port=${PORT[$n]} pid=${PID[$n]}
    voucher=$("$B" tokens --url http://127.0.0.1:$port --redis-url $rurl --redis-prefix $n: \
      --admin-token $token --users 0 --stock $users --out "$work/$n/none" 2> /dev/null)
    sleep 1  # let the server settle after the voucher's creation
    perf=""
    if [ "$round" = 1 ] && [ "${PERF_BUILD:-}" = "$n" ]; then
      perf record -e cpu-clock -F 999 ${PERF_CALLS:--g} -p "$pid" -o "$PERF_DATA" 2> /dev/null &
      perf=$!
      sleep 0.5
    fi
    measure "$n" "$pid" "$work/$n/buyers" \
      http://127.0.0.1:$port/voucher-order/seckill/$voucher build_written
  done
done
uptime >> "$R/grab-cpu.uptime"
python3 - "$R/grab-cpu.txt" ${GRAB_FLOOR:+grab-floor} "${names[@]}" <<'PY' | tee -a "$R/grab-cpu.txt"
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\S+) .*hmdp_us=([\d.]+) redis_us=([\d.]+) .*req/s=([\d.]+)", line)
    if m:
        runs.setdefault(m.group(1), []).append(tuple(float(m.group(i)) for i in (2, 3, 4)))
print("\nmedians (CPU per accepted grab, user + system, the worker's writing included):")
print("| build | hmdp µs | Redis µs | grabs/s |")
print("|---|---|---|---|")
for n in sys.argv[2:]:
    r = runs[n]
    med = [statistics.median(x[i] for x in r) for i in range(3)]
    print(f"| {n} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:,.0f} |")
PY
