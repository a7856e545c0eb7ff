//! What each column of the lab's tables means. A column is named after its metric, the same
//! name as the key in `--json`, so a reader who learns it here can find it in a script's output;
//! the table under each experiment explains the columns it showed.

use crate::Lang;

/// `(metric, Chinese, English)`, for every metric any version records.
static TERMS: &[(&str, &str, &str)] = &[
    // Shared by several experiments.
    (
        "voucher",
        "本版本所用券的 id，可在数据库里按 voucher_id 查它的订单",
        "the version's voucher id: count its orders by voucher_id in the database",
    ),
    (
        "database",
        "本服务写订单用的数据库（在实验库旁边）",
        "the database the service wrote its orders to (beside the lab's)",
    ),
    (
        "instances",
        "同时运行的实例（进程）数",
        "instances (processes) running at once",
    ),
    ("users", "参与的用户数", "users taking part"),
    ("requests", "发出的请求总数", "requests sent in all"),
    ("reads", "读取次数", "reads made"),
    ("writes", "写入次数", "writes made"),
    ("readers", "并发读者数", "concurrent readers"),
    (
        "db_queries",
        "打到数据库的查询数",
        "queries that reached the database",
    ),
    ("ttl_ms", "TTL（毫秒）", "the TTL, in ms"),
    (
        "holders",
        "进入锁临界区的次数",
        "entries into the lock's critical section",
    ),
    (
        "stock",
        "券的库存（开卖时）",
        "the voucher's stock when the sale opened",
    ),
    (
        "orders",
        "数据库里写入的订单数",
        "orders written in the database",
    ),
    (
        "stock_left",
        "最后剩下的库存；负数就是超卖",
        "the stock left at the end; below zero means oversold",
    ),
    (
        "users_with_two_or_more",
        "拿到两张及以上订单的用户数",
        "users holding two orders or more",
    ),
    ("elapsed_ms", "总耗时（毫秒）", "time taken in all, in ms"),
    // session
    (
        "refused_requests",
        "登录后仍被当作未登录拒绝的请求",
        "requests refused as not logged in, after the login",
    ),
    (
        "lost_logins",
        "登录后至少有一次请求被当作未登录的用户",
        "users treated as logged out at least once after logging in",
    ),
    // cache-penetration
    (
        "unknown_ids",
        "哪里都不存在的商户 id 个数",
        "shop ids that exist nowhere",
    ),
    (
        "reads_of_unknown",
        "对这些不存在 id 的读取次数",
        "reads of those ids",
    ),
    (
        "db_queries_after_first_round",
        "第一轮读取得到答复之后，仍然打到数据库的查询",
        "queries that reached the database after the first round was answered",
    ),
    (
        "db_queries_for_shops",
        "读存在的商户时的数据库查询",
        "database queries for shops that exist",
    ),
    (
        "shops_found",
        "读到的存在商户数",
        "existing shops read back",
    ),
    (
        "bloom_false_positives",
        "布隆过滤器误放行的不存在 id",
        "unknown ids the Bloom filter let through",
    ),
    // cache-breakdown
    (
        "rebuild_ms",
        "一次重建要查多久（毫秒）",
        "how long one rebuild's query takes, in ms",
    ),
    (
        "db_rebuilds",
        "数据库重建热点 key 的次数",
        "times the database rebuilt the hot key",
    ),
    (
        "stale_answers",
        "返回旧值的读取",
        "reads answered with the old value",
    ),
    (
        "slowest_read_ms",
        "最慢一次读取（毫秒）",
        "the slowest read, in ms",
    ),
    // cache-avalanche
    ("keys", "一起写入缓存的条目数", "entries cached together"),
    (
        "jitter",
        "TTL 随机偏移的比例",
        "the TTL's random spread, as a fraction",
    ),
    (
        "peak_db_queries_per_100ms",
        "任一 100 ms 内最多的数据库查询",
        "most database queries in any 100 ms",
    ),
    (
        "peak_expiries_per_100ms",
        "任一 100 ms 内最多的过期条目",
        "most entries expiring in any 100 ms",
    ),
    (
        "peak_share_of_keys",
        "上一项占全部条目的比例（不变量要求 ≤ 30%）",
        "that peak as a share of all entries (the invariant: ≤ 30%)",
    ),
    // cache-consistency
    ("shops", "商户数", "shops"),
    (
        "pause_ms",
        "一次写入两步之间最长的停顿（毫秒）",
        "the longest pause between a write's two steps, in ms",
    ),
    (
        "stale_entries",
        "最后和数据库不一致的缓存条目",
        "cached entries that differ from the database at the end",
    ),
    (
        "uncached",
        "最后没有缓存的商户",
        "shops not cached at the end",
    ),
    // oversell
    (
        "buyers",
        "买家数，每人一个不同的用户",
        "buyers, each a different user",
    ),
    (
        "oversold",
        "超卖：订单数超出库存的张数",
        "oversold: orders beyond the stock",
    ),
    (
        "refused",
        "被拒绝（或出错）的买家",
        "buyers refused (or failed)",
    ),
    (
        "unsold_while_refused",
        "少卖：有买家被拒，库存却还剩的张数",
        "undersold: stock left although buyers were refused",
    ),
    (
        "script_errors",
        "抢购脚本报错的次数",
        "grabs whose script raised an error",
    ),
    // hot-voucher
    (
        "buckets",
        "库存拆成的分桶数（1 就是一个 key）",
        "buckets the stock is split over (1: one key)",
    ),
    (
        "false_refusals",
        "误拒：被告知售罄之后，实验室立刻去读，分桶里仍有货的买家",
        "false refusals: buyers told sold out while, as the lab read right after, a bucket held a unit",
    ),
    (
        "scripts_per_master",
        "每个主节点执行的脚本数（INFO commandstats 的 EVALSHA、EVAL），从多到少",
        "scripts each master ran (EVALSHA and EVAL in INFO commandstats), busiest first",
    ),
    (
        "busiest_master",
        "最忙的主节点占全部脚本的比例（不变量要求 ≤ 50%，三个主节点平分是 33%）",
        "the busiest master's share of the scripts (the invariant: ≤ 50 %; three sharing evenly: 33 %)",
    ),
    (
        "sold_on_one_redis",
        "同一个脚本在单机 Redis 上卖出的件数",
        "units the same script sold on a single Redis",
    ),
    (
        "script_error",
        "集群对脚本的答复（第一条报错原文）",
        "what the cluster answered the script (its first error, verbatim)",
    ),
    // lock-misdelete, lock-reentrancy
    (
        "stall_ms",
        "持有者在锁里卡住的时长（毫秒）",
        "how long a holder stalls inside the lock, in ms",
    ),
    (
        "overlaps",
        "两个持有者同时在临界区里的次数",
        "times two holders were inside at once",
    ),
    (
        "inner_wait_ms",
        "内层获取锁最多等多久（毫秒）",
        "how long the inner acquire waits at most, in ms",
    ),
    (
        "self_deadlocks",
        "等自己持有的锁而卡死的持有者",
        "holders stuck waiting for their own lock",
    ),
    (
        "freed_by_inner_release",
        "内层释放就删掉了外层锁的次数",
        "times the inner release deleted the outer hold's lock",
    ),
    // queues
    (
        "accepted",
        "已经回复“抢到了”的订单",
        "orders the buyers were told they got",
    ),
    (
        "written",
        "写进数据库的不同订单",
        "distinct orders written in the database",
    ),
    (
        "lost",
        "丢失：接受了却没写进数据库的订单",
        "lost: accepted but never written",
    ),
    ("written_twice", "写了两次的订单", "orders written twice"),
    (
        "kills",
        "对 consumer 的 kill -9 次数",
        "kill -9s of the consumer",
    ),
    (
        "drain_orders_per_s",
        "消费速率（订单/秒）",
        "orders written per second",
    ),
    ("table", "这次写订单的表", "the table the orders went to"),
    // likes
    (
        "clicks",
        "点击次数：每个用户点一下，双号用户同时再点一下",
        "clicks: one per user, and a second at once by every even user",
    ),
    (
        "liked_in_db",
        "数据库 tb_blog.liked 里的点赞数",
        "the like count in tb_blog.liked",
    ),
    (
        "likers_in_set",
        "点赞集合（ZSET）里的用户数",
        "users in the liked set (the ZSET)",
    ),
    (
        "miscounted",
        "两者之差：多算或少算的赞",
        "the difference: likes counted wrongly",
    ),
    (
        "blog",
        "本版本所用笔记的 id（tb_blog）",
        "the version's note id (tb_blog)",
    ),
    // feed-paging
    (
        "notes",
        "开始翻页时收件箱里的笔记数",
        "notes in the inbox when scrolling began",
    ),
    (
        "same_ms",
        "同一毫秒写入（分数相同）的笔记数",
        "notes written in the same millisecond (sharing a score)",
    ),
    ("page_size", "每页条数", "the page size"),
    ("pages", "读了几页", "pages read"),
    (
        "arrived_while_scrolling",
        "翻页期间新来的笔记",
        "notes written while the follower scrolled",
    ),
    ("shown", "一共展示的笔记条数", "notes shown in all"),
    (
        "shown_twice",
        "开始时已有、却出现了不止一次的笔记",
        "notes there at the start shown twice or more",
    ),
    (
        "skipped",
        "开始时已有、却一次都没出现的笔记",
        "notes there at the start never shown",
    ),
    // nearby-shops
    (
        "right_pages",
        "内容和顺序都正确的页数",
        "pages with the right shops in the right order",
    ),
    (
        "db_rows_read",
        "从数据库读出的商户行数",
        "shop rows read from the database",
    ),
    (
        "db_rows_per_page",
        "平均每页读出的行数（不变量要求 ≤ 每页条数）",
        "rows read per page (the invariant: ≤ the page size)",
    ),
    // sign-streak
    (
        "days_signed",
        "用户按自己的日历连续签到的天数",
        "days the user signed in, by their own calendar",
    ),
    ("streak", "算出来的连续签到天数", "the streak counted"),
    (
        "signed_in_march",
        "记在三月 key 里的签到天数",
        "sign-ins in March's key",
    ),
    (
        "month_keys",
        "签到写到了几个月份的 key",
        "month keys the sign-ins went to",
    ),
    (
        "today_seen_as",
        "统计时认为今天是几号",
        "the day of the month taken as today",
    ),
    // uv-count
    (
        "visitors",
        "一天里的不同访客数",
        "distinct visitors in the day",
    ),
    ("visits", "访问次数", "visits made"),
    ("counted", "统计出来的独立访客数", "unique visitors counted"),
    (
        "error",
        "与真实访客数的相对误差（不变量要求 ≤ 2%）",
        "the count's error (the invariant: ≤ 2 %)",
    ),
    (
        "bytes",
        "这个 key 占用的内存（MEMORY USAGE，不变量要求 ≤ 16 KB）",
        "the key's memory (MEMORY USAGE; the invariant: ≤ 16 KB)",
    ),
    (
        "bytes_per_visitor",
        "平均每个访客占的字节",
        "bytes per visitor",
    ),
];

/// What the column `metric` means, in `lang`.
pub fn explain(metric: &str, lang: Lang) -> Option<&'static str> {
    TERMS
        .iter()
        .find(|(m, _, _)| *m == metric)
        .map(|(_, zh, en)| lang.pick(*zh, *en))
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_term_once() {
        let mut names: Vec<&str> = super::TERMS.iter().map(|t| t.0).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len());
    }
}
