//! 优惠券秒杀: the stock. Many buyers at once, each a different user, for fewer vouchers than
//! buyers. The course's first version checks the stock it read and decrements blindly; the
//! optimistic lock that compares against the stock read refuses too many; `stock >= 0`, as the
//! course's notes write it, sells exactly one more than the stock; `stock > 0` holds.
//! The `hmdp` version is the service's own decision: its Lua script in Redis, then its worker
//! writing the orders into the service's database.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use super::{Experiment, Text, version};
use crate::{
    Lab, Outcome, Trace,
    service::Service,
    trace::{self, Actor, Event, What},
};

/// Vouchers on sale in each version.
const STOCK: i64 = 50;
/// Buyers, each a different user, all at once.
const BUYERS: i64 = 400;
/// The course's `Thread.sleep`-style window between reading the stock and writing: it makes
/// the race the chapter is about happen on every run instead of now and then.
const WINDOW: Duration = Duration::from_millis(20);
/// Buyers whose steps the trace shows: a few who read the same stock, enough to see the race.
const TRACED_BUYERS: usize = 4;

pub static EXPERIMENT: Experiment = Experiment {
    name: "oversell",
    chapter: "优惠券秒杀",
    invariant: "every voucher is sold once: none beyond the stock, none left while buyers were refused",
    invariant_zh: "每张券只卖一次：不超过库存，有买家被拒时也不剩库存",
    lesson: Text {
        zh: "判断库存和扣减库存要在同一条 UPDATE 里原子完成：WHERE stock > 0；写成 >= 0 就会多卖一张。",
        en: "Check and decrement the stock in one UPDATE: WHERE stock > 0; written as >= 0 it sells one more than the stock.",
    },
    versions: &[
        version!(
            "v1-no-check",
            false,
            "read the stock, check it, then UPDATE stock = stock - 1",
            "读库存、判断，然后 UPDATE stock = stock - 1",
            no_check
        ),
        version!(
            "v2-version-cas",
            false,
            "optimistic lock: UPDATE … WHERE stock = <the stock read>",
            "乐观锁：UPDATE … WHERE stock = <读到的库存>",
            version_cas
        ),
        version!(
            "v2-stock-ge-0",
            false,
            "the course notes' slip: UPDATE … SET stock = stock - 1 WHERE stock >= 0 (.ge, not .gt)",
            "课程笔记里的笔误：UPDATE … SET stock = stock - 1 WHERE stock >= 0（写成了 .ge 而不是 .gt）",
            stock_ge_0
        ),
        version!(
            "v2-stock-gt-0",
            true,
            "UPDATE … SET stock = stock - 1 WHERE stock > 0",
            "UPDATE … SET stock = stock - 1 WHERE stock > 0",
            stock_gt_0
        ),
        version!(
            "lua-before-preload",
            false,
            "the course's grab script on a voucher whose stock key was never loaded: nil <= 0 errors",
            "课程的抢购脚本，但券的库存从没写进 Redis：nil 和 0 比较，每次抢购都报错",
            lua_before_preload
        ),
        version!(
            "hmdp",
            true,
            "the service: its grab script decides in Redis, its worker writes the orders",
            "本服务：抢购脚本在 Redis 里做决定，worker 写订单",
            hmdp
        ),
    ],
};

/// How a version decrements the stock it read.
#[derive(Clone, Copy)]
enum Decrement {
    Blind,
    IfUnchanged,
    /// `stock >= 0`: true at 0 as well, so the last unit's late buyers still decrement once.
    IfNotNegative,
    IfPositive,
}

async fn no_check(lab: &Lab) -> anyhow::Result<Outcome> {
    sale(lab, Decrement::Blind).await
}

async fn version_cas(lab: &Lab) -> anyhow::Result<Outcome> {
    sale(lab, Decrement::IfUnchanged).await
}

async fn stock_ge_0(lab: &Lab) -> anyhow::Result<Outcome> {
    sale(lab, Decrement::IfNotNegative).await
}

async fn stock_gt_0(lab: &Lab) -> anyhow::Result<Outcome> {
    sale(lab, Decrement::IfPositive).await
}

/// `BUYERS` buyers at once for `STOCK` vouchers, each through the course's steps: read the
/// voucher, check the stock, (window), decrement, write the order.
async fn sale(lab: &Lab, how: Decrement) -> anyhow::Result<Outcome> {
    let voucher = lab.new_voucher(STOCK).await?;
    let refused = Arc::new(AtomicI64::new(0));
    let trace = Trace::start();
    let mut buyers = Vec::new();
    for user in 1..=BUYERS {
        let db = lab.db.clone();
        let refused = refused.clone();
        let (trace, me) = (trace.clone(), Actor::Buyer { user });
        buyers.push(tokio::spawn(async move {
            let stock: i64 = sqlx::query_scalar(
                "SELECT CAST(stock AS SIGNED) FROM tb_seckill_voucher WHERE voucher_id = ?",
            )
            .bind(voucher)
            .fetch_one(&db)
            .await?;
            trace.record(me, What::ReadStock { stock });
            if stock < 1 {
                refused.fetch_add(1, Ordering::Relaxed);
                return anyhow::Ok(());
            }
            tokio::time::sleep(WINDOW).await;
            let update = match how {
                Decrement::Blind => sqlx::query(
                    "UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ?",
                )
                .bind(voucher),
                Decrement::IfUnchanged => sqlx::query(
                    "UPDATE tb_seckill_voucher SET stock = stock - 1 \
                     WHERE voucher_id = ? AND stock = ?",
                )
                .bind(voucher)
                .bind(stock),
                Decrement::IfNotNegative => sqlx::query(
                    "UPDATE tb_seckill_voucher SET stock = stock - 1 \
                     WHERE voucher_id = ? AND stock >= 0",
                )
                .bind(voucher),
                Decrement::IfPositive => sqlx::query(
                    "UPDATE tb_seckill_voucher SET stock = stock - 1 \
                     WHERE voucher_id = ? AND stock > 0",
                )
                .bind(voucher),
            };
            let affected = update.execute(&db).await?.rows_affected();
            let how = match how {
                Decrement::Blind => trace::Decrement::Blind,
                Decrement::IfUnchanged => trace::Decrement::IfUnchanged { read: stock },
                Decrement::IfNotNegative => trace::Decrement::IfNotNegative,
                Decrement::IfPositive => trace::Decrement::IfPositive,
            };
            trace.record(me, What::Decrement { how, affected });
            if affected == 0 {
                refused.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, ?, ?)")
                .bind(voucher * 1_000_000 + user)
                .bind(user)
                .bind(voucher)
                .execute(&db)
                .await?;
            trace.record(me, What::InsertOrder { user });
            Ok(())
        }));
    }
    for b in buyers {
        b.await??;
    }
    let (orders, doubled) = lab.orders(voucher).await?;
    let left = lab.stock(voucher).await?;
    trace.record(
        Actor::Lab,
        What::Sold {
            stock: STOCK,
            orders,
            left,
        },
    );
    let shown = raced(&trace.events());
    let timeline = trace.timeline(|e| e.actor == Actor::Lab || shown.contains(&e.actor), 64);
    Ok(sold(
        voucher,
        orders,
        doubled,
        refused.load(Ordering::Relaxed),
        left,
    )
    .traced(timeline))
}

/// The buyers whose steps show the race: of the buyers who went on to the `UPDATE`, those who
/// read the stock value most of them read: the first two whose `UPDATE` changed a row, the
/// first whose `UPDATE` changed none (refused with stock left), and the one whose `UPDATE` was
/// the first beyond the stock (the first voucher sold twice).
fn raced(events: &[Event]) -> Vec<Actor> {
    let mut read: HashMap<Actor, i64> = HashMap::new();
    // Buyers in the order of their UPDATEs, with the rows each changed.
    let mut updated: Vec<(Actor, u64)> = Vec::new();
    for e in events {
        match e.what {
            What::ReadStock { stock } => {
                read.insert(e.actor, stock);
            }
            What::Decrement { affected, .. } => updated.push((e.actor, affected)),
            _ => {}
        }
    }
    let mut readers_of: HashMap<i64, usize> = HashMap::new();
    for (actor, _) in &updated {
        *readers_of.entry(read[actor]).or_default() += 1;
    }
    let Some(value) = readers_of
        .into_iter()
        .max_by_key(|(v, n)| (*n, *v))
        .map(|(v, _)| v)
    else {
        return Vec::new();
    };
    // The group in the order they read.
    let mut group: Vec<(u64, Actor, u64)> = events
        .iter()
        .filter(|e| matches!(e.what, What::ReadStock { stock } if stock == value))
        .filter_map(|e| {
            let affected = updated.iter().find(|(a, _)| *a == e.actor)?.1;
            Some((e.t_us, e.actor, affected))
        })
        .collect();
    group.sort_by_key(|g| g.0);
    let mut shown: Vec<Actor> = group
        .iter()
        .filter(|g| g.2 > 0)
        .take(2)
        .map(|g| g.1)
        .collect();
    shown.extend(group.iter().find(|g| g.2 == 0).map(|g| g.1));
    let beyond = updated
        .iter()
        .filter(|(_, affected)| *affected > 0)
        .nth(STOCK as usize)
        .map(|(a, _)| *a);
    if let Some(a) = beyond.filter(|a| read.get(a) == Some(&value) && !shown.contains(a)) {
        shown.push(a);
    }
    shown.truncate(TRACED_BUYERS);
    shown
}

/// The course's grab script as it compares the stock: `tonumber(GET stock)` against 0, which
/// raises an error when the key is missing (`nil` cannot be compared with a number).
const COURSE_GRAB: &str = r"
if tonumber(redis.call('get', KEYS[1])) <= 0 then
  return 1
end
if redis.call('sismember', KEYS[2], ARGV[1]) == 1 then
  return 2
end
redis.call('incrby', KEYS[1], -1)
redis.call('sadd', KEYS[2], ARGV[1])
return 0
";

/// The course's async sale on a voucher created before the stock was preloaded into Redis (or
/// on a Redis that lost the key): every buyer's script fails, nothing is sold, nobody is told
/// why. An accepted grab would take the stock in the database and write its order; none is.
async fn lua_before_preload(lab: &Lab) -> anyhow::Result<Outcome> {
    let voucher = lab.new_voucher(STOCK).await?;
    let stock_key = lab.key(&format!("seckill:stock:{voucher}"));
    let buyers_key = lab.key(&format!("seckill:order:{voucher}"));
    let script = redis::Script::new(COURSE_GRAB);
    let mut tasks = Vec::new();
    for user in 1..=BUYERS {
        let (db, mut redis, script) = (lab.db.clone(), lab.redis.clone(), script.clone());
        let keys = (stock_key.clone(), buyers_key.clone());
        tasks.push(tokio::spawn(async move {
            let answer: redis::RedisResult<i64> = script
                .key(&keys.0)
                .key(&keys.1)
                .arg(user)
                .invoke_async(&mut redis)
                .await;
            match answer {
                Ok(0) => {
                    sqlx::query(
                        "UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ?",
                    )
                    .bind(voucher)
                    .execute(&db)
                    .await?;
                    sqlx::query(
                        "INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, ?, ?)",
                    )
                    .bind(voucher * 1_000_000 + user)
                    .bind(user)
                    .bind(voucher)
                    .execute(&db)
                    .await?;
                    anyhow::Ok((false, false))
                }
                Ok(_) => Ok((true, false)),
                Err(_) => Ok((true, true)),
            }
        }));
    }
    let (mut refused, mut errors) = (0, 0);
    for t in tasks {
        let (r, e) = t.await??;
        refused += i64::from(r);
        errors += i64::from(e);
    }
    let (orders, doubled) = lab.orders(voucher).await?;
    let left = lab.stock(voucher).await?;
    Ok(sold(voucher, orders, doubled, refused, left).metric("script_errors", errors))
}

/// The same sale through the service: `BUYERS` grabs at once, then the orders its worker wrote.
async fn hmdp(lab: &Lab) -> anyhow::Result<Outcome> {
    let service = Service::start(lab).await?;
    let voucher = service.new_sale(STOCK).await?;
    let mut buyers = Vec::new();
    for user in 1..=BUYERS {
        let buyer = service.buyer();
        buyers.push(tokio::spawn(async move { buyer.buy(user, voucher).await }));
    }
    let mut accepted = 0;
    for b in buyers {
        accepted += i64::from(b.await??);
    }
    let (orders, doubled) = service.written(voucher, accepted).await?;
    let left = service.stock(voucher).await?;
    let database = service.database_url.clone();
    service.stop().await?;
    Ok(sold(voucher, orders, doubled, BUYERS - accepted, left).metric("database", database))
}

/// What a sale of `STOCK` to `BUYERS` came to, and whether it sold each voucher exactly once.
fn sold(voucher: i64, orders: i64, doubled: i64, refused: i64, left: i64) -> Outcome {
    let oversold = (orders - STOCK).max(0);
    let unsold_while_refused = if refused > 0 { left.max(0) } else { 0 };
    Outcome::new(oversold == 0 && unsold_while_refused == 0)
        .metric("stock", STOCK)
        .metric("buyers", BUYERS)
        .metric("orders", orders)
        .metric("oversold", oversold)
        .metric("users_with_two_or_more", doubled)
        .metric("refused", refused)
        .metric("stock_left", left)
        .metric("unsold_while_refused", unsold_while_refused)
        .voucher(voucher)
}
