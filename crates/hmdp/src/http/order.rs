//! `/voucher-order/*`: grabbing a flash-sale voucher and following the order.

use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    ApiError, ApiResult, AppState, ErrorCode,
    extract::{AppPath, CurrentUser},
    ok,
};
use crate::{
    domain::{OrderId, VoucherId},
    seckill::OrderStatus,
    storage::orders::{self, VoucherOrder},
};

const TAG: &str = "order";

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(grab))
        .routes(routes!(my_orders))
        .routes(routes!(order_status))
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
    /// The order, once it is in the database.
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<VoucherOrder>,
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
            voucher_id,
            state: OrderState::Pending,
            order: None,
        }),
        OrderStatus::Failed { voucher_id } => ok(StatusView {
            id,
            id_str: id.to_string(),
            voucher_id,
            state: OrderState::Failed,
            order: None,
        }),
        OrderStatus::Created(order) => ok(StatusView {
            id,
            id_str: id.to_string(),
            voucher_id: order.voucher_id,
            state: OrderState::Created,
            order: Some(order),
        }),
        OrderStatus::Unknown => Err(ApiError::new(
            ErrorCode::OrderNotFound,
            "订单不存在 (no such order of yours)",
        )),
    }
}

/// Your written orders, newest first (at most 100).
#[utoipa::path(get, path = "/voucher-order/of/me", tag = TAG, security(("session" = [])),
    responses((status = OK, body = Vec<VoucherOrder>)))]
async fn my_orders(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
) -> ApiResult<Vec<VoucherOrder>> {
    ok(orders::orders_of_user(&state.db, session.user.id, 100).await?)
}
