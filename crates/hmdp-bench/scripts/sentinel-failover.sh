#!/usr/bin/env bash
# The outage a Sentinel failover costs a flash sale, RUNS times (default 1) each way:
#   kill     `a_flash_sale_goes_on_through_a_sentinel_failover`: 120 units to 200 buyers (40
#            before, 160 retrying every 50 ms through it), the primary killed with SIGKILL;
#   planned  `a_planned_sentinel_failover_loses_no_acknowledged_grab`: 200 units to 200 buyers
#            (40 before, then one every 20 ms, each retrying every 50 ms), `SENTINEL FAILOVER`
#            with the primary running on, no order worker until the switch is over.
# Each starts a private primary, two replicas and three Sentinels (down-after-milliseconds 1000,
# failover-timeout 1000) on free loopback ports and hmdp instances on them with
# HMDP_REDIS_WAIT_REPLICAS=1, and prints one line: the grabs tried, how many failed and why, the
# outage (first failed grab to the first accepted grab after it) and when each happened after the
# failover began. Every sale invariant is asserted by the tests; a broken one fails the run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS=${1:-1}
for run in $(seq "$RUNS"); do
  for test in a_flash_sale_goes_on_through_a_sentinel_failover \
    a_planned_sentinel_failover_loses_no_acknowledged_grab; do
    echo "== run $run: $test"
    cargo test -q -p hmdp --test api "sentinel::$test" -- --exact --nocapture 2>&1 |
      grep -E '^sentinel failover:|test result:'
  done
done
