//! Raw baselines for the flash sale, measured in the same run as the HTTP phases so the ratios
//! compare like with like on a shared machine:
//!
//! - the same Lua script ([`hmdp::testing::seckill::GRAB`]) straight on Redis, on throw-away
//!   keys, with the same stock and the same user mix — one `EVALSHA` per round trip, and
//!   pipelined;
//! - plain batched multi-row `INSERT`s into `tb_voucher_order`, one transaction per batch on
//!   one connection, the shape of the order worker's writes without its dedup and stock update.

use std::{sync::Arc, time::Duration};

use hmdp::testing::{
    seckill::{GRAB, GrabCall, voucher_hash::Sale},
    storage::Db,
};

use crate::load::{Op, Outcome, op_phase};

/// SplitMix64: a cheap, well-mixed hash for picking users deterministically by request index.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The user of request `i` among `n`: the first `n` requests go to every user once (so every
/// user has tried even when the server is slow), then users are drawn at random — each user
/// sends many requests, as in a real flash sale, and the same user can be in flight twice.
pub fn pick_user(i: u64, n: u64) -> u64 {
    if i < n { i } else { splitmix64(i) % n }
}

/// Throw-away keys in the shape the script expects, on one hash tag.
struct GrabKeys {
    voucher: String,
    buyers: String,
    stream: String,
    deadlines: String,
}

impl GrabKeys {
    fn new() -> Self {
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let base = format!("bench:grab:{{{tag}}}");
        Self {
            voucher: format!("{base}:voucher"),
            buyers: format!("{base}:bought"),
            stream: format!("{base}:orders"),
            deadlines: format!("{base}:deadlines"),
        }
    }

    /// The grab of request `i` among `users` users, for voucher 1.
    fn call(&self, i: u64, users: u64) -> GrabCall<'_> {
        GrabCall {
            keys: [&self.voucher, &self.buyers, &self.stream, &self.deadlines],
            voucher: 1,
            user: pick_user(i, users) as i64 + 1,
            order: i as i64 + 1,
            deadline_ms: DEADLINE_MS,
            pending: None,
            trace: None,
        }
    }
}

/// The pay deadline every raw grab records, as the service's grab does on the stream transport.
const DEADLINE_MS: i64 = 4_102_444_800_000;

/// Runs the raw script for `duration`: `pipeline` = 1 sends one `EVALSHA` per round trip
/// over `connections` connections; more sends pipelines of that many over
/// `connections / pipeline` connections (the same number of scripts in flight).
pub async fn raw_grab(
    redis_url: &str,
    connections: usize,
    pipeline: usize,
    duration: Duration,
    stock: i64,
    users: u64,
) -> anyhow::Result<Outcome> {
    let client = redis::Client::open(redis_url)?;
    let keys = Arc::new(GrabKeys::new());
    let mut setup = client.get_multiplexed_async_connection().await?;
    let sale = Sale {
        stock,
        begin_ms: 0,
        end_ms: 4_102_444_800_000,
        sold: 0,
        generation: 0,
    };
    sale.load(&keys.voucher, &mut setup).await?;
    GRAB.load_async(&mut setup).await?;
    let tasks = if pipeline <= 1 {
        connections
    } else {
        (connections / pipeline).max(1)
    };
    let mut ops: Vec<Op> = Vec::new();
    for _ in 0..tasks {
        let conn = client.get_multiplexed_async_connection().await?;
        let keys = keys.clone();
        ops.push(Arc::new(move |i| {
            let mut conn = conn.clone();
            let keys = keys.clone();
            Box::pin(async move {
                if pipeline <= 1 {
                    let _: redis::Value = keys
                        .call(i, users)
                        .command()
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| format!("redis: {:?}", e.kind()))?;
                    return Ok(1);
                }
                let mut p = redis::pipe();
                for j in 0..pipeline as u64 {
                    let n = i * pipeline as u64 + j;
                    p.add_command(keys.call(n, users).command());
                }
                let _: Vec<redis::Value> = p
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("redis: {:?}", e.kind()))?;
                Ok(pipeline as u64)
            })
        }));
    }
    let name = if pipeline <= 1 {
        format!("raw EVALSHA grab ×{connections}")
    } else {
        format!("raw EVALSHA grab, pipelines of {pipeline}")
    };
    let out = op_phase(&name, duration, ops).await;
    let _: redis::RedisResult<()> = redis::cmd("DEL")
        .arg(&keys.voucher)
        .arg(&keys.buyers)
        .arg(&keys.stream)
        .arg(&keys.deadlines)
        .query_async(&mut setup)
        .await;
    out
}

/// Plain multi-row `INSERT`s of `batch` rows, one transaction each, on one connection, for
/// `duration`, into `tb_voucher_order` under a voucher id no real voucher has (the rows are
/// deleted afterwards). Each call counts `batch` operations, so the rate is rows/s.
pub async fn raw_insert(db: &Db, batch: usize, duration: Duration) -> anyhow::Result<Outcome> {
    let scratch_voucher: i64 = 8_000_000_000 + rand::random_range(0..1_000_000_000i64);
    let base: i64 = 1_000_000_000_000 + rand::random_range(0..1_000_000_000i64) * 1_000;
    let sql = format!(
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, pay_type, status) VALUES {}",
        vec!["(?, ?, ?, 1, 1)"; batch].join(", ")
    );
    let (sql, db2) = (Arc::new(sql), db.clone());
    let op: Op = Arc::new(move |i| {
        let (sql, db) = (sql.clone(), db2.clone());
        Box::pin(async move {
            let r: Result<(), sqlx::Error> = hmdp::on_pool!(&db, pool => {
                async {
                    let mut tx = pool.begin().await?;
                    let mut q = sqlx::query(sql.as_str());
                    for j in 0..batch as i64 {
                        let n = i as i64 * batch as i64 + j;
                        q = q.bind(base + n).bind(n + 1).bind(scratch_voucher);
                    }
                    q.execute(&mut *tx).await?;
                    tx.commit().await?;
                    Ok(())
                }
                .await
            });
            r.map(|_| batch as u64).map_err(|e| format!("sql: {e}"))
        })
    });
    let out = op_phase(
        &format!("raw INSERT, batches of {batch}"),
        duration,
        vec![op],
    )
    .await;
    let _: Result<(), sqlx::Error> = hmdp::on_pool!(db, pool => {
        sqlx::query("DELETE FROM tb_voucher_order WHERE voucher_id = ?")
            .bind(scratch_voucher)
            .execute(pool)
            .await
            .map(|_| ())
    });
    out
}

/// What deleting one batch's `seckill:pending:<id>` keys costs: `(seconds per batch one
/// awaited `DEL` at a time, seconds per batch as one pipeline)`, over `rounds` batches of
/// `batch` keys each. The order worker's `ack` deletes them one at a time; this measures what
/// that costs next to the database write, and what a pipeline would cost instead.
pub async fn pending_del_cost(
    redis_url: &str,
    batch: usize,
    rounds: usize,
) -> anyhow::Result<(f64, f64)> {
    let mut conn = redis::Client::open(redis_url)?
        .get_multiplexed_async_connection()
        .await?;
    let base = format!("bench:pending:{}:", uuid::Uuid::new_v4().simple());
    let keys: Vec<String> = (0..batch).map(|i| format!("{base}{i}")).collect();
    let fill = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut p = redis::pipe();
        for k in &keys {
            p.cmd("SET")
                .arg(k)
                .arg("1:2")
                .arg("PX")
                .arg(60_000)
                .ignore();
        }
        let mut conn = conn.clone();
        async move { p.query_async::<()>(&mut conn).await }
    };
    let mut sequential = std::time::Duration::ZERO;
    let mut pipelined = std::time::Duration::ZERO;
    for _ in 0..rounds {
        fill(&mut conn).await?;
        let t = std::time::Instant::now();
        for k in &keys {
            let _: i64 = redis::cmd("DEL").arg(k).query_async(&mut conn).await?;
        }
        sequential += t.elapsed();
        fill(&mut conn).await?;
        let t = std::time::Instant::now();
        let mut p = redis::pipe();
        for k in &keys {
            p.cmd("DEL").arg(k).ignore();
        }
        p.query_async::<()>(&mut conn).await?;
        pipelined += t.elapsed();
    }
    let n = rounds.max(1) as f64;
    Ok((sequential.as_secs_f64() / n, pipelined.as_secs_f64() / n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_user_first_then_random() {
        let n = 100;
        let first: Vec<u64> = (0..n).map(|i| pick_user(i, n)).collect();
        assert_eq!(first, (0..n).collect::<Vec<_>>());
        let mut hits = vec![0u32; n as usize];
        for i in n..n * 200 {
            let u = pick_user(i, n);
            assert!(u < n);
            hits[u as usize] += 1;
        }
        // Roughly uniform: every user drawn, none wildly more than the mean of 199.
        assert!(hits.iter().all(|h| *h > 120 && *h < 300), "{hits:?}");
    }
}
