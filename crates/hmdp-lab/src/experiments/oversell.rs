//! 优惠券秒杀: the stock. Many buyers at once, each a different user, for fewer vouchers than
//! buyers. The course's first version checks the stock it read and decrements blindly; the
//! optimistic lock that compares against the stock read refuses too many; `stock > 0` holds.
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

use super::{Experiment, version};
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
    versions: &[
        version!(
            "v1-no-check",
            false,
            "read the stock, check it, then UPDATE stock = stock - 1",
            no_check
        ),
        version!(
            "v2-version-cas",
            false,
            "optimistic lock: UPDATE … WHERE stock = <the stock read>",
            version_cas
        ),
        version!(
            "v2-stock-gt-0",
            true,
            "UPDATE … SET stock = stock - 1 WHERE stock > 0",
            stock_gt_0
        ),
        version!(
            "hmdp",
            true,
            "the service: its grab script decides in Redis, its worker writes the orders",
            hmdp
        ),
    ],
};

/// How a version decrements the stock it read.
#[derive(Clone, Copy)]
enum Decrement {
    Blind,
    IfUnchanged,
    IfPositive,
}

async fn no_check(lab: &Lab) -> anyhow::Result<Outcome> {
    sale(lab, Decrement::Blind).await
}

async fn version_cas(lab: &Lab) -> anyhow::Result<Outcome> {
    sale(lab, Decrement::IfUnchanged).await
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
