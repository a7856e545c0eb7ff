//! `/voucher-order/*`: grabbing a flash-sale voucher and following the order.

use axum::{body::Bytes, extract::State, http::HeaderMap};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    ApiResult, AppState,
    extract::{Admin, AppPath, CurrentUser},
    ok,
};
use crate::{
    domain::{OrderId, VoucherId, VoucherOrderStatus},
    order_life::{
        LifeError, OrderDetail, PayTicket,
        gateway::{self, NoticeBody},
    },
    seckill::OrderStatus,
    storage::{
        order_life::{Payment, PaymentState},
        orders::{self, VoucherOrder},
    },
};

const TAG: &str = "order";

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(grab))
        .routes(routes!(my_orders))
        .routes(routes!(order_status))
        .routes(routes!(pay))
        .routes(routes!(cancel))
        .routes(routes!(use_order))
        .routes(routes!(refund))
        .routes(routes!(notify))
}

/// Grab a flash-sale voucher; data is the order id.
///
/// Refusals: `sold_out`, `duplicate_order`, `seckill_not_started`, `seckill_ended`,
/// `voucher_not_found`; with `HMDP_REDIS_WAIT_REPLICAS`, 503 `not_replicated` (naming the order)
/// when the replicas did not confirm it in time.
#[utoipa::path(post, path = "/voucher-order/seckill/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(VoucherId), Path, description = "the voucher's id")),
    responses((status = OK, body = i64)))]
async fn grab(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(voucher): AppPath<VoucherId>,
) -> ApiResult<i64> {
    match state.seckill.grab(session.user.id, voucher).await? {
        Ok(order_id) => ok(order_id),
        Err(refusal) => Err(refusal.into()),
    }
}

/// Where an order is.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct StatusView {
    id: i64,
    id_str: String,
    voucher_id: i64,
    state: OrderState,
    /// Once in the database: 1 unpaid, 2 paid, 3 used, 4 cancelled, 5 refunding, 6 refunded.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_name: Option<VoucherOrderStatus>,
    /// While unpaid: when it closes (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pay_deadline_millis: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment: Option<PaymentView>,
    /// The order, once it is in the database.
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<VoucherOrder>,
}

/// An order's payment: its trade number at the gateway and where it is (`open`: handed out,
/// not paid; `paid`; `refund_owed`: paid after the order closed, owed back; `refunding`;
/// `refunded`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct PaymentView {
    trade_no: String,
    state: PaymentState,
    /// In fen (分).
    amount: i64,
}

impl From<Payment> for PaymentView {
    fn from(p: Payment) -> Self {
        Self {
            trade_no: p.trade_no,
            state: p.state,
            amount: p.amount,
        }
    }
}

/// A written order with its life: the original's fields plus `statusName`,
/// `payDeadlineMillis` (while unpaid) and `payment`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct OrderView {
    #[serde(flatten)]
    order: VoucherOrder,
    status_name: VoucherOrderStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pay_deadline_millis: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment: Option<PaymentView>,
}

impl From<OrderDetail> for OrderView {
    fn from(d: OrderDetail) -> Self {
        Self {
            order: d.order,
            status_name: d.status,
            pay_deadline_millis: d.pay_deadline_ms,
            payment: d.payment.map(PaymentView::from),
        }
    }
}

/// `pending`: accepted, not yet in the database; `created`: in the database; `failed`:
/// accepted, but it could not be written and waits in the dead letters for an operator.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum OrderState {
    Pending,
    Created,
    Failed,
}

/// Your order: pending or created.
///
/// Only the order's owner sees it (`order_not_found` for anyone else).
#[utoipa::path(get, path = "/voucher-order/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(OrderId), Path, description = "the order's id")),
    responses((status = OK, body = StatusView)))]
async fn order_status(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(order_id): AppPath<OrderId>,
) -> ApiResult<StatusView> {
    let id = order_id.get();
    match state
        .seckill
        .order_status(session.user.id, order_id)
        .await?
    {
        OrderStatus::Pending { voucher_id } => ok(StatusView {
            id,
            id_str: id.to_string(),
            voucher_id: voucher_id.get(),
            state: OrderState::Pending,
            status: None,
            status_name: None,
            pay_deadline_millis: Some(state.orders.deadline_of(id)),
            payment: None,
            order: None,
        }),
        OrderStatus::Failed { voucher_id } => ok(StatusView {
            id,
            id_str: id.to_string(),
            voucher_id: voucher_id.get(),
            state: OrderState::Failed,
            status: None,
            status_name: None,
            pay_deadline_millis: None,
            payment: None,
            order: None,
        }),
        OrderStatus::Created(order) => {
            let d = state.orders.detail(order).await?;
            ok(StatusView {
                id,
                id_str: id.to_string(),
                voucher_id: d.order.voucher_id,
                state: OrderState::Created,
                status: Some(d.order.status),
                status_name: Some(d.status),
                pay_deadline_millis: d.pay_deadline_ms,
                payment: d.payment.map(PaymentView::from),
                order: Some(d.order),
            })
        }
        OrderStatus::Unknown => Err(LifeError::NotFound.into()),
    }
}

/// Your written orders, newest first (at most 100), each with its status name, pay deadline
/// and payment.
#[utoipa::path(get, path = "/voucher-order/of/me", tag = TAG, security(("session" = [])),
    responses((status = OK, body = Vec<OrderView>)))]
async fn my_orders(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
) -> ApiResult<Vec<OrderView>> {
    let list = state.orders.of_user(session.user.id, 100).await?;
    ok(list.into_iter().map(OrderView::from).collect())
}

/// The written order after a move.
async fn view_of(state: &AppState, order_id: OrderId) -> ApiResult<OrderView> {
    let order = orders::order(&state.db, order_id.get())
        .await?
        .ok_or(LifeError::NotFound)?;
    ok(state.orders.detail(order).await?.into())
}

/// Pay your unpaid order: where to pay (`tradeNo`, the same on every call while it is unpaid),
/// how much (fen) and until when. The gateway then confirms with `POST /pay/notify`.
///
/// Refusals: `order_pending` (not written yet; retry), `order_not_payable`, `pay_expired`,
/// `order_not_found`.
#[utoipa::path(post, path = "/voucher-order/{id}/pay", tag = TAG, security(("session" = [])),
    params(("id" = inline(OrderId), Path, description = "the order's id")),
    responses((status = OK, body = PayTicket)))]
async fn pay(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(order_id): AppPath<OrderId>,
) -> ApiResult<PayTicket> {
    ok(state.orders.pay(session.user.id, order_id).await?)
}

/// Cancel your unpaid order; its voucher goes back on sale. A second cancel answers the same.
///
/// Refusals: `order_pending`, `order_not_cancellable`, `order_not_found`.
#[utoipa::path(post, path = "/voucher-order/{id}/cancel", tag = TAG, security(("session" = [])),
    params(("id" = inline(OrderId), Path, description = "the order's id")),
    responses((status = OK, body = OrderView)))]
async fn cancel(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(order_id): AppPath<OrderId>,
) -> ApiResult<OrderView> {
    state.orders.cancel(session.user.id, order_id).await?;
    view_of(&state, order_id).await
}

/// The shop uses (核销) a paid order (admin token). A second use answers the same.
///
/// Refusals: `order_not_usable`, `order_not_found`.
#[utoipa::path(post, path = "/voucher-order/{id}/use", tag = TAG, security(("admin" = [])),
    params(("id" = inline(OrderId), Path, description = "the order's id")),
    responses((status = OK, body = OrderView)))]
async fn use_order(
    State(state): State<AppState>,
    _admin: Admin,
    AppPath(order_id): AppPath<OrderId>,
) -> ApiResult<OrderView> {
    state.orders.use_order(order_id).await?;
    view_of(&state, order_id).await
}

/// Ask for your paid order's money back (status 5 until the gateway confirms, then 6). The
/// unit does not go back on sale.
///
/// Refusals: `order_pending`, `order_not_refundable`, `order_not_found`.
#[utoipa::path(post, path = "/voucher-order/{id}/refund", tag = TAG, security(("session" = [])),
    params(("id" = inline(OrderId), Path, description = "the order's id")),
    responses((status = OK, body = OrderView)))]
async fn refund(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(order_id): AppPath<OrderId>,
) -> ApiResult<OrderView> {
    state.orders.refund(session.user.id, order_id).await?;
    view_of(&state, order_id).await
}

/// What a notice did to the order.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct NoticeView {
    order_id: String,
    status: i64,
    status_name: VoucherOrderStatus,
    payment: PaymentState,
    /// This notice had been applied before; nothing changed now.
    replayed: bool,
}

/// The payment gateway's notice (see the gateway contract in the book): `paid` or `refunded`,
/// signed in `x-pay-signature` (lower-case hex HMAC-SHA256 of the raw body with
/// `HMDP_PAY_SECRET`). Answered only once applied; the same notice again is answered the same
/// and applied once. A payment for a closed order is acknowledged and recorded as owed back
/// (`payment: refund_owed`).
///
/// Refusals: 401 `bad_signature`; 400 `invalid_request`; 404 `unknown_order`; 409
/// `unknown_trade`, `wrong_amount`, `unexpected_notice`.
#[utoipa::path(post, path = "/pay/notify", tag = TAG,
    request_body(content = NoticeBody, content_type = "application/json"),
    params(("x-pay-signature" = String, Header, description = "hex HMAC-SHA256 of the body")),
    responses((status = OK, body = NoticeView)))]
async fn notify(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<NoticeView> {
    let signature = headers
        .get(gateway::SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok());
    let a = state.orders.notify(&body, signature).await?;
    ok(NoticeView {
        order_id: a.order_id.to_string(),
        status: a.status.code(),
        status_name: a.status,
        payment: a.payment,
        replayed: a.replayed,
    })
}
