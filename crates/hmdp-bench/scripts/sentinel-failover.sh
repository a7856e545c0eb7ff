#!/usr/bin/env bash
# The outage a Sentinel failover costs a flash sale: RUNS times (default 1), the end-to-end test
# `a_flash_sale_goes_on_through_a_sentinel_failover` starts a private primary, two replicas and
# three Sentinels (down-after-milliseconds 1000, failover-timeout 1000) on free loopback ports,
# two hmdp instances on them with HMDP_REDIS_WAIT_REPLICAS=1, sells 120 units to 200 buyers
# (40 before the kill, 160 retrying every 50 ms through it), kills the primary with SIGKILL
# mid-sale, and prints one line: the grabs tried, how many failed and why, the outage (first
# failed grab to the first accepted grab after it) and when each happened after the kill.
# Every sale invariant is asserted by the test; a broken one fails the run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS=${1:-1}
for run in $(seq "$RUNS"); do
  echo "== run $run"
  cargo test -q -p hmdp --test api sentinel::a_flash_sale_goes_on_through_a_sentinel_failover \
    -- --exact --nocapture 2>&1 | grep -E '^sentinel failover:|test result:'
done
