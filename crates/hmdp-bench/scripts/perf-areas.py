#!/usr/bin/env python3
# Where the CPU of a perf recording (cpu-clock at 999 Hz, DWARF call graphs) went, in µs per
# request: by task (the request's, the Redis connection's, the order worker's) and by the
# innermost frame that names a known component, so malloc, free and system calls count
# towards whoever called them.
#   perf script -i perf.data -F comm,tid,ip,sym,dso > perf.txt
#   scripts/perf-areas.py perf.txt REQUESTS ["COMPONENT" [N]]   (N top frames inside COMPONENT)
# grab-cpu.sh records one with PERF_BUILD=NAME PERF_DATA=FILE PERF_CALLS="--call-graph dwarf,8192".
import sys, collections
CONTEXTS = [
    ("order worker (stream → database)", ["hmdp::worker", "sqlx_sqlite", "sqlite3"]),
    ("HTTP request task", ["hyper::proto", "hmdp::http"]),
    ("Redis connection task (redis-rs)", ["redis::aio", "redis::"]),
    ("tokio runtime", ["tokio::runtime"]),
]
WORK = [
    ("sqlite", ["sqlite3"]), ("sqlx", ["sqlx_"]),
    ("worker: reading/parsing entries, ack", ["hmdp::worker", "redis::streams"]),
    ("seckill: id", ["hmdp_id"]),
    ("seckill: memory (quick_cache)", ["hmdp::seckill::memory", "quick_cache"]),
    ("seckill: grab (script command, keys, answer)", ["hmdp::seckill", "redis::script", "hmdp::order_stream"]),
    ("redis-rs: encode/decode/pipeline", ["redis::", "combine::"]),
    ("session lookup", ["hmdp::auth"]),
    ("metrics", ["HttpMetrics", "prometheus_client", "hmdp::http::metrics"]),
    ("JSON envelope", ["serde_json", "serde::", "hmdp::http::error", "hmdp::http::reply", "hmdp::http::ok"]),
    ("tracing", ["tracing"]),
    ("hmdp middleware/handler", ["hmdp::"]),
    ("hyper (h1 parse/encode, dispatch)", ["hyper::", "httparse", "http::", "bytes::"]),
    ("axum/tower (routing, boxing)", ["axum", "tower", "matchit"]),
    ("tokio (io, scheduling, timers)", ["tokio::", "mio::"]),
]
def first(frames, rules, leaf_first):
    seq = frames if leaf_first else list(reversed(frames))
    for f in seq:
        for name, pats in rules:
            if any(p in f for p in pats):
                return name
    return None
samples, cur = [], None
for line in open(sys.argv[1], errors="replace"):
    if not line.strip():
        if cur is not None: samples.append(cur); cur = None
        continue
    if not line[0].isspace():
        cur = []; continue
    parts = line.strip().split(" ", 1)
    if cur is not None and len(parts) == 2: cur.append(parts[1])
if cur: samples.append(cur)
n, grabs = len(samples), float(sys.argv[2])
us = lambda c: c / 999 / grabs * 1e6
print(f"{n} samples at 999 Hz over {grabs:.0f} accepted grabs: {us(n):.1f} µs per grab")
def ctx2(s):
    text = "\n".join(s)
    for name, pats in CONTEXTS:
        if any(p in text for p in pats): return name
    return "kernel (no user stack)" if s and "kernel" in s[0] else "other"
def ctx(s):
    return ctx2(s)
kinds = collections.Counter()
for s in samples:
    k = "kernel" if s and "kernel" in s[0] else ("libc malloc/free" if s and "libc" in s[0] and any(x in s[0] for x in ("alloc", "free", "_int_", "unlink", "consolid")) else "user")
    kinds[k] += 1
print("by kind: " + ", ".join(f"{k} {us(c):.1f} µs" for k, c in kinds.most_common()))
print("\n## by task")
for name, c in collections.Counter(ctx(s) for s in samples).most_common():
    print(f"{100*c/n:5.1f}%  {us(c):5.1f} µs  {name}")
print("\n## by component (innermost named frame; malloc/free and syscalls go to their caller)")
for name, c in collections.Counter(first(s, WORK, True) or ("kernel only" if s and "kernel" in s[0] else "other") for s in samples).most_common():
    print(f"{100*c/n:5.1f}%  {us(c):5.1f} µs  {name}")

if len(sys.argv) > 3:
    want = sys.argv[3]
    print(f"\n## inside '{want}': innermost named frame, by task")
    c2 = collections.Counter()
    for s in samples:
        if (first(s, WORK, True) or "") != want: continue
        fr = next((f for f in s if any(p in f for name, pats in WORK if name == want for p in pats)), "?")
        c2[(ctx2(s), fr[:150])] += 1
    for (cx, fr), c in c2.most_common(int(sys.argv[4]) if len(sys.argv) > 4 else 25):
        print(f"{us(c):5.2f} µs  [{cx}] {fr}")

print("\n## by task x component")
c3 = collections.Counter((ctx2(s), first(s, WORK, True) or ("kernel only" if s and "kernel" in s[0] else "other")) for s in samples)
for (cx, w), c in sorted(c3.items(), key=lambda kv: (kv[0][0], -kv[1])):
    if us(c) >= 0.4: print(f"{us(c):5.1f} µs  {cx:40s} {w}")
