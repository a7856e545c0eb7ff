//! Flash-sale vouchers and voucher orders: `tb_seckill_voucher`, `tb_voucher_order`.

use chrono::NaiveDateTime;
use serde::Serialize;

use super::{BeginWrite, Db, Result, impl_from_row, is_unique_violation, last_id};
use crate::domain::{ApiDateTime, OrderId, StockBuckets, UserId, VoucherId};

/// A flash-sale voucher's sale fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeckillVoucher {
    pub voucher_id: i64,
    pub stock: i64,
    /// Server-local time, as the original stores it.
    pub begin_time: NaiveDateTime,
    pub end_time: NaiveDateTime,
    /// Buckets its stock is split over in Redis.
    pub buckets: StockBuckets,
}

impl_from_row!(SeckillVoucher, |row| {
    Ok(SeckillVoucher {
        voucher_id: row.try_get_unchecked("voucher_id")?,
        stock: row.try_get_unchecked("stock")?,
        begin_time: row.try_get_unchecked("begin_time")?,
        end_time: row.try_get_unchecked("end_time")?,
        buckets: StockBuckets::new(row.try_get_unchecked("buckets")?)
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
    })
});

/// A new flash-sale voucher.
#[derive(Debug, Clone)]
pub struct NewSeckillVoucher {
    pub shop_id: i64,
    pub title: String,
    pub sub_title: Option<String>,
    pub rules: Option<String>,
    pub pay_value: i64,
    pub actual_value: i64,
    pub stock: i64,
    pub begin_time: NaiveDateTime,
    pub end_time: NaiveDateTime,
    pub buckets: StockBuckets,
}

/// Saves `tb_voucher` (type 1) and `tb_seckill_voucher` in one transaction.
pub async fn insert_seckill_voucher(db: &Db, v: &NewSeckillVoucher) -> Result<VoucherId> {
    let id = crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let r = sqlx::query(
            "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, actual_value, type, status) \
             VALUES (?, ?, ?, ?, ?, ?, 1, 1)",
        )
        .bind(v.shop_id)
        .bind(&v.title)
        .bind(&v.sub_title)
        .bind(&v.rules)
        .bind(v.pay_value)
        .bind(v.actual_value)
        .execute(&mut *tx)
        .await?;
        let id = last_id(&r);
        sqlx::query("INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (?, ?, ?, ?)")
            .bind(id)
            .bind(v.stock)
            .bind(v.begin_time)
            .bind(v.end_time)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO hmdp_voucher_initial_stock (voucher_id, initial_stock) VALUES (?, ?)")
            .bind(id)
            .bind(v.stock)
            .execute(&mut *tx)
            .await?;
        if v.buckets.split() {
            sqlx::query("INSERT INTO hmdp_voucher_stock_buckets (voucher_id, buckets) VALUES (?, ?)")
                .bind(id)
                .bind(i64::from(v.buckets.get()))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        id
    });
    Ok(VoucherId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?)
}

/// A sale's row with its bucket count (no row in `hmdp_voucher_stock_buckets`: one bucket).
const SALE_COLUMNS: &str = "SELECT sv.voucher_id, sv.stock, sv.begin_time, sv.end_time, \
     CAST(COALESCE(b.buckets, 1) AS SIGNED) AS buckets FROM tb_seckill_voucher sv \
     JOIN tb_voucher v ON v.id = sv.voucher_id \
     LEFT JOIN hmdp_voucher_stock_buckets b ON b.voucher_id = sv.voucher_id \
     WHERE sv.voucher_id = ? AND v.status = 1";

/// The sale fields of a flash-sale voucher on sale (`status = 1`), if it is one.
pub async fn seckill_voucher(db: &Db, id: VoucherId) -> Result<Option<SeckillVoucher>> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, SeckillVoucher>(
            SALE_COLUMNS,
        )
        .bind(id.get())
        .fetch_optional(pool)
        .await?
    }))
}

/// The ids of every flash-sale voucher on sale (`status = 1`), in order.
pub async fn seckill_voucher_ids(db: &Db) -> Result<Vec<i64>> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>(
            "SELECT CAST(sv.voucher_id AS SIGNED) FROM tb_seckill_voucher sv \
             JOIN tb_voucher v ON v.id = sv.voucher_id WHERE v.status = 1 ORDER BY sv.voucher_id",
        )
        .fetch_all(pool)
        .await?
    }))
}

/// What the database knows of a sale, read in one transaction so the stock and the orders are
/// one consistent snapshot (the cache warm-up relies on it).
#[derive(Debug, Clone)]
pub struct SaleSnapshot {
    pub voucher: SeckillVoucher,
    /// `(order id, user id)` of every persisted order of the voucher.
    pub orders: Vec<(i64, i64)>,
    /// The orders among them that were closed (cancelled or timed out): the stock holds their
    /// units again.
    pub closed: Vec<i64>,
}

pub async fn sale_snapshot(db: &Db, id: VoucherId) -> Result<Option<SaleSnapshot>> {
    Ok(crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        let voucher = sqlx::query_as::<_, SeckillVoucher>(
            SALE_COLUMNS,
        )
        .bind(id.get())
        .fetch_optional(&mut *tx)
        .await?;
        let snapshot = match voucher {
            None => None,
            Some(voucher) => {
                let rows: Vec<(i64, i64, i64)> = sqlx::query_as::<_, (i64, i64, i64)>(
                    "SELECT id, CAST(user_id AS SIGNED), CAST(status AS SIGNED) FROM tb_voucher_order \
                     WHERE voucher_id = ?",
                )
                .bind(id.get())
                .fetch_all(&mut *tx)
                .await?;
                let cancelled = crate::domain::VoucherOrderStatus::Cancelled.code();
                let closed = rows.iter().filter(|r| r.2 == cancelled).map(|r| r.0).collect();
                let orders = rows.into_iter().map(|(o, u, _)| (o, u)).collect();
                Some(SaleSnapshot { voucher, orders, closed })
            }
        };
        tx.commit().await?;
        snapshot
    }))
}

/// One accepted order on its way to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewOrder {
    pub id: OrderId,
    pub user_id: UserId,
    pub voucher_id: VoucherId,
}

/// Why a batch could not be written as a whole.
#[derive(Debug)]
pub enum BatchError {
    /// The database failed; nothing was written.
    Storage(super::StorageError),
    /// A voucher had less stock than orders to write; nothing was written.
    StockShort {
        #[allow(dead_code)] // read through `Debug`, in the log line of a refused batch
        voucher_id: i64,
    },
}

impl From<sqlx::Error> for BatchError {
    fn from(e: sqlx::Error) -> Self {
        BatchError::Storage(e.into())
    }
}

/// Why an order of a batch was not written although the batch was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// The buyer already has another order of this voucher (the unique key `(user_id,
    /// voucher_id)`): Redis accepted a second order of one buyer (its buyer set was lost).
    BuyerHasOrder { existing_order: i64 },
    /// The order id already belongs to an order of another user or voucher.
    IdTaken { user_id: i64, voucher_id: i64 },
    /// The insert skipped the order, yet nothing in the database collides with it.
    NotInserted,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conflict::BuyerHasOrder { existing_order } => write!(
                f,
                "conflict: the buyer already has order {existing_order} of this voucher"
            ),
            Conflict::IdTaken {
                user_id,
                voucher_id,
            } => write!(
                f,
                "conflict: the order id is taken by an order of user {user_id}, voucher {voucher_id}"
            ),
            Conflict::NotInserted => write!(f, "conflict: the insert skipped the order"),
        }
    }
}

/// What writing a batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Rows inserted now.
    pub inserted: u64,
    /// Orders of the batch that were in the database already, under their own id (an earlier
    /// delivery wrote them).
    pub already_written: u64,
    /// Orders that were not written and never will be, with the reason.
    pub conflicts: Vec<(NewOrder, Conflict)>,
}

/// Writes a batch of orders in one transaction: per voucher, one multi-row insert that skips
/// orders already written (same id, or same user and voucher) and one stock decrement by the
/// number actually inserted, guarded by `stock >= n`. Idempotent: writing the same batch twice
/// inserts nothing the second time.
///
/// When fewer rows are inserted than sent, the orders that are not in the database under their
/// own id (with their own user and voucher) are told apart from redeliveries and returned as
/// [`BatchOutcome::conflicts`], so they are not taken for "already written" while the buyer
/// was told the order succeeded.
pub async fn write_order_batch(db: &Db, orders: &[NewOrder]) -> Result<BatchOutcome, BatchError> {
    super::traced(db, "write_order_batch", write_batch(db, orders)).await
}

async fn write_batch(db: &Db, orders: &[NewOrder]) -> Result<BatchOutcome, BatchError> {
    let mut by_voucher: std::collections::BTreeMap<VoucherId, Vec<&NewOrder>> = Default::default();
    for o in orders {
        by_voucher.entry(o.voucher_id).or_default().push(o);
    }
    let insert_head = match db {
        Db::Sqlite(_) => {
            "INSERT OR IGNORE INTO tb_voucher_order (id, user_id, voucher_id, pay_type, status) VALUES "
        }
        Db::MySql(_) => {
            "INSERT IGNORE INTO tb_voucher_order (id, user_id, voucher_id, pay_type, status) VALUES "
        }
    };
    let outcome = crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let mut outcome = BatchOutcome::default();
        for (voucher_id, group) in &by_voucher {
            let sql = format!("{insert_head}{}", vec!["(?, ?, ?, 1, 1)"; group.len()].join(", "));
            let mut q = sqlx::query(&sql);
            for o in group {
                q = q.bind(o.id).bind(o.user_id).bind(o.voucher_id);
            }
            let inserted = q.execute(&mut *tx).await?.rows_affected();
            if inserted > 0 {
                let updated = sqlx::query(
                    "UPDATE tb_seckill_voucher SET stock = stock - ?, update_time = CURRENT_TIMESTAMP \
                     WHERE voucher_id = ? AND stock >= ?",
                )
                .bind(inserted as i64)
                .bind(voucher_id)
                .bind(inserted as i64)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if updated == 0 {
                    tx.rollback().await?;
                    return Err(BatchError::StockShort {
                        voucher_id: voucher_id.get(),
                    });
                }
            }
            outcome.inserted += inserted;
            if inserted < group.len() as u64 {
                // Rare (redeliveries, conflicts): look at what the skipped ones collided with,
                // inside the transaction so the answer matches what was just written.
                let ids = group.iter().map(|o| o.id);
                let users = group.iter().map(|o| o.user_id);
                let sql = format!(
                    "SELECT id, CAST(user_id AS SIGNED), CAST(voucher_id AS SIGNED) FROM tb_voucher_order \
                     WHERE id IN ({}) OR (voucher_id = ? AND user_id IN ({}))",
                    vec!["?"; group.len()].join(", "),
                    vec!["?"; group.len()].join(", ")
                );
                let mut q = sqlx::query_as::<_, (i64, i64, i64)>(&sql);
                for id in ids {
                    q = q.bind(id);
                }
                q = q.bind(voucher_id);
                for u in users {
                    q = q.bind(u);
                }
                let rows = q.fetch_all(&mut *tx).await?;
                let mut present = 0u64;
                for o in group {
                    match classify(o, &rows) {
                        None => present += 1,
                        Some(c) => outcome.conflicts.push((**o, c)),
                    }
                }
                // Orders inserted just now are counted by `inserted`, not as redeliveries.
                outcome.already_written += present.saturating_sub(inserted);
            }
        }
        tx.commit().await?;
        outcome
    });
    Ok(outcome)
}

/// `None` when `o` is in `rows` under its own id with its own user and voucher; otherwise the
/// row it collides with.
fn classify(o: &NewOrder, rows: &[(i64, i64, i64)]) -> Option<Conflict> {
    let (id, user, voucher) = (o.id.get(), o.user_id.get(), o.voucher_id.get());
    if rows.contains(&(id, user, voucher)) {
        return None;
    }
    if let Some(&(_, user_id, voucher_id)) = rows.iter().find(|r| r.0 == id) {
        return Some(Conflict::IdTaken {
            user_id,
            voucher_id,
        });
    }
    match rows.iter().find(|r| r.1 == user && r.2 == voucher) {
        Some(&(existing_order, _, _)) => Some(Conflict::BuyerHasOrder { existing_order }),
        // Neither its id nor its buyer is there (should not happen): report it rather than
        // pretend it was written.
        None => Some(Conflict::NotInserted),
    }
}

/// The outcome of the database-only (sync) order path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOutcome {
    Created,
    SoldOut,
    Duplicate,
}

/// The original course's database path: in one transaction, refuse a second order of the
/// user, take one from stock optimistically (`stock > 0`), insert the order.
pub async fn create_order_sync(db: &Db, order: NewOrder) -> Result<SyncOutcome> {
    super::traced(db, "create_order_sync", create_sync(db, order)).await
}

async fn create_sync(db: &Db, order: NewOrder) -> Result<SyncOutcome> {
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let existing: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM tb_voucher_order WHERE user_id = ? AND voucher_id = ?",
        )
        .bind(order.user_id)
        .bind(order.voucher_id)
        .fetch_one(&mut *tx)
        .await?;
        if existing > 0 {
            return Ok(SyncOutcome::Duplicate);
        }
        let taken = sqlx::query(
            "UPDATE tb_seckill_voucher SET stock = stock - 1, update_time = CURRENT_TIMESTAMP \
             WHERE voucher_id = ? AND stock > 0",
        )
        .bind(order.voucher_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if taken == 0 {
            return Ok(SyncOutcome::SoldOut);
        }
        let inserted = sqlx::query(
            "INSERT INTO tb_voucher_order (id, user_id, voucher_id, pay_type, status) VALUES (?, ?, ?, 1, 1)",
        )
        .bind(order.id)
        .bind(order.user_id)
        .bind(order.voucher_id)
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            // The unique key caught a concurrent second order of the same user.
            Err(e) if is_unique_violation(&e) => return Ok(SyncOutcome::Duplicate),
            Err(e) => return Err(e.into()),
        }
        tx.commit().await?;
        Ok(SyncOutcome::Created)
    })
}

/// An order as its owner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VoucherOrder {
    pub id: i64,
    /// The id as a string: JavaScript numbers cannot hold ids above 2^53 exactly.
    pub id_str: String,
    pub user_id: i64,
    pub voucher_id: i64,
    pub pay_type: i64,
    /// 1 unpaid, 2 paid, 3 used, 4 cancelled, 5 refunding, 6 refunded.
    pub status: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create_time: Option<ApiDateTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pay_time: Option<ApiDateTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_time: Option<ApiDateTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refund_time: Option<ApiDateTime>,
}

impl_from_row!(VoucherOrder, |row| {
    let id: i64 = row.try_get_unchecked("id")?;
    Ok(VoucherOrder {
        id,
        id_str: id.to_string(),
        user_id: row.try_get_unchecked("user_id")?,
        voucher_id: row.try_get_unchecked("voucher_id")?,
        pay_type: row.try_get_unchecked("pay_type")?,
        status: row.try_get_unchecked("status")?,
        create_time: row.try_get_unchecked("create_time")?,
        pay_time: row.try_get_unchecked("pay_time")?,
        use_time: row.try_get_unchecked("use_time")?,
        refund_time: row.try_get_unchecked("refund_time")?,
    })
});

const ORDER_COLUMNS: &str = "SELECT id, user_id, voucher_id, pay_type, status, create_time, \
     pay_time, use_time, refund_time FROM tb_voucher_order";

/// The id of `user`'s order of `voucher`, if there is one (the unique key allows one).
pub async fn order_id_of(db: &Db, user: UserId, voucher: VoucherId) -> Result<Option<i64>> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>(
            "SELECT id FROM tb_voucher_order WHERE user_id = ? AND voucher_id = ? LIMIT 1",
        )
        .bind(user.get())
        .bind(voucher.get())
        .fetch_optional(pool)
        .await?
    }))
}

/// One order by id.
pub async fn order(db: &Db, id: i64) -> Result<Option<VoucherOrder>> {
    let sql = format!("{ORDER_COLUMNS} WHERE id = ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, VoucherOrder>(&sql).bind(id).fetch_optional(pool).await?
    }))
}

/// A user's orders, newest first.
pub async fn orders_of_user(db: &Db, user: UserId, limit: i64) -> Result<Vec<VoucherOrder>> {
    let sql = format!("{ORDER_COLUMNS} WHERE user_id = ? ORDER BY id DESC LIMIT ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, VoucherOrder>(&sql).bind(user.get()).bind(limit).fetch_all(pool).await?
    }))
}

/// Which of these order ids are in the database.
#[cfg(feature = "test-util")]
pub async fn existing_order_ids(db: &Db, ids: &[i64]) -> Result<Vec<i64>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT id FROM tb_voucher_order WHERE id IN ({})",
        vec!["?"; ids.len()].join(", ")
    );
    Ok(crate::storage::on_pool!(db, pool => {
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for id in ids {
            q = q.bind(*id);
        }
        q.fetch_all(pool).await?
    }))
}
