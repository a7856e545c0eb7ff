//! An order's life after the grab, in the database: payments (`hmdp_order_payment`), and every
//! move of `tb_voucher_order.status` as one conditional update (`WHERE status = <from>`), so
//! two moves racing for one order (a payment and the close on timeout) resolve exactly once.
//!
//! Closing an unpaid order gives its unit back to `tb_seckill_voucher.stock` in the same
//! transaction; nothing else touches the stock after the grab.

use std::collections::BTreeMap;

use chrono::{Local, NaiveDateTime};

use super::{BeginWrite, Db, Result, impl_from_row, traced};
use crate::domain::VoucherOrderStatus;

/// Where a payment is: opened by `pay`, then moved by the gateway's notices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PaymentState {
    /// A trade number handed out; no payment yet.
    Open,
    /// Paid; the order is paid (or used).
    Paid,
    /// Paid after the order was closed: the money goes back (a `refunded` notice settles it).
    RefundOwed,
    /// The owner asked for a refund; the gateway has not confirmed it.
    Refunding,
    /// The money went back.
    Refunded,
}

impl PaymentState {
    const ALL: [Self; 5] = [
        Self::Open,
        Self::Paid,
        Self::RefundOwed,
        Self::Refunding,
        Self::Refunded,
    ];

    /// The stored word (also the `state` of answers).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Paid => "paid",
            Self::RefundOwed => "refund_owed",
            Self::Refunding => "refunding",
            Self::Refunded => "refunded",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// An order's payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Payment {
    pub order_id: i64,
    pub trade_no: String,
    /// In fen (分), the voucher's `pay_value`.
    pub amount: i64,
    pub state: PaymentState,
}

impl_from_row!(Payment, |row| {
    let state: String = row.try_get_unchecked("state")?;
    Ok(Payment {
        order_id: row.try_get_unchecked("order_id")?,
        trade_no: row.try_get_unchecked("trade_no")?,
        amount: row.try_get_unchecked("amount")?,
        state: PaymentState::parse(&state).ok_or_else(|| {
            sqlx::Error::Decode(format!("unknown payment state {state:?}").into())
        })?,
    })
});

const PAYMENT_COLUMNS: &str = "SELECT order_id, trade_no, amount, state FROM hmdp_order_payment";

/// An order as the life cycle sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OrderRow {
    pub id: i64,
    pub user_id: i64,
    pub voucher_id: i64,
    pub status: VoucherOrderStatus,
}

impl_from_row!(OrderRow, |row| {
    let code: i64 = row.try_get_unchecked("status")?;
    Ok(OrderRow {
        id: row.try_get_unchecked("id")?,
        user_id: row.try_get_unchecked("user_id")?,
        voucher_id: row.try_get_unchecked("voucher_id")?,
        status: VoucherOrderStatus::from_code(code)
            .ok_or_else(|| sqlx::Error::Decode(format!("unknown order status {code}").into()))?,
    })
});

/// `… FOR UPDATE` on MySQL (row locks until the commit); SQLite's write transaction holds the
/// whole database already.
fn for_update(db: &Db) -> &'static str {
    match db {
        Db::Sqlite(_) => "",
        Db::MySql(_) => " FOR UPDATE",
    }
}

/// Server-local now, as the original stores its times.
fn now() -> NaiveDateTime {
    Local::now().naive_local()
}

/// One order by id.
pub(crate) async fn order_row(db: &Db, id: i64) -> Result<Option<OrderRow>> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, OrderRow>(
            "SELECT id, user_id, voucher_id, status FROM tb_voucher_order WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(pool)
        .await?
    }))
}

/// An order's payment, if one was opened.
pub(crate) async fn payment(db: &Db, order_id: i64) -> Result<Option<Payment>> {
    let sql = format!("{PAYMENT_COLUMNS} WHERE order_id = ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, Payment>(&sql).bind(order_id).fetch_optional(pool).await?
    }))
}

/// The payments of these orders (for a list of orders).
pub(crate) async fn payments(db: &Db, order_ids: &[i64]) -> Result<Vec<Payment>> {
    if order_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "{PAYMENT_COLUMNS} WHERE order_id IN ({})",
        vec!["?"; order_ids.len()].join(", ")
    );
    Ok(crate::storage::on_pool!(db, pool => {
        let mut q = sqlx::query_as::<_, Payment>(&sql);
        for id in order_ids {
            q = q.bind(*id);
        }
        q.fetch_all(pool).await?
    }))
}

/// The order's payment: the one opened before, else a new one with `trade_no` and the
/// voucher's `pay_value` (`None` if the order's voucher is gone).
pub(crate) async fn open_payment(
    db: &Db,
    order: &OrderRow,
    trade_no: &str,
) -> Result<Option<Payment>> {
    let insert = match db {
        Db::Sqlite(_) => "INSERT OR IGNORE",
        Db::MySql(_) => "INSERT IGNORE",
    };
    let sql = format!(
        "{insert} INTO hmdp_order_payment (order_id, trade_no, amount, state, created_at) \
         SELECT ?, ?, v.pay_value, ?, ? FROM tb_voucher v WHERE v.id = ?"
    );
    let read = format!("{PAYMENT_COLUMNS} WHERE order_id = ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query(&sql)
            .bind(order.id)
            .bind(trade_no)
            .bind(PaymentState::Open.as_str())
            .bind(now())
            .bind(order.voucher_id)
            .execute(pool)
            .await?;
        sqlx::query_as::<_, Payment>(&read).bind(order.id).fetch_optional(pool).await?
    }))
}

/// One order found by [`close_unpaid`], and what became of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closing {
    pub order: OrderRow,
    /// The close moved it from unpaid now (its unit went back to the stock in the same
    /// transaction); otherwise `order.status` is where it already was.
    pub closed_now: bool,
}

/// Closes every unpaid order among `ids` (cancel, or the close on timeout) and gives each one's
/// unit back to its voucher's stock, in one transaction. Orders not unpaid are left as they
/// are and reported with their status; ids with no row are left out.
pub(crate) async fn close_unpaid(db: &Db, ids: &[i64]) -> Result<Vec<Closing>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    traced(db, "close_unpaid", close(db, ids)).await
}

async fn close(db: &Db, ids: &[i64]) -> Result<Vec<Closing>> {
    let select = format!(
        "SELECT id, user_id, voucher_id, status FROM tb_voucher_order WHERE id IN ({}){}",
        vec!["?"; ids.len()].join(", "),
        for_update(db)
    );
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let mut q = sqlx::query_as::<_, OrderRow>(&select);
        for id in ids {
            q = q.bind(*id);
        }
        let rows = q.fetch_all(&mut *tx).await?;
        let unpaid: Vec<&OrderRow> =
            rows.iter().filter(|o| o.status == VoucherOrderStatus::Unpaid).collect();
        let mut per_voucher: BTreeMap<i64, i64> = BTreeMap::new();
        if !unpaid.is_empty() {
            let update = format!(
                "UPDATE tb_voucher_order SET status = ?, update_time = CURRENT_TIMESTAMP \
                 WHERE status = ? AND id IN ({})",
                vec!["?"; unpaid.len()].join(", ")
            );
            let mut q = sqlx::query(&update)
                .bind(VoucherOrderStatus::Cancelled.code())
                .bind(VoucherOrderStatus::Unpaid.code());
            for o in &unpaid {
                q = q.bind(o.id);
            }
            let changed = q.execute(&mut *tx).await?.rows_affected();
            if changed != unpaid.len() as u64 {
                // The rows were read under this transaction's locks: they cannot have moved.
                return Err(sqlx::Error::Protocol(format!(
                    "closing {} unpaid orders changed {changed}",
                    unpaid.len()
                ))
                .into());
            }
            for o in &unpaid {
                *per_voucher.entry(o.voucher_id).or_default() += 1;
            }
            for (voucher, n) in &per_voucher {
                sqlx::query(
                    "UPDATE tb_seckill_voucher SET stock = stock + ?, update_time = CURRENT_TIMESTAMP \
                     WHERE voucher_id = ?",
                )
                .bind(*n)
                .bind(*voucher)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(rows
            .into_iter()
            .map(|o| Closing {
                closed_now: o.status == VoucherOrderStatus::Unpaid,
                order: OrderRow {
                    status: if o.status == VoucherOrderStatus::Unpaid {
                        VoucherOrderStatus::Cancelled
                    } else {
                        o.status
                    },
                    ..o
                },
            })
            .collect())
    })
}

/// What a move of one order did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moved {
    /// It was in `from` and is now in `to`.
    Now,
    /// It was in `to` already (a repeated request): nothing changed.
    Already,
    /// It is elsewhere: nothing changed.
    Elsewhere(VoucherOrderStatus),
    /// No such order.
    Missing,
}

/// Moves `order_id` from `from` to `to`, stamping `time_column` (one of the original's
/// `pay_time`, `use_time`, `refund_time`) and, when given, moving its payment to `payment` in
/// the same transaction.
async fn move_order(
    db: &Db,
    order_id: i64,
    from: VoucherOrderStatus,
    to: VoucherOrderStatus,
    time_column: Option<&'static str>,
    payment: Option<PaymentState>,
) -> Result<Moved> {
    let stamp = time_column.map_or(String::new(), |c| format!(", {c} = ?"));
    let update = format!(
        "UPDATE tb_voucher_order SET status = ?{stamp}, update_time = CURRENT_TIMESTAMP \
         WHERE id = ? AND status = ?"
    );
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let mut q = sqlx::query(&update).bind(to.code());
        if time_column.is_some() {
            q = q.bind(now());
        }
        let changed = q.bind(order_id).bind(from.code()).execute(&mut *tx).await?.rows_affected();
        if changed == 0 {
            // `status` is a TINYINT(1) on MySQL, which sqlx reads as a boolean.
            let status: Option<i64> = sqlx::query_scalar(
                "SELECT CAST(status AS SIGNED) FROM tb_voucher_order WHERE id = ?",
            )
            .bind(order_id)
            .fetch_optional(&mut *tx)
            .await?;
            tx.commit().await?;
            return Ok(match status.and_then(VoucherOrderStatus::from_code) {
                None => Moved::Missing,
                Some(s) if s == to => Moved::Already,
                Some(s) => Moved::Elsewhere(s),
            });
        }
        if let Some(state) = payment {
            sqlx::query("UPDATE hmdp_order_payment SET state = ? WHERE order_id = ?")
                .bind(state.as_str())
                .bind(order_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Moved::Now)
    })
}

/// 2 → 3: the shop used (核销) the voucher.
pub(crate) async fn mark_used(db: &Db, order_id: i64) -> Result<Moved> {
    traced(
        db,
        "mark_used",
        move_order(
            db,
            order_id,
            VoucherOrderStatus::Paid,
            VoucherOrderStatus::Used,
            Some("use_time"),
            None,
        ),
    )
    .await
}

/// 2 → 5: the owner asked for the money back; the payment waits for the gateway's `refunded`.
pub(crate) async fn request_refund(db: &Db, order_id: i64) -> Result<Moved> {
    traced(
        db,
        "request_refund",
        move_order(
            db,
            order_id,
            VoucherOrderStatus::Paid,
            VoucherOrderStatus::Refunding,
            None,
            Some(PaymentState::Refunding),
        ),
    )
    .await
}

/// What the gateway says happened to a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice {
    Paid,
    Refunded,
}

/// What a gateway notice did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoticeOutcome {
    /// Applied now: the payment's new state, and the order's move if it moved.
    Applied {
        payment: PaymentState,
        order: VoucherOrderStatus,
        moved: Option<(VoucherOrderStatus, VoucherOrderStatus)>,
    },
    /// Applied before (the same notice again): nothing changed.
    Replayed {
        payment: PaymentState,
        order: VoucherOrderStatus,
    },
    /// No such order.
    UnknownOrder,
    /// The order has no payment with this trade number.
    UnknownTrade,
    /// The amount is not the payment's.
    WrongAmount { expected: i64 },
    /// The notice does not fit the payment's state (a refund nobody asked for, a refund of
    /// an unpaid trade).
    Unexpected { payment: PaymentState },
}

/// Applies a gateway notice in one transaction: the payment's row is locked first, so two
/// deliveries of one notice apply once; the order moves by conditional update, so a payment
/// racing the close on timeout either pays the order or finds it closed (and is then owed
/// back).
pub(crate) async fn apply_notice(
    db: &Db,
    order_id: i64,
    trade_no: &str,
    amount: i64,
    notice: Notice,
) -> Result<NoticeOutcome> {
    let apply = apply(db, order_id, trade_no, amount, notice);
    traced(db, "apply_notice", apply).await
}

async fn apply(
    db: &Db,
    order_id: i64,
    trade_no: &str,
    amount: i64,
    notice: Notice,
) -> Result<NoticeOutcome> {
    use PaymentState as P;
    use VoucherOrderStatus as S;
    let read = format!("{PAYMENT_COLUMNS} WHERE order_id = ?{}", for_update(db));
    let status_sql = format!(
        // `status` is a TINYINT(1) on MySQL, which sqlx reads as a boolean.
        "SELECT CAST(status AS SIGNED) FROM tb_voucher_order WHERE id = ?{}",
        for_update(db)
    );
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let payment = sqlx::query_as::<_, Payment>(&read)
            .bind(order_id)
            .fetch_optional(&mut *tx)
            .await?;
        let status: Option<i64> = sqlx::query_scalar(&status_sql)
            .bind(order_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(status) = status.and_then(S::from_code) else {
            return Ok(NoticeOutcome::UnknownOrder);
        };
        let Some(payment) = payment.filter(|p| p.trade_no == trade_no) else {
            return Ok(NoticeOutcome::UnknownTrade);
        };
        if payment.amount != amount {
            return Ok(NoticeOutcome::WrongAmount { expected: payment.amount });
        }
        let replayed = NoticeOutcome::Replayed { payment: payment.state, order: status };
        // (new payment state, the order's move, which time column the move stamps)
        let step: (P, Option<(S, S)>, Option<&str>) = match (notice, payment.state, status) {
            (Notice::Paid, P::Open, S::Unpaid) => (P::Paid, Some((S::Unpaid, S::Paid)), Some("pay_time")),
            (Notice::Paid, P::Open, S::Cancelled) => (P::RefundOwed, None, None),
            (Notice::Paid, P::Paid | P::RefundOwed | P::Refunding | P::Refunded, _) => {
                return Ok(replayed);
            }
            (Notice::Refunded, P::Refunding, S::Refunding) => {
                (P::Refunded, Some((S::Refunding, S::Refunded)), Some("refund_time"))
            }
            (Notice::Refunded, P::RefundOwed, _) => (P::Refunded, None, None),
            (Notice::Refunded, P::Refunded, _) => return Ok(replayed),
            (_, state, _) => return Ok(NoticeOutcome::Unexpected { payment: state }),
        };
        let (state, moved, column) = step;
        if let Some((from, to)) = moved {
            let column = column.expect("a move stamps its time");
            let sql = format!(
                "UPDATE tb_voucher_order SET status = ?, {column} = ?, update_time = CURRENT_TIMESTAMP \
                 WHERE id = ? AND status = ?"
            );
            // The order's row is locked (or, on SQLite, the database is): it is still `from`.
            sqlx::query(&sql)
                .bind(to.code())
                .bind(now())
                .bind(order_id)
                .bind(from.code())
                .execute(&mut *tx)
                .await?;
        }
        let time = match state {
            P::Paid | P::RefundOwed => "paid_at",
            _ => "refunded_at",
        };
        sqlx::query(&format!(
            "UPDATE hmdp_order_payment SET state = ?, {time} = ? WHERE order_id = ?"
        ))
        .bind(state.as_str())
        .bind(now())
        .bind(order_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(NoticeOutcome::Applied {
            payment: state,
            order: moved.map_or(status, |(_, to)| to),
            moved,
        })
    })
}

/// One voucher's books, for the invariant `initial = stock + orders holding stock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Books {
    pub voucher_id: i64,
    /// `None` for a voucher created by another program after this version's migration.
    pub initial: Option<i64>,
    pub stock: i64,
    /// Orders in statuses 1, 2, 3, 5, 6.
    pub holding: i64,
    /// Closed orders whose payment is neither owed back nor refunded (must be 0).
    pub paid_and_closed: i64,
}

/// The books of one flash-sale voucher, read in one transaction.
pub(crate) async fn books(db: &Db, voucher_id: i64) -> Result<Option<Books>> {
    Ok(crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        let stock: Option<i64> =
            sqlx::query_scalar("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?")
                .bind(voucher_id)
                .fetch_optional(&mut *tx)
                .await?;
        let books = match stock {
            None => None,
            Some(stock) => {
                let initial: Option<i64> = sqlx::query_scalar(
                    "SELECT initial_stock FROM hmdp_voucher_initial_stock WHERE voucher_id = ?",
                )
                .bind(voucher_id)
                .fetch_optional(&mut *tx)
                .await?;
                let holding: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? AND status <> ?",
                )
                .bind(voucher_id)
                .bind(VoucherOrderStatus::Cancelled.code())
                .fetch_one(&mut *tx)
                .await?;
                let paid_and_closed: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM tb_voucher_order o JOIN hmdp_order_payment p ON p.order_id = o.id \
                     WHERE o.voucher_id = ? AND o.status = ? AND p.state NOT IN (?, ?, ?)",
                )
                .bind(voucher_id)
                .bind(VoucherOrderStatus::Cancelled.code())
                .bind(PaymentState::Open.as_str())
                .bind(PaymentState::RefundOwed.as_str())
                .bind(PaymentState::Refunded.as_str())
                .fetch_one(&mut *tx)
                .await?;
                Some(Books { voucher_id, initial, stock, holding, paid_and_closed })
            }
        };
        tx.commit().await?;
        books
    }))
}

/// How many orders of a voucher are in each status.
pub(crate) async fn status_counts(
    db: &Db,
    voucher_id: i64,
) -> Result<Vec<(VoucherOrderStatus, i64)>> {
    let rows: Vec<(i64, i64)> = crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT CAST(status AS SIGNED), COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? GROUP BY status",
        )
        .bind(voucher_id)
        .fetch_all(pool)
        .await?
    });
    Ok(rows
        .into_iter()
        .filter_map(|(s, n)| VoucherOrderStatus::from_code(s).map(|s| (s, n)))
        .collect())
}
