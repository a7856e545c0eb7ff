//! Flash-sale vouchers and voucher orders: `tb_seckill_voucher`, `tb_voucher_order`.

use chrono::NaiveDateTime;
use serde::Serialize;

use super::{BeginWrite, Db, Result, datetime_format, impl_from_row, is_unique_violation, last_id};
use crate::domain::{UserId, VoucherId};

/// A flash-sale voucher's sale fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeckillVoucher {
    pub voucher_id: i64,
    pub stock: i64,
    /// Server-local time, as the original stores it.
    pub begin_time: NaiveDateTime,
    pub end_time: NaiveDateTime,
}

impl_from_row!(SeckillVoucher, |row| {
    Ok(SeckillVoucher {
        voucher_id: row.try_get_unchecked("voucher_id")?,
        stock: row.try_get_unchecked("stock")?,
        begin_time: row.try_get_unchecked("begin_time")?,
        end_time: row.try_get_unchecked("end_time")?,
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
}

/// Saves `tb_voucher` (type 1) and `tb_seckill_voucher` in one transaction.
pub async fn insert_seckill_voucher(db: &Db, v: &NewSeckillVoucher) -> Result<VoucherId> {
    let id = crate::on_pool!(db, pool => {
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
        tx.commit().await?;
        id
    });
    Ok(VoucherId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?)
}

/// The sale fields of a flash-sale voucher on sale (`status = 1`), if it is one.
pub async fn seckill_voucher(db: &Db, id: VoucherId) -> Result<Option<SeckillVoucher>> {
    Ok(crate::on_pool!(db, pool => {
        sqlx::query_as::<_, SeckillVoucher>(
            "SELECT sv.voucher_id, sv.stock, sv.begin_time, sv.end_time FROM tb_seckill_voucher sv \
             JOIN tb_voucher v ON v.id = sv.voucher_id WHERE sv.voucher_id = ? AND v.status = 1",
        )
        .bind(id.get())
        .fetch_optional(pool)
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
}

pub async fn sale_snapshot(db: &Db, id: VoucherId) -> Result<Option<SaleSnapshot>> {
    Ok(crate::on_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        let voucher = sqlx::query_as::<_, SeckillVoucher>(
            "SELECT sv.voucher_id, sv.stock, sv.begin_time, sv.end_time FROM tb_seckill_voucher sv \
             JOIN tb_voucher v ON v.id = sv.voucher_id WHERE sv.voucher_id = ? AND v.status = 1",
        )
        .bind(id.get())
        .fetch_optional(&mut *tx)
        .await?;
        let snapshot = match voucher {
            None => None,
            Some(voucher) => {
                let orders: Vec<(i64, i64)> = sqlx::query_as::<_, (i64, i64)>(
                    "SELECT id, CAST(user_id AS SIGNED) FROM tb_voucher_order WHERE voucher_id = ?",
                )
                .bind(id.get())
                .fetch_all(&mut *tx)
                .await?;
                Some(SaleSnapshot { voucher, orders })
            }
        };
        tx.commit().await?;
        snapshot
    }))
}

/// One accepted order on its way to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewOrder {
    pub id: i64,
    pub user_id: i64,
    pub voucher_id: i64,
}

/// Why a batch could not be written as a whole.
#[derive(Debug)]
pub enum BatchError {
    /// The database failed; nothing was written.
    Storage(super::StorageError),
    /// A voucher had less stock than orders to write; nothing was written.
    StockShort { voucher_id: i64 },
}

impl From<sqlx::Error> for BatchError {
    fn from(e: sqlx::Error) -> Self {
        BatchError::Storage(e.into())
    }
}

/// Writes a batch of orders in one transaction: per voucher, one multi-row insert that skips
/// orders already written (same id, or same user and voucher) and one stock decrement by the
/// number actually inserted, guarded by `stock >= n`. Returns how many rows were inserted.
/// Idempotent: writing the same batch twice inserts nothing the second time.
pub async fn write_order_batch(db: &Db, orders: &[NewOrder]) -> Result<u64, BatchError> {
    let mut by_voucher: std::collections::BTreeMap<i64, Vec<&NewOrder>> = Default::default();
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
    let total = crate::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let mut total = 0u64;
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
                    return Err(BatchError::StockShort { voucher_id: *voucher_id });
                }
            }
            total += inserted;
        }
        tx.commit().await?;
        total
    });
    Ok(total)
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
    crate::on_pool!(db, pool => {
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    #[serde(
        with = "datetime_format::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub create_time: Option<NaiveDateTime>,
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
    })
});

const ORDER_COLUMNS: &str =
    "SELECT id, user_id, voucher_id, pay_type, status, create_time FROM tb_voucher_order";

/// One order by id.
pub async fn order(db: &Db, id: i64) -> Result<Option<VoucherOrder>> {
    let sql = format!("{ORDER_COLUMNS} WHERE id = ?");
    Ok(crate::on_pool!(db, pool => {
        sqlx::query_as::<_, VoucherOrder>(&sql).bind(id).fetch_optional(pool).await?
    }))
}

/// A user's orders, newest first.
pub async fn orders_of_user(db: &Db, user: UserId, limit: i64) -> Result<Vec<VoucherOrder>> {
    let sql = format!("{ORDER_COLUMNS} WHERE user_id = ? ORDER BY id DESC LIMIT ?");
    Ok(crate::on_pool!(db, pool => {
        sqlx::query_as::<_, VoucherOrder>(&sql).bind(user.get()).bind(limit).fetch_all(pool).await?
    }))
}

/// Which of these order ids are in the database.
pub async fn existing_order_ids(db: &Db, ids: &[i64]) -> Result<Vec<i64>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT id FROM tb_voucher_order WHERE id IN ({})",
        vec!["?"; ids.len()].join(", ")
    );
    Ok(crate::on_pool!(db, pool => {
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for id in ids {
            q = q.bind(*id);
        }
        q.fetch_all(pool).await?
    }))
}

/// How many orders of a voucher are in the database.
pub async fn count_orders_of_voucher(db: &Db, voucher: VoucherId) -> Result<i64> {
    Ok(crate::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?")
            .bind(voucher.get())
            .fetch_one(pool)
            .await?
    }))
}
