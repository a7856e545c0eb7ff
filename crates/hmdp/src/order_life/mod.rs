//! An order's life after the grab: pay, cancel, close on timeout, use, refund.
//!
//! Every move is one conditional update in the database (`storage::order_life`), so two moves
//! racing for one order resolve exactly once: a payment and the close on timeout cannot both
//! win. A close gives the unit back to the database's stock in its own transaction and then to
//! Redis through the idempotent release of `seckill::release`, repeated until it succeeds (a
//! repeated cancel, a deadline claimed again). Pay deadlines wait in Redis on the stream
//! transport ([`deadlines`]) and in a RabbitMQ delay queue on the RabbitMQ transport; either way
//! the close is [`OrderLife::close`]. The gateway's contract is in [`gateway`] and in the book.
//!
//! While traces are exported, the close at a deadline joins the grab's trace ([`CloseSpans`]):
//! the worker keeps the grab's `traceparent` of each order it writes beside the deadlines
//! ([`deadlines::keep_traces`]), and the closer takes it back with the deadline.

pub(crate) mod deadlines;
pub(crate) mod gateway;
mod stats;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

pub(crate) use stats::OrderStats;
use tracing::{Span, field};

use crate::{
    config::Secret,
    domain::{
        Answer, Answered, ErrorCode, OrderId, Refused, SPAN_TARGET, TraceParent, UserId, VoucherId,
        VoucherOrderStatus, fan_out, pay_deadline_ms,
    },
    kv::{Keys, RedisConn},
    seckill::{OrderStatus, Seckill, SeckillError},
    storage::{
        Db, StorageError,
        order_life::{self, Closing, Moved, NoticeOutcome, OrderRow, Payment, PaymentState},
        orders::{self, VoucherOrder},
    },
};

/// Errors and refusals of the life cycle.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LifeError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Seckill(#[from] SeckillError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// No such order of this user.
    #[error("no such order")]
    NotFound,
    /// Accepted, not yet in the database: ask again in a moment.
    #[error("the order is not written yet")]
    Pending,
    /// The move does not apply to an order in this status.
    #[error("the order is {}", .status.name())]
    Refused {
        action: Action,
        status: VoucherOrderStatus,
    },
    /// The pay deadline has passed (the close is on its way).
    #[error("the pay deadline has passed")]
    Expired,
    /// A gateway notice without the right signature.
    #[error("bad or missing signature")]
    BadSignature,
    #[error("{0}")]
    InvalidNotice(String),
    #[error("unknown order")]
    UnknownOrder,
    #[error("unknown trade number")]
    UnknownTrade,
    #[error("wrong amount, expected {0}")]
    WrongAmount(i64),
    /// A notice that does not fit the payment (a refund nobody asked for).
    #[error("the payment is {}", .0.as_str())]
    UnexpectedNotice(PaymentState),
}

impl Answered for LifeError {
    fn answer(&self) -> Answer {
        use LifeError as E;
        let refused = match self {
            E::Storage(s) => return s.answer(),
            E::Seckill(s) => return s.answer(),
            E::Redis(r) => return r.answer(),
            E::NotFound => Refused::new(ErrorCode::OrderNotFound, "订单不存在 (no such order)"),
            E::Pending => Refused::new(
                ErrorCode::OrderPending,
                "订单处理中，请稍后再试 (the order is being written: retry in a moment)",
            )
            .retry_after(Duration::from_secs(1)),
            E::Refused { action, status } => {
                let (code, what) = match action {
                    Action::Pay => (
                        ErrorCode::OrderNotPayable,
                        "订单无法支付 (only an unpaid order can be paid)",
                    ),
                    Action::Cancel => (
                        ErrorCode::OrderNotCancellable,
                        "订单无法取消 (only an unpaid order can be cancelled)",
                    ),
                    Action::Use => (
                        ErrorCode::OrderNotUsable,
                        "订单无法核销 (only a paid order can be used)",
                    ),
                    Action::Refund => (
                        ErrorCode::OrderNotRefundable,
                        "订单无法退款 (only a paid order can be refunded)",
                    ),
                };
                Refused::new(code, what).with_data(
                    serde_json::json!({"status": status.code(), "statusName": status.name()}),
                )
            }
            E::Expired => Refused::new(
                ErrorCode::PayExpired,
                "订单已超时，无法支付 (the pay deadline has passed; the order is being closed)",
            ),
            E::BadSignature => Refused::new(
                ErrorCode::BadSignature,
                "签名错误 (missing or wrong x-pay-signature)",
            ),
            E::InvalidNotice(m) => Refused::new(ErrorCode::InvalidRequest, m.clone()),
            E::UnknownOrder => Refused::new(ErrorCode::UnknownOrder, "no such order"),
            E::UnknownTrade => Refused::new(
                ErrorCode::UnknownTrade,
                "tradeNo is not this order's payment",
            ),
            E::WrongAmount(expected) => Refused::new(
                ErrorCode::WrongAmount,
                format!("amount is not the payment's ({expected})"),
            )
            .with_data(serde_json::json!({"expected": expected})),
            E::UnexpectedNotice(state) => Refused::new(
                ErrorCode::UnexpectedNotice,
                format!(
                    "the notice does not fit the payment, which is {}",
                    state.as_str()
                ),
            )
            .with_data(serde_json::json!({"payment": state.as_str()})),
        };
        refused.into()
    }
}

/// What an owner or the shop asks of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Pay,
    Cancel,
    Use,
    Refund,
}

/// What `pay` answers: where and how much to pay, until when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PayTicket {
    /// The same for every call while the order is unpaid.
    pub trade_no: String,
    /// In fen (分): the voucher's `payValue`.
    pub amount: i64,
    /// The pay deadline (ms since the epoch); after it the order closes.
    pub expires_at_millis: i64,
}

/// An order with everything an answer shows of it.
#[derive(Debug, Clone)]
pub(crate) struct OrderDetail {
    pub order: VoucherOrder,
    pub status: VoucherOrderStatus,
    /// While unpaid: when it closes.
    pub pay_deadline_ms: Option<i64>,
    pub payment: Option<Payment>,
}

/// What a gateway notice is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NoticeAnswer {
    pub order_id: i64,
    pub status: VoucherOrderStatus,
    pub payment: PaymentState,
    /// Applied before: this delivery changed nothing.
    pub replayed: bool,
}

/// The spans of one close of due orders, while traces are exported (disabled, and free,
/// otherwise): the batch's own span, `close orders`, inside which the close runs, and a
/// `close order` span in the grab's trace of each order whose trace is known, which records
/// what the close found.
pub(crate) struct CloseSpans {
    batch: Span,
    orders: Vec<(i64, Span)>,
}

impl CloseSpans {
    /// The batch's span, for a close of `orders` orders; see whether it [`Span::is_disabled`]
    /// before looking for the orders' traces.
    pub(crate) fn batch(orders: usize) -> Span {
        tracing::info_span!(target: SPAN_TARGET, "close orders", hmdp.orders = orders)
    }

    /// The spans of a close in `batch` of orders, some with the grab's trace.
    pub(crate) fn open(batch: Span, traced: Vec<(TraceParent, i64)>) -> Self {
        let orders = fan_out(&batch, traced, |id| {
            tracing::info_span!(
                target: SPAN_TARGET,
                parent: None,
                "close order",
                hmdp.order = *id,
                hmdp.closed = field::Empty,
                hmdp.order.status = field::Empty,
            )
        });
        Self { batch, orders }
    }

    /// The batch's span, to run the close in.
    pub(crate) fn span(&self) -> &Span {
        &self.batch
    }

    /// Records on each order's span whether the close closed it, and its status after.
    pub(crate) fn record(&self, closings: &[Closing]) {
        if self.orders.is_empty() {
            return;
        }
        for c in closings {
            for (_, span) in self.orders.iter().filter(|(id, _)| *id == c.order.id) {
                span.record("hmdp.closed", c.closed_now);
                span.record("hmdp.order.status", c.order.status.name());
            }
        }
    }
}

/// The life cycle's service. Cheap to clone.
#[derive(Clone)]
pub struct OrderLife {
    db: Db,
    redis: RedisConn,
    keys: Keys,
    seckill: Seckill,
    pay_timeout: Duration,
    shards: u32,
    secret: Arc<Secret>,
    stats: Arc<OrderStats>,
}

impl OrderLife {
    pub(crate) fn new(
        db: Db,
        redis: RedisConn,
        keys: Keys,
        seckill: Seckill,
        pay_timeout: Duration,
        shards: u32,
        secret: Secret,
    ) -> Self {
        Self {
            db,
            redis,
            keys,
            seckill,
            pay_timeout,
            shards,
            secret: Arc::new(secret),
            stats: Arc::default(),
        }
    }

    pub(crate) fn stats(&self) -> &Arc<OrderStats> {
        &self.stats
    }

    /// The order's pay deadline (ms since the epoch).
    pub(crate) fn deadline_of(&self, order_id: i64) -> i64 {
        pay_deadline_ms(order_id, self.pay_timeout)
    }

    /// `user`'s order, or why not: not theirs (or none), or not written yet.
    async fn owned(&self, user: UserId, order_id: OrderId) -> Result<OrderRow, LifeError> {
        if let Some(row) = order_life::order_row(&self.db, order_id.get()).await?
            && row.user_id == user.get()
        {
            return Ok(row);
        }
        match self.seckill.order_status(user, order_id).await? {
            OrderStatus::Pending { .. } => Err(LifeError::Pending),
            // Written meanwhile.
            OrderStatus::Created(o) => order_life::order_row(&self.db, o.id)
                .await?
                .ok_or(LifeError::NotFound),
            OrderStatus::Failed { .. } | OrderStatus::Unknown => Err(LifeError::NotFound),
        }
    }

    /// The owner's order with its status, deadline and payment.
    pub(crate) async fn detail(&self, order: VoucherOrder) -> Result<OrderDetail, LifeError> {
        let payment = order_life::payment(&self.db, order.id).await?;
        Ok(self.detail_with(order, payment))
    }

    fn detail_with(&self, order: VoucherOrder, payment: Option<Payment>) -> OrderDetail {
        let status =
            VoucherOrderStatus::from_code(order.status).unwrap_or(VoucherOrderStatus::Unpaid);
        OrderDetail {
            pay_deadline_ms: (status == VoucherOrderStatus::Unpaid)
                .then(|| self.deadline_of(order.id)),
            status,
            order,
            payment,
        }
    }

    /// A user's written orders, newest first, each with its payment.
    pub(crate) async fn of_user(
        &self,
        user: UserId,
        limit: i64,
    ) -> Result<Vec<OrderDetail>, LifeError> {
        let list = orders::orders_of_user(&self.db, user, limit).await?;
        let ids: Vec<i64> = list.iter().map(|o| o.id).collect();
        let mut payments: BTreeMap<i64, Payment> = order_life::payments(&self.db, &ids)
            .await?
            .into_iter()
            .map(|p| (p.order_id, p))
            .collect();
        Ok(list
            .into_iter()
            .map(|o| {
                let p = payments.remove(&o.id);
                self.detail_with(o, p)
            })
            .collect())
    }

    /// Opens (or repeats) the order's payment: the owner's, unpaid, before its deadline.
    pub(crate) async fn pay(
        &self,
        user: UserId,
        order_id: OrderId,
    ) -> Result<PayTicket, LifeError> {
        let row = self.owned(user, order_id).await?;
        if row.status != VoucherOrderStatus::Unpaid {
            return Err(LifeError::Refused {
                action: Action::Pay,
                status: row.status,
            });
        }
        let deadline = self.deadline_of(row.id);
        if chrono::Utc::now().timestamp_millis() >= deadline {
            return Err(LifeError::Expired);
        }
        let trade_no = uuid::Uuid::new_v4().simple().to_string();
        let payment = order_life::open_payment(&self.db, &row, &trade_no)
            .await?
            .ok_or(LifeError::NotFound)?;
        Ok(PayTicket {
            trade_no: payment.trade_no,
            amount: payment.amount,
            expires_at_millis: deadline,
        })
    }

    /// Cancels the owner's unpaid order (a second cancel answers the same); its unit goes back.
    pub(crate) async fn cancel(&self, user: UserId, order_id: OrderId) -> Result<(), LifeError> {
        let row = self.owned(user, order_id).await?;
        let closed = self.close(&[row.id]).await?;
        match closed.first().map(|c| c.order.status) {
            Some(VoucherOrderStatus::Cancelled) => Ok(()),
            Some(status) => Err(LifeError::Refused {
                action: Action::Cancel,
                status,
            }),
            None => Err(LifeError::NotFound),
        }
    }

    /// Closes every unpaid order among `ids` and gives the units of all closed ones back to
    /// Redis (again, for those closed before: the release counts each once). What each became.
    pub(crate) async fn close(&self, ids: &[i64]) -> Result<Vec<Closing>, LifeError> {
        let closings = order_life::close_unpaid(&self.db, ids).await?;
        let mut by_voucher: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        let mut now = 0u64;
        for c in &closings {
            if c.closed_now {
                now += 1;
            }
            if c.order.status == VoucherOrderStatus::Cancelled {
                by_voucher
                    .entry(c.order.voucher_id)
                    .or_default()
                    .push(c.order.id);
            }
        }
        if now > 0 {
            self.stats.moved(
                VoucherOrderStatus::Unpaid,
                VoucherOrderStatus::Cancelled,
                now,
            );
        }
        for (voucher, orders) in by_voucher {
            let Ok(voucher) = VoucherId::new(voucher) else {
                continue;
            };
            self.seckill.give_back(voucher, &orders).await?;
        }
        Ok(closings)
    }

    /// The shop uses (核销) a paid order (a second use answers the same).
    pub(crate) async fn use_order(&self, order_id: OrderId) -> Result<(), LifeError> {
        self.moved(
            Action::Use,
            order_life::mark_used(&self.db, order_id.get()).await?,
            (VoucherOrderStatus::Paid, VoucherOrderStatus::Used),
        )
    }

    /// The owner asks for a paid order's money back (a second ask answers the same).
    pub(crate) async fn refund(&self, user: UserId, order_id: OrderId) -> Result<(), LifeError> {
        let row = self.owned(user, order_id).await?;
        self.moved(
            Action::Refund,
            order_life::request_refund(&self.db, row.id).await?,
            (VoucherOrderStatus::Paid, VoucherOrderStatus::Refunding),
        )
    }

    fn moved(
        &self,
        action: Action,
        moved: Moved,
        (from, to): (VoucherOrderStatus, VoucherOrderStatus),
    ) -> Result<(), LifeError> {
        match moved {
            Moved::Now => {
                self.stats.moved(from, to, 1);
                Ok(())
            }
            Moved::Already => Ok(()),
            Moved::Elsewhere(status) => Err(LifeError::Refused { action, status }),
            Moved::Missing => Err(LifeError::NotFound),
        }
    }

    /// Applies a signed gateway notice (`body` as received). Answered only after its effect is
    /// committed; the same notice again is answered as before and changes nothing.
    pub(crate) async fn notify(
        &self,
        body: &[u8],
        signature: Option<&str>,
    ) -> Result<NoticeAnswer, LifeError> {
        let n = gateway::read(&self.secret, body, signature)?;
        let outcome =
            order_life::apply_notice(&self.db, n.order_id, &n.trade_no, n.amount, n.notice).await?;
        match outcome {
            NoticeOutcome::Applied {
                payment,
                order,
                moved,
            } => {
                if let Some((from, to)) = moved {
                    self.stats.moved(from, to, 1);
                }
                if payment == PaymentState::RefundOwed {
                    tracing::warn!(
                        order = n.order_id,
                        trade_no = %n.trade_no,
                        "a payment arrived for a closed order: it is recorded as owed back, \
                         until the gateway confirms the refund"
                    );
                }
                Ok(NoticeAnswer {
                    order_id: n.order_id,
                    status: order,
                    payment,
                    replayed: false,
                })
            }
            NoticeOutcome::Replayed { payment, order } => Ok(NoticeAnswer {
                order_id: n.order_id,
                status: order,
                payment,
                replayed: true,
            }),
            NoticeOutcome::UnknownOrder => Err(LifeError::UnknownOrder),
            NoticeOutcome::UnknownTrade => Err(LifeError::UnknownTrade),
            NoticeOutcome::WrongAmount { expected } => Err(LifeError::WrongAmount(expected)),
            NoticeOutcome::Unexpected { payment } => Err(LifeError::UnexpectedNotice(payment)),
        }
    }

    /// The shard count of the deadlines (one sorted set per order-stream shard).
    pub(crate) fn shards(&self) -> u32 {
        self.shards
    }

    pub(crate) fn redis(&self) -> &RedisConn {
        &self.redis
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Whether an order the database does not hold is still on its way (its pending record
    /// exists): its deadline waits for the row.
    pub(crate) async fn is_pending(&self, order_id: i64) -> Result<bool, LifeError> {
        Ok(
            crate::order_stream::read_pending(&self.redis, &self.keys, order_id)
                .await?
                .is_some_and(|r| !r.failed),
        )
    }
}
